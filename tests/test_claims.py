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
        (1.2, 1.1, 1.25, 1.0, HOLDS),  # the whole interval within 25% (band 0.8 to 1.25)
        (1.2, 1.1, 1.3, 1.0, UNSURE),  # the ratio within 25%, its interval reaching past 1.25
        (1.5, 0.84, 2.16, 1.0, UNSURE),  # an interval this wide cannot tell (it once read "holds")
        (2.0, 0.84, 2.16, 2.0, UNSURE),
        (1.6, 1.5, 1.7, 1.0, FAILS),  # whole CI above the band
        (0.7, 0.6, 0.79, 1.0, FAILS),  # whole CI below it (0.8)
        (1.4, 1.1, 1.7, 1.0, UNSURE),  # point outside, CI straddles the band's edge
        (0.26, 0.2, 0.3, 0.25, HOLDS),  # band 0.2 to 0.3125
        (1.0, 0.95, 1.05, 0.25, FAILS),
        (1.7, 1.5, 1.8, ">1", HOLDS),
        (0.9, 0.8, 1.0, ">1", FAILS),
        (1.05, 0.97, 1.1, ">1", UNSURE),
        (1.0, np.nan, np.nan, 1.0, UNSURE),  # no interval: nothing to tell it by
        (1.0, None, None, 1.0, UNSURE),
        (np.nan, np.nan, np.nan, 1.0, MISSING),
    ],
)
def test_verdict(ratio, lo, hi, expected, want):
    assert verdict(ratio, lo, hi, expected) == want


def test_the_verdict_words_and_why_a_claim_cannot_be_told():
    from analysis.claims import why

    assert (HOLDS, FAILS, UNSURE) == ("holds", "fails", "cannot tell at this noise")
    assert why(UNSURE, "AllReduce costs twice an AllGather", 1.5, 0.84, 2.16, 2.0, "cpu") == (
        "measured 1.50x, but its 95% interval 0.84-2.16 reaches inside and outside the band 1.6-2.5: more "
        "rounds, or a quieter machine, would tell"
    )
    assert why(UNSURE, "small buffers", 1.05, 0.97, 1.1, ">1", "cpu").startswith(
        "measured 1.05x, but its 95% interval 0.97-1.1 reaches both sides of 1"
    )
    assert why(HOLDS, "AllReduce costs twice an AllGather", 2.0, 1.9, 2.1, 2.0, "cpu") == ""
    assert why(FAILS, "AllReduce costs twice an AllGather", 1.2, 1.1, 1.3, 2.0, "cpu").startswith("in host memory")


def _row(point, op, group, V, t, axes="X", grad=False, kind=None, backend="cpu"):
    return {
        "point": point,
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
    from analysis.runs.rundir import read_results
    from analysis.runs.summary import summary_table

    cfg = compose_cfg(
        [
            f"op={op}",
            "op.grad=true",
            "op.size_bytes=64KiB",
            "timing.rounds=1",  # the HLO is what is asserted, not the time
            "timing.min_iters=3",
            "timing.budget_s=0.1",
            "trace.enabled=false",
        ]
    )
    point = tmp_path / "0_grad"
    result = run(cfg, point)
    assert result["status"] == "ok" and result["check"]["passed"], result.get("error")
    s = summary_table(read_results(tmp_path))
    assert list(s["hlo_kind"]) == [backward]
    assert not s["is_target"].any()  # a backward pass is kept out of the forward collective's fits


def test_grad_of_other_collectives_is_refused(compose_cfg):
    from runner.config.spec import build_spec
    from runner.errors import ConfigError

    with pytest.raises(ConfigError, match="op.grad=true: allowed only for all_gather and reduce_scatter"):
        build_spec(compose_cfg(["op=all_reduce", "op.grad=true"]))


def _claims() -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "claim": "ReduceScatter costs what AllGather costs",
                "expected": 1.0,
                "ratio": 1.02,
                "ci_low": 0.95,
                "ci_high": 1.1,
                "verdict": HOLDS,
                "reason": "",
            },
            {
                "claim": "AllReduce costs twice an AllGather",
                "expected": 2.0,
                "ratio": 1.5,
                "ci_low": 0.84,
                "ci_high": 2.16,
                "verdict": UNSURE,
                "reason": "measured 1.50x, but its 95% interval 0.84-2.16 reaches both",
            },
            {
                "claim": "the backward pass of an AllGather is a ReduceScatter",
                "expected": 1.0,
                "ratio": np.nan,
                "ci_low": np.nan,
                "ci_high": np.nan,
                "verdict": FAILS,
                "reason": "the backward pass compiled to ['all-reduce']",
            },
            {
                "claim": "collective matmul approaches max(T_math, T_comms)",
                "expected": 1.0,
                "ratio": np.nan,
                "ci_low": np.nan,
                "ci_high": np.nan,
                "verdict": MISSING,
                "reason": "no point",
            },
        ]
    )


def test_the_verdicts_reach_the_console_at_the_end_of_a_claims_sweep(tmp_path):
    import os

    from analysis.claims import console_lines
    from runner.sweep.report_process import claim_lines

    want = [
        "holds: ReduceScatter costs what AllGather costs (1.02x, 95% interval 0.95-1.1; book 1.0)",
        "cannot tell at this noise: AllReduce costs twice an AllGather (1.5x, 95% interval 0.84-2.16; book 2.0)",
        "fails: the backward pass of an AllGather is a ReduceScatter: the backward pass compiled to ['all-reduce']",
    ]
    assert console_lines(_claims()) == want  # the claim without points is left out
    _claims().to_csv(tmp_path / "claims.csv", index=False)  # as the report writes it, read back
    now = os.stat(tmp_path / "claims.csv").st_mtime
    assert claim_lines(tmp_path, since=now) == ["the chapter's claims, checked here:", *want]
    assert claim_lines(tmp_path, since=now + 60) == []  # an earlier report's file is not this one's
    assert claim_lines(tmp_path / "none", since=now) == []
