"""``python -m analysis profile`` on a real traced training step, and its exposed/hidden split
on hand-built intervals with known answers.

The real program: a 2-layer MLP step (forward + backward) under ``jax.shard_map`` on a 4x2
mesh of the 8 CPU devices, weights sharded FSDP-style over X (all-gather forward,
reduce-scatter of the gradients) and the hidden dim over Y (an all-reduce, which JAX names
``psum_invariant.N``); the loss is summed over X (a scalar all-reduce).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from tpu_trace import TPU_HLO as _TPU_HLO
from tpu_trace import tpu_xplane as _tpu_xplane

from analysis.cli import main as cli
from analysis.profiling import profile as prof

STEPS = 5


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """``{"logdir", "hlo_file", "dump", "no_hlo_logdir", "hlo_text"}`` of one traced program."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    root = tmp_path_factory.mktemp("profile")
    mesh = jax.make_mesh((4, 2), ("X", "Y"))

    def local_loss(w1, w2, x):
        w1 = jax.lax.all_gather(w1, "X", axis=0, tiled=True)
        w2 = jax.lax.all_gather(w2, "X", axis=1, tiled=True)
        y = jax.lax.psum(jnp.tanh(x @ w1) @ w2, "Y")
        return jax.lax.psum(jnp.sum(y**2), "X") / x.shape[0]

    loss = jax.shard_map(local_loss, mesh=mesh, in_specs=(P("X", "Y"), P("Y", "X"), P("X", None)), out_specs=P())

    def step(w1, w2, x):
        value, (g1, g2) = jax.value_and_grad(loss, argnums=(0, 1))(w1, w2, x)
        return value, w1 - 0.01 * g1, w2 - 0.01 * g2

    B, D, F = 64, 256, 512
    w1 = jax.device_put(jnp.full((D, F), 0.01), NamedSharding(mesh, P("X", "Y")))
    w2 = jax.device_put(jnp.full((F, D), 0.01), NamedSharding(mesh, P("Y", "X")))
    x = jax.device_put(jnp.ones((B, D)), NamedSharding(mesh, P("X", None)))
    compiled = jax.jit(step).lower(w1, w2, x).compile(compiler_options={"xla_dump_to": str(root / "dump")})
    (root / "compiled.hlo.txt").write_text(compiled.as_text())
    value, w1, w2 = compiled(w1, w2, x)
    value.block_until_ready()

    def trace(logdir, steps, hlo_proto):
        nonlocal w1, w2
        opts = jax.profiler.ProfileOptions()
        opts.python_tracer_level, opts.host_tracer_level, opts.enable_hlo_proto = 0, 1, hlo_proto
        jax.profiler.start_trace(str(logdir), profiler_options=opts)
        for _ in range(steps):  # blocked each step: unbounded CPU collectives in flight can deadlock
            value, w1, w2 = compiled(w1, w2, x)
            value.block_until_ready()
        jax.profiler.stop_trace()

    trace(root / "logdir", STEPS, True)
    trace(root / "no_hlo", 1, False)
    return {
        "logdir": root / "logdir",
        "hlo_file": root / "compiled.hlo.txt",
        "dump": root / "dump",
        "no_hlo_logdir": root / "no_hlo",
        "hlo_text": compiled.as_text(),
        "root": root,
    }


