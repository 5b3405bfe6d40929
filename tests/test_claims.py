"""The chapter's claims: verdict logic on synthetic ratios, the table on a synthetic sweep
with known answers, and the backward-pass claim from real compiled HLO."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.claims import FAILS, HOLDS, MISSING, UNSURE, claims_table, verdict
from runner import run


@pytest.mark.parametrize(
    "ratio,lo,hi,expected,want",
    [
        (1.0, 0.9, 1.1, 1.0, HOLDS),
        (1.2, 1.1, 1.3, 1.0, HOLDS),  # within 25%
        (1.6, 1.5, 1.7, 1.0, FAILS),  # whole CI above the band
        (1.4, 1.1, 1.7, 1.0, UNSURE),  # point outside, CI straddles the band's edge
        (0.26, 0.2, 0.3, 0.25, HOLDS),
        (1.0, 0.95, 1.05, 0.25, FAILS),
        (1.7, 1.5, 1.8, ">1", HOLDS),
        (0.9, 0.8, 1.0, ">1", FAILS),
        (1.05, 0.97, 1.1, ">1", UNSURE),
        (np.nan, np.nan, np.nan, 1.0, MISSING),
    ],
)
def test_verdict(ratio, lo, hi, expected, want):
    assert verdict(ratio, lo, hi, expected) == want


def _row(job, op, group, V, t, axes="X", grad=False, kind=None, backend="cpu"):
    return {
        "job": job,
        "status": "ok",
        "op": op,
        "group_size": group,
        "V_bytes": V,
        "axes": axes,
        "n_axes": len(axes),
        "grad": grad,
        "time_s": t,
        "time_ci_low_s": t * 0.98,
        "time_ci_high_s": t * 1.02,
        "backend": backend,
        "hlo_kind": kind
        or {
            "all_gather": "all-gather",
            "reduce_scatter": "reduce-scatter",
            "all_reduce": "all-reduce",
            "all_to_all": "all-to-all",
        }[op],
        "expr": None,
        "dims": None,
        "strategy": None,
    }


def test_table_on_a_sweep_where_the_book_is_right():
    big, small = 8 << 20, 4096
    rows = [
        _row("ag8", "all_gather", 8, big, 1e-3),
        _row("ag2", "all_gather", 2, big, 1.05e-3),
        _row("rs8", "reduce_scatter", 8, big, 1e-3),
        _row("ar8", "all_reduce", 8, big, 2e-3),
        _row("a2a8", "all_to_all", 8, big, 0.25e-3),
        _row("agxy", "all_gather", 8, big, 0.5e-3, axes="XY"),
        _row("ag8s", "all_gather", 8, small, 40e-6),
        _row("ag2s", "all_gather", 2, small, 10e-6),
        _row("gag", "all_gather", 8, big, 1e-3, grad=True, kind="reduce-scatter"),
        _row("grs", "reduce_scatter", 8, big, 1e-3, grad=True, kind="all-reduce"),
    ]
    t = claims_table(pd.DataFrame(rows)).set_index("claim")
    assert (t.iloc[:7]["verdict"] == HOLDS).all(), t[["ratio", "verdict"]]
    assert t.loc["AllToAll costs a quarter of an AllGather (on a ring)", "ratio"] == pytest.approx(0.25)
    # the grad of the ReduceScatter compiled to an all-reduce here: the HLO decides, not the time
    back = t.loc["the backward pass of a ReduceScatter is an AllGather"]
    assert back["verdict"] == FAILS and "all-reduce" in back["reason"]
    assert t.loc["collective matmul approaches max(T_math, T_comms)", "verdict"] == MISSING


def test_table_says_why_on_cpu():
    big = 8 << 20
    rows = [_row("ag8", "all_gather", 8, big, 1e-3), _row("a2a8", "all_to_all", 8, big, 0.9e-3)]
    t = claims_table(pd.DataFrame(rows)).set_index("claim")
    a2a = t.loc["AllToAll costs a quarter of an AllGather (on a ring)"]
    assert a2a["verdict"] == FAILS
    assert "no ring" in a2a["reason"] and "0.90x" in a2a["reason"]
    assert t.loc["AllReduce costs twice an AllGather", "verdict"] == MISSING


@pytest.mark.parametrize("op,backward", [("all_gather", "reduce-scatter"), ("reduce_scatter", "all-gather")])
def test_backward_pass_hlo_on_cpu(compose_cfg, tmp_path, op, backward):
    from analysis.rundir import read_results
    from analysis.summary import summary_table

    cfg = compose_cfg(
        [
            f"op={op}",
            "op.grad=true",
            "op.size_bytes=64KiB",
            "timing.min_iters=3",
            "timing.budget_s=0.1",
            "trace.enabled=false",
        ]
    )
    job = tmp_path / "0_grad"
    result = run(cfg, job)
    assert result["status"] == "ok" and result["check"]["passed"], result.get("error")
    s = summary_table(read_results(tmp_path))
    assert list(s["hlo_kind"]) == [backward]
    assert not s["is_target"].any()  # a backward pass is kept out of the forward collective's fits


def test_grad_of_other_collectives_is_refused(compose_cfg):
    from runner.errors import ConfigError
    from runner.spec import build_spec

    with pytest.raises(ConfigError, match="op.grad=true: allowed only for all_gather and reduce_scatter"):
        build_spec(compose_cfg(["op=all_reduce", "op.grad=true"]))
