"""Sharded matmuls on 8 CPU devices: the HLO of each book case, every strategy's result
against NumPy, validation before device work, and the report's case table."""

from __future__ import annotations

import json

import pytest

from analysis.hlo import group_mesh_axes, parse_collectives
from analysis.report import write_report
from runner import run
from runner.config.matmul_plan import parse_matmul, plan
from runner.config.spec import build_spec
from runner.errors import ConfigError

DIMS = ["op.dims.I=64", "op.dims.J=128", "op.dims.K=64"]
FAST = ["timing.min_iters=3", "timing.budget_s=0.1", "timing.warmup_min_iters=1", "timing.rounds=1"]
SMALL = DIMS + FAST + ["trace.enabled=false"]


def emitted(point_dir, result) -> list[str]:
    """``kind over axes`` for each collective in the point's compiled HLO."""
    import numpy as np

    axes = result["spec"]["mesh"]["axes"]
    ids = np.arange(int(np.prod(list(axes.values())))).reshape(list(axes.values()))
    text = (point_dir / result["files"]["hlo_compiled"]).read_text()
    return sorted(
        f"{c.kind} over {''.join(group_mesh_axes(c.replica_groups or (tuple(ids.ravel()),), ids, list(axes)))}"
        for c in parse_collectives(text, num_devices=ids.size)
    )


@pytest.mark.parametrize(
    "case,want",
    [
        ("mm_case1", []),
        ("mm_case2", ["all-gather over Y"]),
        ("mm_case3", ["all-reduce over Y"]),
        # The book prescribes a ReduceScatter here; XLA all-reduces and slices.
        ("mm_case3_scatter", ["all-reduce over X"]),
        ("mm_case4", ["all-gather over X"]),
    ],
)
def test_each_book_case_compiles_to_the_collectives_seen_here(compose_cfg, tmp_path, case, want):
    # Equal dims, as in the sweep: with a small K XLA prefers to slice B and all-reduce the
    # (then smaller) product in case 2, which the report explains.
    square = ["op.dims.I=256", "op.dims.J=256", "op.dims.K=256"]
    result = run(compose_cfg([f"op={case}", "mesh=xy_4x2", *square, *FAST, "trace.enabled=false"]), tmp_path)
    assert result["status"] == "ok", result.get("error")
    assert result["check"]["passed"]
    assert emitted(tmp_path, result) == want


@pytest.mark.parametrize(
    "op,strategy,kinds",
    [
        ("mm_case2", "allgather_then_matmul", {"all-gather"}),
        ("mm_case2", "matmul_then_allreduce", {"all-reduce"}),  # Question 4's strategy 2: slice B
        ("mm_case3_scatter", "matmul_then_reducescatter", {"reduce-scatter"}),
        ("mm_case3_scatter", "matmul_then_allreduce", {"all-reduce"}),
        ("mm_case3_scatter", "collective_matmul", {"collective-permute"}),
        ("mm_case4", "collective_matmul", {"collective-permute"}),
        ("mm_case4", "allgather_then_matmul", {"all-gather"}),
        ("mm_q4", "matmul_then_allreduce", {"all-reduce"}),
    ],
)
def test_every_strategy_matches_numpy(compose_cfg, tmp_path, op, strategy, kinds):
    dims = ["op.dims.B=64", "op.dims.D=128", "op.dims.F=64"] if op == "mm_q4" else DIMS
    result = run(
        compose_cfg(
            [
                f"op={op}",
                f"op.strategy={strategy}",
                "mesh=x8" if op != "mm_case2" else "mesh=xy_4x2",
                *dims,
                *FAST,
                "trace.enabled=false",
            ]
        ),
        tmp_path,
    )
    assert result["status"] == "ok", result.get("error")
    assert result["check"] == {**result["check"], "passed": True, "max_rel_error": 0.0}
    assert {e.split(" over ")[0] for e in emitted(tmp_path, result)} == kinds
    assert result["spec"]["flops"] == 2.0 * 64 * 128 * 64


def test_collective_matmul_ring_has_one_permute_per_step(compose_cfg, tmp_path):
    result = run(compose_cfg(["op=mm_ring_allgather", "mesh=x8", *SMALL]), tmp_path)
    assert result["check"]["passed"]
    assert emitted(tmp_path, result) == ["collective-permute over X"] * 7  # X=8: 7 shifts


