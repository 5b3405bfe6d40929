"""``analysis profile`` of a step without collectives: the step's time by op category, as
XProf's op profile groups it (issue 37), not "nothing to profile".

A real CPU run of a user's step (a matmul in a ``lax.scan``, unsharded: no collective) is
profiled by category: the dot's category is the one XLA names for the instruction the compiled
HLO runs it in, it ran 4 times a step, the loop's own time is apart from its body's, and the
categories add up to the step's op time. The real GPU and TPU traces of ``../shared/traces``
(none holds a collective) are profiled by category and agree with XProf 2.24.2's own op profile
(``xspace_to_tool_data(..., "op_profile", {"group_by": "category"})``, run on copies of them).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from shardlab_cli import analysis, runner

from analysis.book.units import fmt_duration
from analysis.profiling.op_categories import category_table, instruction_categories, label_categories
from analysis.profiling.profile_load import analyse, load_hlo

TRACES = Path(__file__).resolve().parents[4] / "shared" / "traces"
FAST = ["timing.rounds=1", "timing.budget_s=0.3", "timing.min_iters=5", "trace.iters=3"]

SCAN_STEP = """
import jax
import jax.numpy as jnp


def step(x, w):
    def body(c, _):
        return jnp.tanh(c @ w), None

    y, _ = jax.lax.scan(body, x, None, length=4)
    return y