def _run(capsys, *argv):
    rc = cli(["profile", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_every_compiled_collective_is_in_the_table_and_fits_in_the_step(traced, capsys):
    from analysis.hlo import parse_collectives

    out = traced["root"] / "report_json"
    rc, text, err = _run(
        capsys, traced["logdir"], "--hlo", traced["hlo_file"], "--mesh", "X=4,Y=2", "--out", out, "--json"
    )
    assert rc == 0, err
    doc = json.loads(text)
    assert (doc["format"], doc["format_version"], doc["logdir"]) == ("shardlab.profile", 2, str(traced["logdir"]))
    table = pd.DataFrame(doc["collectives"])
    expected = {c.name: c.kind for c in parse_collectives(traced["hlo_text"])}
    assert {"all-gather", "reduce-scatter", "all-reduce"} <= set(expected.values())
    assert dict(zip(table["name"], table["kind"])) == expected
    assert (table["executions"] == STEPS * 8).all()  # once a step on each of the 8 devices
    assert (table["executions_per_step"] == 1).all()
    assert set(table["mesh_axes"]) <= {"X", "Y"}
    steps = pd.read_csv(out / "steps.csv")
    assert len(steps) == STEPS * 8
    assert (steps["collective_s"] <= steps["step_s"] + 1e-12).all()
    assert math.isclose((steps["hidden_s"] + steps["exposed_s"]).sum(), steps["collective_s"].sum(), rel_tol=1e-9)
    assert table["time_per_step_s"].sum() <= steps["step_s"].median()
    assert table["step_share"].sum() <= 1.0
    for name in ("index.html", "report.md", "timeline.png", "collectives.csv"):
        assert (out / name).stat().st_size > 0


def test_a_psum_named_all_reduce_is_recognised_from_the_hlo_the_profile_carries(traced, capsys):
    out = traced["root"] / "report_carried"
    rc, text, err = _run(capsys, traced["logdir"], "--out", out)
    assert rc == 0, err
    assert "HLO from the profile" in text
    table = pd.read_csv(out / "collectives.csv")
    psum = table[table["name"].str.startswith("psum")]
    assert len(psum) == 2 and (psum["kind"] == "all-reduce").all() and (psum["executions"] > 0).all()
    assert psum["name"].iloc[0] in text  # in the printed top collectives
    assert (table["mesh_axes"].str.startswith("group of")).all()  # no --mesh: the group size


def test_a_dump_folder_gives_the_same_collectives(traced, capsys):
    out_dump, out_file = traced["root"] / "report_dump", traced["root"] / "report_file"
    assert _run(capsys, traced["logdir"], "--hlo", traced["dump"], "--out", out_dump)[0] == 0
    assert _run(capsys, traced["logdir"], "--hlo", traced["hlo_file"], "--out", out_file)[0] == 0
    a, b = pd.read_csv(out_dump / "collectives.csv"), pd.read_csv(out_file / "collectives.csv")
    assert sorted(a["name"]) == sorted(b["name"])
    assert sorted(a["V_bytes"]) == sorted(b["V_bytes"])


def test_the_model_needs_constants_on_cpu(traced, capsys):
    rc, text, _ = _run(capsys, traced["logdir"], "--hardware", "cpu", "--out", traced["root"] / "r_cpu")
    assert rc == 0 and "note: no model:" in text
    rc, text, err = _run(
        capsys,
        traced["logdir"],
        "--hardware",
        "cpu",
        "--link-bw-bidir-Bps",
        "1e10",
        "--hop-latency-s",
        "1e-6",
        "--mesh",
        "X=4,Y=2",
        "--out",
        traced["root"] / "r_cpu2",
        "--json",
    )
    assert rc == 0, err
    table = pd.DataFrame(json.loads(text)["collectives"])
    assert (table["model_time_s"] > 0).all() and (table["measured_over_model"] > 0).all()


@pytest.mark.parametrize(
    "case",
    ["missing", "empty", "garbage", "no_hlo", "hlo_missing", "other_module", "bad_mesh", "mesh_size", "bad_hardware"],
)
def test_bad_input_exits_2_with_one_line(traced, capsys, tmp_path, case):
    logdir, extra = traced["logdir"], []
    if case == "missing":
        logdir = tmp_path / "nope"
    elif case == "empty":
        logdir = tmp_path
    elif case == "garbage":
        logdir = tmp_path / "x.xplane.pb"
        logdir.write_bytes(b"not a trace")
    elif case == "no_hlo":
        logdir = traced["no_hlo_logdir"]
    elif case == "hlo_missing":
        extra = ["--hlo", tmp_path / "none.txt"]
    elif case == "other_module":
        (tmp_path / "m.txt").write_text("HloModule jit_other\n\nENTRY e {\n  ROOT p = f32[8]{0} parameter(0)\n}\n")
        extra = ["--hlo", tmp_path / "m.txt"]
    elif case == "bad_mesh":
        extra = ["--mesh", "X=four"]
    elif case == "mesh_size":
        extra = ["--mesh", "X=4,Y=4"]
    elif case == "bad_hardware":
        extra = ["--hardware", "tpu_v99"]
    rc, _, err = _run(capsys, logdir, *extra, "--out", tmp_path / "out")
    assert rc == 2
    assert err.startswith("error: ") and err.count("\n") == 1, err
    if case == "no_hlo":
        assert "--hlo" in err


# ---------------------------------------------------------------- synthetic intervals


def _ops(rows):
    """Hand-built :func:`analysis.trace.device_ops` rows: (device, hlo_op, start_ns, end_ns)."""
    df = pd.DataFrame(rows, columns=["device", "hlo_op", "start_ns", "end_ns"]).assign(hlo_module="m")
    df["duration_ns"] = df["end_ns"] - df["start_ns"]
    df["iteration"] = df.groupby(["device", "hlo_op"]).cumcount()
    return df


def _analyse(rows, opcodes, predict=None):
    from analysis.hlo import parse_collectives

    hlo_text = "p = f32[8]{0} parameter(0)\n" + "\n".join(
        f"{n} = f32[8]{{0}} all-reduce(p), replica_groups={{}}" for n, o in opcodes.items() if o == "all-reduce"
    )
    colls = {"m": parse_collectives(hlo_text, num_devices=2)}
    ops = prof.assign_steps(prof.label_ops(_ops(rows), {c.name for c in colls["m"]}, opcodes))
    steps = prof.step_table(ops)
    return steps, prof.collective_table(ops, prof.hlo_table(colls, None, predict), steps)


def test_half_of_a_collective_under_compute_is_hidden():
    # One step: psum.1 0-100 ns, compute 50-150 ns -> 50 hidden, 50 exposed, step 150 ns.
    steps, table = _analyse(
        [(0, "psum.1", 0, 100), (0, "fusion.1", 50, 150)], {"psum.1": "all-reduce", "fusion.1": "fusion"}
    )
    s = steps.iloc[0]
    assert (s["hidden_s"], s["exposed_s"], s["collective_s"], s["step_s"]) == pytest.approx(
        (50e-9, 50e-9, 100e-9, 150e-9)
    )
    row = table.iloc[0]
    assert row["kind"] == "all-reduce"
    assert (row["hidden_per_step_s"], row["exposed_per_step_s"]) == pytest.approx((50e-9, 50e-9))
    assert row["step_share"] == pytest.approx(100 / 150)


def test_split_per_device_steps_and_median_over_devices():
    # Two steps on two devices. Device 0: compute 0-40 then psum 40-100 (all exposed); step 2
    # the same shifted by 1000. Device 1: psum 0-60 fully under compute 0-100 (all hidden).
    rows = [
        (0, "fusion.1", 0, 40),
        (0, "psum.1", 40, 100),
        (0, "fusion.1", 1000, 1040),
        (0, "psum.1", 1040, 1100),
        (1, "fusion.1", 0, 100),
        (1, "psum.1", 0, 60),
        (1, "fusion.1", 1000, 1100),
        (1, "psum.1", 1000, 1060),
    ]
    steps, table = _analyse(rows, {"psum.1": "all-reduce", "fusion.1": "fusion"})
    assert sorted(steps["step"].unique()) == [0, 1]
    by_dev = steps.groupby("device")[["hidden_s", "exposed_s"]].sum()
    assert by_dev.loc[0].tolist() == pytest.approx([0, 120e-9])
    assert by_dev.loc[1].tolist() == pytest.approx([120e-9, 0])
    assert steps["idle_s"].tolist() == pytest.approx([0, 0, 0, 0])
    summary = prof.step_summary(steps)
    assert summary["hidden_s"].tolist() == pytest.approx([30e-9, 30e-9])  # median of 0 and 60 ns
    assert table.iloc[0]["executions"] == 4 and table.iloc[0]["time_median_s"] == pytest.approx(60e-9)


def test_a_fusion_xprof_files_under_a_collective_category_is_collective_time():
    # fusion.7 runs an all-gather inside (TPU category "all-gather fusion"): 0-100 ns; compute 100-150
    ops = _ops([(0, "fusion.7", 0, 100), (0, "fusion.1", 100, 150)])
    ops["hlo_category"] = ["all-gather fusion", "loop fusion"]
    labelled = prof.label_ops(ops, set(), {"fusion.7": "fusion", "fusion.1": "fusion"})
    assert labelled["is_collective"].tolist() == [True, False]
    s = prof.step_table(prof.assign_steps(labelled)).iloc[0]
    assert (s["collective_s"], s["compute_s"]) == pytest.approx((100e-9, 50e-9))


def test_a_collective_across_devices_is_timed_after_arrival_and_with_waiting():
    # device 0: 0-1000 ns, device 1: 100-5000, device 2: 200-3000. The last to arrive (200 ns)
    # is not the shortest device (device 0, 1000 ns, the old "last arrival" figure).
    rows = [(0, "psum.1", 0, 1000), (1, "psum.1", 100, 5000), (2, "psum.1", 200, 3000)]
    _, table = _analyse(rows, {"psum.1": "all-reduce"}, lambda c, axes: {"model_time_s": 1e-6, "model_note": ""})
    row = table.iloc[0]
    assert row["time_after_arrival_s"] == pytest.approx(4800e-9)  # 5000 - 200
    assert row["measured_over_model"] == pytest.approx(4.8)  # after arrival / the model's 1 us
    assert row["time_with_waiting_s"] == pytest.approx(5000e-9)  # 5000 - 0
    assert row["arrival_skew_s"] == pytest.approx(200e-9)
    assert row["time_last_arrival_s"] == row["time_after_arrival_s"]


def _step_table_one_group_at_a_time(ops):
    """The step table as first written: one (module, step, device) at a time."""
    from analysis.trace.overlap import merge_intervals, total_length

    rows = []
    for (module, step, device), g in ops[ops["step"] >= 0].groupby(["hlo_module", "step", "device"], sort=True):
        c, k = g["is_collective"], ~g["is_collective"]
        comp = merge_intervals(g.loc[k, "start_ns"], g.loc[k, "end_ns"])
        coll = merge_intervals(g.loc[c, "start_ns"], g.loc[c, "end_ns"])
        busy = total_length(merge_intervals(g["start_ns"], g["end_ns"]))
        span = g["end_ns"].max() - g["start_ns"].min()
        hidden = float(prof.overlap_with(coll[:, 0], coll[:, 1], comp).sum()) if len(coll) else 0.0
        cl = total_length(coll)
        t0, t1 = g["start_ns"].min(), g["end_ns"].max()
        rows.append(
            [module, step, device, t0, t1, span, busy, total_length(comp), cl, hidden, cl - hidden, span - busy]
        )
    out = pd.DataFrame(rows, columns=prof.STEP_COLUMNS)
    for c in prof.STEP_COLUMNS[5:]:
        out[c] *= 1e-9
    return out


def test_the_step_table_of_all_groups_at_once_is_the_one_group_at_a_time():
    rng = np.random.default_rng(7)
    for _ in range(60):
        n = int(rng.integers(1, 50))
        start = rng.integers(0, 5_000, n).astype(float)
        ops = pd.DataFrame(
            {
                "hlo_module": rng.choice(["a", "b"], n),
                "step": rng.integers(-1, 3, n),
                "device": rng.integers(0, 3, n),
                "start_ns": start,
                "end_ns": start + rng.integers(0, 900, n),  # some empty
                "is_collective": rng.random(n) < 0.4,
            }
        )
        got, want = prof.step_table(ops), _step_table_one_group_at_a_time(ops)
        assert len(got) == len(want)
        if len(want):
            pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-9, atol=1e-18)


def test_overlap_with_counts_only_the_covered_part():
    spans = np.array([[10.0, 20.0], [30.0, 40.0]])
    got = prof.overlap_with([0, 15, 25, 0, 35], [5, 35, 28, 100, 36], spans)
    assert got.tolist() == [0, 5 + 5, 0, 20, 1]


# ---------------------------------------------------------------- a TPU trace, as TPUs write it
# (tests/helpers/tpu_trace.py: the trace and its HLO, shared with test_profile_load.py)


def test_profile_of_a_tpu_trace_names_the_module_by_program_id_and_times_its_collectives(tmp_path, capsys):
    """Per step (ns): compute 0-100, a sync all-reduce 100-300 (its groups only in the trace's
    instruction text: the HLO says ``replica_groups={}``), an async all-gather 300-600 whose
    start and done enclose compute 320-520. A second module in the HLO shares every instruction
    name but holds no collective: only ``program_id`` tells which one ran."""
    ar = "%all-reduce.5 = f32[1024]{0} all-reduce(f32[1024]{0} %fusion.1), replica_groups={{0,1},{2,3}}, to_apply=%add"
    ag, ag4 = "(f32[1024]{0}, f32[4096]{0})", "{{0,1,2,3}}"
    ops = [
        ("%fusion.1 = f32[1024]{0} fusion(f32[1024]{0} %p.1), kind=kLoop", "fusion.1", "loop fusion", 0, 100),
        (ar, "all-reduce.5", "all-reduce", 100, 200),
        (
            f"%all-gather-start.2 = {ag} all-gather-start(f32[1024]{{0}} %all-reduce.5), replica_groups={ag4}",
            "all-gather-start.2",
            "all-gather",
            300,
            20,
        ),
        ("%fusion.2 = f32[1024]{0} fusion(f32[1024]{0} %p.1), kind=kLoop", "fusion.2", "loop fusion", 320, 200),
        (
            f"%all-gather-done.2 = f32[4096]{{0}} all-gather-done({ag} %all-gather-start.2)",
            "all-gather-done.2",
            "all-gather",
            520,
            80,
        ),
    ]
    trace = tmp_path / "plugins" / "profile" / "s1" / "tpu.xplane.pb"
    trace.parent.mkdir(parents=True)
    trace.write_bytes(_tpu_xplane(4, 2, ops))
    hlo = tmp_path / "hlo.txt"
    hlo.write_text(_TPU_HLO)
    out = tmp_path / "report"
    rc, text, err = _run(capsys, tmp_path, "--hlo", hlo, "--out", out)
    assert rc == 0, err
    assert "jit_step: 2 steps on 4 devices, step 600 ns (collectives 500 ns, exposed 300 ns)" in text
    table = pd.read_csv(out / "collectives.csv").set_index("name")
    ar_row, ag_row = table.loc["all-reduce.5"], table.loc["all-gather-start.2"]
    assert (ar_row["hlo_module"], ar_row["replica_groups"], ar_row["group_size"], ar_row["num_groups"]) == (
        "jit_step",
        "{{0,1},{2,3}}",
        2,
        2,
    )
    assert ag_row["replica_groups"] == "{{0,1,2,3}}" and ag_row["group_size"] == 4
    for row, t, hidden in ((ar_row, 200e-9, 0.0), (ag_row, 300e-9, 200e-9)):
        # once a step on each device: 4 devices x 2 steps
        assert (row["executions"], row["devices"], row["executions_per_step"]) == (8, 4, 1)
        assert row["time_median_s"] == pytest.approx(t)
        assert row["hidden_per_step_s"] == pytest.approx(hidden)
    steps = pd.read_csv(out / "steps.csv")
    assert len(steps) == 8 and set(steps["hlo_module"]) == {"jit_step"}
    for col, v in (("step_s", 600e-9), ("collective_s", 500e-9), ("compute_s", 300e-9), ("hidden_s", 200e-9)):
        assert steps[col].tolist() == pytest.approx([v] * 8), col


def test_profile_of_the_real_tpu_trace_finds_its_module_and_says_it_holds_no_collective(capsys, tmp_path):
    """No collective is no error: the step's time by op category instead (issue 37; the
    categories themselves: tests/analysis/profiling/test_op_categories.py)."""
    from pathlib import Path

    trace = Path(__file__).resolve().parents[4] / "shared" / "traces" / "tpu_v6e1_pallas_matmul.xplane.pb"
    if not trace.is_file():
        pytest.skip(f"no real traces at {trace.parent}")
    rc, text, err = _run(capsys, trace, "--out", tmp_path / "report")
    assert rc == 0, err
    assert text.startswith(
        "jit_matmul_optimized: 3 steps on 1 devices, step 75.8 us (mean), its ops 75.8 us; no collectives"
    )