def test_bfloat16_matmul_within_tolerance(compose_cfg, tmp_path):
    result = run(compose_cfg(["op=mm_case3", "mesh=xy_4x2", "dtype=bfloat16", *SMALL]), tmp_path)
    assert result["status"] == "ok", result.get("error")
    assert result["check"]["passed"] and result["check"]["max_rel_error"] <= 1e-2


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (["op=mm_case4_invalid"], "op.expr="),
        (["op=mm_case1", "op.strategy=matmul_then_allreduce"], "no contracting dim"),
        (["op=mm_case4", "op.strategy=matmul_then_reducescatter"], "case 4"),
        (["op=mm_case2", "op.strategy=collective_matmul"], "not one of the two ring patterns"),
        (["op=matmul", "~op.dims.K"], "op.dims: no size for K"),
        (["op=matmul", "op.dims.J=1001"], "not divisible"),
        (["op=matmul", "op.expr='A[I, J_Q] * B[J, K] -> C[I, K]'"], "mesh axis Q is not in the mesh"),
        (["op=matmul", "op.expr='A[I, J] * B[J, K]'"], "give the output"),
        (["op=all_gather", "op.expr='A[I, J] * B[J, K] -> C[I, K]'"], "op.expr / op.dims are for op=matmul"),
    ],
)
def test_bad_matmul_configs_fail_before_device_work(compose_cfg, overrides, needle):
    with pytest.raises(ConfigError) as err:
        build_spec(compose_cfg(["mesh=xy_4x2", *overrides]))
    assert needle in str(err.value)


def test_invalid_case_is_recorded_not_crashed(compose_cfg, tmp_path):
    result = run(compose_cfg(["op=mm_case4_invalid", "mesh=xy_4x2"]), tmp_path)
    assert result["status"] == "failed" and result["error_type"] == "ConfigError"
    assert "C[I, K_X]" in result["error"]  # names a valid way to write it
    assert not (tmp_path / "hlo").exists()  # nothing compiled
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "failed"


def test_question4_plans_slice_instead_of_gather():
    mm = parse_matmul("X[B, D] * Y[D_X, F] -> Z[B, F]")
    s1, s2 = plan(mm, "allgather_then_matmul", {"X": 8}), plan(mm, "matmul_then_allreduce", {"X": 8})
    assert s1.gather["rhs"] == {"D": ("X",)} and not s1.psum
    assert s2.slice["lhs"] == {"D": ("X",)} and s2.psum == ("X",)
    rs = plan(parse_matmul("A[I, J_X] * B[J_X, K] -> C[I, K_X]"), "matmul_then_reducescatter", {"X": 8})
    assert rs.scatter == {"K": ("X",)} and not rs.psum and not rs.out_slice


def test_report_holds_the_case_table(compose_cfg, tmp_path):
    for i, case in enumerate(["mm_case2", "mm_case3_scatter", "mm_case4_invalid"]):
        run(
            compose_cfg(
                [f"op={case}", "mesh=xy_4x2", "op.dims.I=128", "op.dims.J=128", "op.dims.K=128", *FAST, "trace.iters=2"]
            ),
            tmp_path / f"{i}_op={case}",
        )
    write_report(tmp_path)
    md = (tmp_path / "report" / "report.md").read_text()
    section = md[md.index("## Sharded matmuls") :]
    section = section[: section.index("\n## ", 5)] if "\n## " in section[5:] else section
    tables = [t for t in _tables(section) if t]
    what, cost = tables[0], tables[1]
    rows = {r["point"]: r for r in what}
    assert rows["0_op=mm_case2"]["match"] == "same"
    assert rows["1_op=mm_case3_scatter"]["match"] == "DIFFERS"
    assert "reduce-scatter over X" in rows["1_op=mm_case3_scatter"]["book prescribes"]
    assert "invalid as written" in section  # the case-4 point's reason is said below the table
    # the trace was parsed: the overlap cell itself holds a share for the points with collectives
    # (CPU collectives are synchronous, so it is 0% there, but never empty)
    over = {r["point"]: r["overlapped"] for r in cost}
    for point in ("0_op=mm_case2", "1_op=mm_case3_scatter"):
        assert over[point].endswith("%") and 0.0 <= float(over[point].rstrip("%")) <= 100.0, over


def _tables(markdown: str) -> list[list[dict]]:
    """Every Markdown table in ``markdown`` as a list of {header: cell} rows."""
    out, cur, header = [], [], None
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            if set(line.strip()) <= {"|", "-"}:  # the header's underline
                continue
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if header is None:
                header = cells
            else:
                cur.append(dict(zip(header, cells)))
        elif header is not None:
            out.append(cur)
            cur, header = [], None
    return out