"""

# XLA's name (HloInstruction::ToCategory) for the instruction a dot runs in
_KIND = {"kLoop": "loop fusion", "kInput": "input fusion", "kOutput": "output fusion", "kCustom": "custom fusion"}


def _dot_holder(hlo: str) -> tuple[str, str]:
    """(name, XLA's category) of the instruction that runs the dot as an op of its own, read
    from the compiled HLO by hand: the fusion that calls the computation holding the dot, or a
    plain ``dot`` outside any fused computation."""
    bodies = dict(re.findall(r"(?ms)^(?:ENTRY )?%?([\w.\-]+) [^\n]*\{\n(.*?)^\}", hlo))
    fused = set(re.findall(r"calls=%?([\w.\-]+)", hlo))
    for comp, body in bodies.items():
        for line in body.splitlines():
            m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = \S+ ([a-z][\w\-]*)\(", line)
            if not m:
                continue
            if m.group(2) == "dot" and comp not in fused:
                return m.group(1), "dot"
            called = re.search(r"calls=%?([\w.\-]+)", line)
            if m.group(2) == "fusion" and called and " dot(" in bodies.get(called.group(1), ""):
                return m.group(1), _KIND[re.search(r"kind=(k\w+)", line).group(1)]
    raise AssertionError("no instruction runs the dot")


@pytest.fixture(scope="module")
def scan_point(tmp_path_factory):
    root = tmp_path_factory.mktemp("no_collectives")
    (root / "scan_step.py").write_text(SCAN_STEP)
    point = root / "run"
    runner(
        "op=program",
        f"op.target={root / 'scan_step.py'}:step",
        "op.inputs=['x[B, D]', 'w[D, E]']",  # unsharded: every device computes the whole step, no collective
        "op.dims={B: 128, D: 128, E: 128}",
        *FAST,
        f"hydra.run.dir={point}",
        expect=0,
    )
    return point


def test_a_step_without_collectives_gets_its_time_by_op_category(scan_point):
    proc = analysis("profile", scan_point, timeout=120, expect=0)
    cats = pd.read_csv(scan_point / "profile_report" / "categories.csv").set_index("category")
    steps = pd.read_csv(scan_point / "profile_report" / "steps.csv")
    hlo = (scan_point / "hlo" / "compiled.hlo.txt").read_text()
    holder, category = _dot_holder(hlo)
    while_op = re.search(r"(?m)^\s*%?([\w.\-]+) = .* while\(", hlo).group(1)

    # the dot: in the category XLA names its instruction, 4 runs a step (the scan's length)
    dot = cats.loc[category]
    assert (dot["top_op"], dot["top_op_holds"], dot["executions_per_step"]) == (holder, "dot", 4)
    # the loop's own time is its category's; its body's ops are in theirs, not counted twice
    assert (cats.loc["while", "top_op"], cats.loc["while", "executions_per_step"]) == (while_op, 1)
    assert set(steps["hlo_module"]) == {"jit_run"} and set(cats["hlo_module"]) == {"jit_run"}
    assert len(steps) == 3 * 8  # 3 traced steps on 8 devices
    # the categories add up to the step's op time (the union of its ops, per step and device)
    assert cats["time_per_step_s"].sum() == pytest.approx(steps["busy_s"].mean(), rel=1e-9)
    assert cats["share"].sum() == pytest.approx(1.0)
    assert cats["time_per_step_s"].is_monotonic_decreasing
    # and what the console says
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(
        f"jit_run: 3 steps on 8 devices, step {fmt_duration(steps['step_s'].mean())} (mean), "
        f"its ops {fmt_duration(steps['busy_s'].mean())}; no collectives (its HLO holds none)."
    ), lines[0]
    assert lines[1].split() == [
        "category",
        "ops",
        "runs/step",
        "per",
        "step",
        "share",
        "top",
        "op",
        "holds",
        "of",
        "category",
    ]
    # a row per category, in the table's order (largest time first); which category is largest
    # is the machine's to say (a busy one slows the loop's fusions more than the dot)
    rows = lines[2 : 2 + len(cats)]
    assert [r.split()[: len(c.split())] for r, c in zip(rows, cats.index)] == [c.split() for c in cats.index]
    total = [ln for ln in lines if ln.startswith("all ops")]
    assert total and fmt_duration(cats["time_per_step_s"].sum()) in total[0] and "100.0%" in total[0]
    assert "nothing to profile" not in proc.stdout + proc.stderr


def test_json_carries_the_categories_and_an_empty_collective_table(scan_point, tmp_path):
    proc = analysis("profile", scan_point, "--json", "--out", tmp_path / "report", timeout=120, expect=0)
    body = json.loads(proc.stdout)
    assert body["collectives"] == []
    cats = pd.DataFrame(body["categories"])
    assert list(cats.columns) == [
        "hlo_module",
        "category",
        "ops",
        "executions_per_step",
        "time_per_step_s",
        "share",
        "top_op",
        "top_op_holds",
        "top_op_share",
    ]
    assert "while" in set(cats["category"]) and (cats["time_per_step_s"] > 0).all()


# --- the real traces, against XProf's own op profile --------------------------------------------

# XProf 2.24.2's op profile by category of the MI355X trace (JAX + TransformerEngine on ROCm; the
# trace carries no hlo_category, so both take the category from the compiled HLO): the category
# of each op and the total time of each category, in ns
MI355X_XPROF_CATEGORY = {
    "custom-call.1": "custom-call",
    "gemm_fusion_dot": "custom fusion",
    "gemm_fusion_dot.1": "custom fusion",
    "gemm_fusion_dot.3": "custom fusion",  # XProf: "gemm_fusion_dot and its duplicate(s)"
    "gemm_fusion_dot.6": "custom fusion",
    "gemm_fusion_dot.7": "custom fusion",
    "input_concatenate_fusion": "input fusion",
    "input_reduce_fusion": "input fusion",
    "input_reduce_fusion.1": "input fusion",
    "loop_reduce_fusion": "loop fusion",
    "loop_reduce_fusion.1": "loop fusion",
    "loop_reduce_fusion.2": "loop fusion",  # XProf: "loop_reduce_fusion.3 and its duplicate(s)"
    "loop_reduce_fusion.3": "loop fusion",
    "loop_reduce_fusion.4": "loop fusion",
    "te_fused_attn_backward_ffi.12": "custom-call",
    "te_fused_attn_backward_ffi.18": "custom-call",
    "te_fused_attn_forward_ffi.10": "custom-call",
    "te_fused_attn_forward_ffi.15": "custom-call",
    "wrapped_convert": "loop fusion",
    "wrapped_convert.1": "loop fusion",
}
MI355X_XPROF_NS = {"custom-call": 7326184, "custom fusion": 3627872, "loop fusion": 900326, "input fusion": 279203}
MI300X_XPROF_CATEGORY = {
    "input_transpose_fusion": "input fusion",
    "input_transpose_fusion.1": "input fusion",
    "cudnn-conv.1": "custom-call",
    "loop_transpose_fusion": "loop fusion",
}
MI300X_XPROF_SHARE = {"input fusion": 14825540 / 27550676, "custom-call": 12531616 / 27550676}


def _trace(name: str) -> Path:
    path = TRACES / f"{name}.xplane.pb"
    if not path.is_file():
        pytest.skip(f"no real traces at {TRACES}")
    return path


def _analyse(name: str, hlo: str | None = None):
    path = _trace(name)
    texts, _ = load_hlo(hlo, [path])
    return analyse([path], texts)


def test_the_mi355x_trace_by_category_is_xprofs_op_profile():
    found = _analyse("gpu_mi355x_te_fused_attn")
    assert dict(sorted(set(zip(found.ops["hlo_op"], found.ops["category"])))) == MI355X_XPROF_CATEGORY
    cats = found.categories.set_index("category")
    device_steps = len(found.steps)  # (step, device) pairs: 5 steps on its one active GPU
    totals = (cats["time_per_step_s"] * device_steps * 1e9).round().astype(int).to_dict()
    assert totals == MI355X_XPROF_NS
    assert list(cats.index) == ["custom-call", "custom fusion", "loop fusion", "input fusion"]  # most time first
    assert (cats.loc["custom fusion", "top_op"], cats.loc["custom fusion", "top_op_holds"]) == (
        "gemm_fusion_dot",
        "dot",
    )
    assert cats.loc["custom-call", "top_op_holds"] == "te_fused_attn_backward_ffi"


def test_the_mi300x_conv3d_trace_by_category(capsys, tmp_path):
    from analysis.cli import main as cli

    found = _analyse("gpu_mi300x8_conv3d")
    assert found.on_cpu is False  # its host threads' launch events carry hlo_op too: still a GPU trace
    assert dict(set(zip(found.ops["hlo_op"], found.ops["category"]))) == MI300X_XPROF_CATEGORY
    cats = found.categories.set_index("category")
    assert list(cats.index) == ["input fusion", "custom-call", "loop fusion"]
    assert (cats.loc["custom-call", "top_op"], cats.loc["custom-call", "top_op_holds"]) == (
        "cudnn-conv.1",
        "__cudnn$convForward",  # the convolution, a cuDNN (MIOpen) call
    )
    for category, share in MI300X_XPROF_SHARE.items():  # per step; XProf's whole-trace shares
        assert cats.loc[category, "share"] == pytest.approx(share, abs=2e-3), category
    rc = cli(["profile", str(_trace("gpu_mi300x8_conv3d")), "--out", str(tmp_path / "report")])
    text = capsys.readouterr().out
    assert rc == 0
    assert "custom-call" in text and "__cudnn$convForward" in text and "nothing to profile" not in text
    assert "CPU" not in (tmp_path / "report" / "report.md").read_text()  # no CPU-trace banner on a GPU trace
    assert (tmp_path / "report" / "categories.csv").is_file()


def test_the_tpu_pallas_trace_takes_the_category_it_carries():
    found = _analyse("tpu_v6e1_pallas_matmul")
    assert set(found.ops["category"]) == {"custom-call"}  # the trace's own hlo_category
    row = found.categories.iloc[0]
    assert (row["category"], row["top_op"], row["top_op_holds"], row["executions_per_step"]) == (
        "custom-call",
        "matmul_optimized.1",
        "tpu_custom_call",
        1,
    )
    # XProf's op profile: 227262.5 ns in custom-call over the trace's 3 steps
    assert row["time_per_step_s"] == pytest.approx(227262.5e-9 / 3, rel=1e-5)


# --- the rules, where the real traces and runs do not reach -----------------------------------

HLO = """HloModule jit_f, entry_computation_layout={(f32[8,8]{1,0})->f32[8,8]{1,0}}

%fused_dot (p0: f32[8,8], p1: f32[8,8]) -> f32[8,8] {
  %p0 = f32[8,8]{1,0} parameter(0)
  %p1 = f32[8,8]{1,0} parameter(1)
  ROOT %dot.1 = f32[8,8]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%body (b: f32[8,8]) -> f32[8,8] {
  %b = f32[8,8]{1,0} parameter(0)
  ROOT %dot.2 = f32[8,8]{1,0} dot(%b, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%cond (c: f32[8,8]) -> pred[] {
  %c = f32[8,8]{1,0} parameter(0)
  ROOT %t = pred[] constant(true)
}

ENTRY %main (x: f32[8,8]) -> f32[8,8] {
  %x = f32[8,8]{1,0} parameter(0)
  %output_fusion = f32[8,8]{1,0} fusion(%x, %x), kind=kOutput, calls=%fused_dot, metadata={op_name="kind=kLoop"}
  %transpose.1 = f32[8,8]{0,1} transpose(%output_fusion), dimensions={1,0}
  %copy.2 = f32[8,8]{1,0} copy(%transpose.1)
  %bitcast.3 = f32[64]{0} bitcast(%copy.2)
  %reshape.4 = f32[8,8]{1,0} reshape(%bitcast.3)
  %add.5 = f32[8,8]{1,0} add(%reshape.4, %x)
  %conv.6 = f32[1,8,8,1]{3,2,1,0} convolution(%a, %b), window={size=3x3 rhs_dilate=2x2}, dim_labels=b01f_01io->b01f
  %conv.7 = f32[1,8,8,1]{3,2,1,0} convolution(%a, %b), window={size=3x3 lhs_dilate=1x1}, dim_labels=b01f_01io->b01f
  %cc.8 = f32[8,8]{1,0} custom-call(%x), custom_call_target="__cublas$gemm"
  %while.9 = f32[8,8]{1,0} while(%add.5), condition=%cond, body=%body
  %dus.10 = f32[8,8]{1,0} dynamic-update-slice(%x, %x, %i, %i)
  ROOT %reduce.11 = f32[8,8]{1,0} reduce(%while.9, %zero), dimensions={}, to_apply=%add_c
}
"""


def test_xlas_category_of_each_instruction():
    cats = instruction_categories(HLO)
    assert cats["p0"] == cats["x"] == ("parameter", "")
    assert {
        n: cats[n] for n in ["dot.1", "dot.2", "output_fusion", "add.5", "reshape.4", "while.9", "dus.10", "reduce.11"]
    } == {
        "dot.1": ("dot", "dot"),
        "dot.2": ("dot", "dot"),
        "output_fusion": ("output fusion", "dot"),  # its kind, not a string that says kind=kLoop
        "add.5": ("non-fusion elementwise", ""),
        "reshape.4": ("data formatting", ""),
        "while.9": ("while", ""),  # its body's dot runs as an op of its own, in its own category
        "dus.10": ("dynamic-update-slice", ""),
        "reduce.11": ("reduce", ""),
    }
    assert cats["transpose.1"] == cats["copy.2"] == ("data formatting", "")
    assert cats["bitcast.3"] == ("bitcast", "")
    assert cats["conv.6"] == ("convolution window-dilated", "convolution")
    assert cats["conv.7"] == ("convolution", "convolution")  # a dilation of 1 is none
    assert cats["cc.8"] == ("custom-call", "__cublas$gemm")


def _ops(rows):
    cols = ["device", "hlo_module", "hlo_op", "start_ns", "end_ns", "step", "hlo_category"]
    ops = pd.DataFrame(rows, columns=cols)
    return ops.assign(duration_ns=ops["end_ns"] - ops["start_ns"])


def test_a_category_the_trace_carries_wins_and_nested_ops_count_once():
    """A TPU trace's hlo_category is XProf's category as it is (a "convolution fusion" that
    the HLO alone calls an output fusion); a while loop's event spans its body's ops, whose
    time is theirs: the loop keeps only its own."""
    ops = _ops(
        [
            (0, "jit_f", "output_fusion", 0, 100, 0, "convolution fusion"),
            (0, "jit_f", "while.9", 100, 400, 0, None),
            (0, "jit_f", "dot.2", 110, 200, 0, None),
            (0, "jit_f", "dot.2", 250, 390, 0, None),
            (0, "jit_f", "add.5", 400, 450, 0, ""),
        ]
    )
    labelled = label_categories(ops, {"jit_f": instruction_categories(HLO)})
    assert labelled["category"].tolist() == ["convolution fusion", "while", "dot", "dot", "non-fusion elementwise"]
    assert labelled["self_ns"].tolist() == [100, 70, 90, 140, 50]
    cats = category_table(labelled).set_index("category")
    assert cats["time_per_step_s"].to_dict() == pytest.approx(
        {"dot": 230e-9, "convolution fusion": 100e-9, "while": 70e-9, "non-fusion elementwise": 50e-9}
    )
    assert cats.loc["dot", "executions_per_step"] == 2
    assert cats["time_per_step_s"].sum() == pytest.approx(450e-9)  # the step's ops: 0 to 450 ns, no gap
