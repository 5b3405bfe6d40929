"""The chapter's claims: verdict logic on synthetic ratios, the table on a synthetic sweep
with known answers, and the backward-pass claim from real compiled HLO.

The claims table, its reasons and its console lines by exact expectations (issue 30, round
two's mutation check): a TPU sweep where claims hold, fail, cannot be told and are missing at
once, the backward pass read from the HLO, the collective matmul against its naive program's
trace, and every claim's reason on CPU. Ratios and intervals are worked out by hand in the
comments (the interval is a's low over b's high to a's high over b's low).

The claims' verdicts pinned on both sides of every edge (issue 30): the band's ends are in
it, just past them is "cannot tell" until the whole interval is out; ">1" needs the interval
wholly above 1; the ratio's interval is the conservative one; a claim reads the middle point of
several and never a failed one.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.claims import FAILS, HOLDS, MISSING, UNSURE, claims_table, console_lines, ratio_ci, reason, verdict, why
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


BIG, SMALL = 8 << 20, 4096


def _tpu_row(point, op, group, V, t, lo, hi, n_axes=1, grad=False, kind="all-gather", backend="tpu", **extra):
    return {
        "point": point,
        "status": "ok",
        "op": op,
        "group_size": group,
        "V_bytes": V,
        "axes": "X",
        "n_axes": n_axes,
        "grad": grad,
        "time_s": t,
        "time_ci_low_s": lo,
        "time_ci_high_s": hi,
        "backend": backend,
        "hlo_kind": kind,
        "expr": None,
        "dims": None,
        "strategy": None,
        **extra,
    }


def _sweep(backend="tpu"):
    return pd.DataFrame(
        [
            _tpu_row("ag8", "all_gather", 8, BIG, 1e-3, 0.99e-3, 1.01e-3, backend=backend),
            _tpu_row("ag2", "all_gather", 2, BIG, 1.6e-3, 1.5e-3, 1.7e-3, backend=backend),
            _tpu_row("rs8", "reduce_scatter", 8, BIG, 1e-3, 0.99e-3, 1.01e-3, kind="reduce-scatter", backend=backend),
            _tpu_row("ar8", "all_reduce", 8, BIG, 3e-3, 2.97e-3, 3.03e-3, kind="all-reduce", backend=backend),
            _tpu_row("agxy", "all_gather", 8, BIG, 0.5e-3, 0.495e-3, 0.505e-3, n_axes=2, backend=backend),
            _tpu_row("ag8s", "all_gather", 8, SMALL, 40e-6, 39.6e-6, 40.4e-6, backend=backend),
            _tpu_row("ag2s", "all_gather", 2, SMALL, 41e-6, 35e-6, 45e-6, backend=backend),
            # the grad of an AllGather (slower than the forward, which it must not stand in for): two
            # HLO kinds, one row each
            _tpu_row(
                "gag",
                "all_gather",
                8,
                BIG,
                1.2e-3,
                1.188e-3,
                1.212e-3,
                grad=True,
                kind="reduce-scatter",
                backend=backend,
            ),
            _tpu_row(
                "gag", "all_gather", 8, BIG, 1.2e-3, 1.188e-3, 1.212e-3, grad=True, kind="all-gather", backend=backend
            ),
            # sizes no claim reads: a middle AllGather size, and a larger AllReduce
            _tpu_row("ag8m", "all_gather", 8, 64 << 10, 0.1e-3, 0.09e-3, 0.11e-3, backend=backend),
            _tpu_row("ar16", "all_reduce", 8, 2 * BIG, 6e-3, 5.9e-3, 6.1e-3, kind="all-reduce", backend=backend),
        ]
    )


def _plain(table: pd.DataFrame) -> list[dict]:
    return [
        {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
        for r in table.to_dict("records")
    ]


def test_a_tpu_sweep_where_claims_hold_fail_cannot_be_told_and_are_missing():
    rows = _plain(claims_table(_sweep()))
    none = "the sweep has no point for one side of this ratio"
    want = [
        # 1 / 1.6 = 0.625, 0.99 / 1.7 to 1.01 / 1.5: wholly below the band 0.8-1.25
        ("bandwidth-bound cost does not depend on the number of devices",
         "AllGather, 8 devices / 2 devices (8 MiB 1 ms / 8 MiB 1.6 ms)", 1.0,
         0.625, 0.99 / 1.7, 1.01 / 1.5, FAILS, "measured 0.62x"),
        ("ReduceScatter costs what AllGather costs",
         "ReduceScatter / AllGather, 8 devices (8 MiB 1 ms / 8 MiB 1 ms)", 1.0,
         1.0, 0.99 / 1.01, 1.01 / 0.99, HOLDS, ""),
        # 3, 2.97 / 1.01 = 2.94 above 2 x 1.25
        ("AllReduce costs twice an AllGather",
         "AllReduce / AllGather, 8 devices (8 MiB 3 ms / 8 MiB 1 ms)", 2.0,
         3.0, 2.97 / 1.01, 3.03 / 0.99, FAILS, "measured 3.00x"),
        ("AllToAll costs a quarter of an AllGather (on a ring)", "AllToAll / AllGather, 8 devices", 0.25,
         None, None, None, MISSING, none),
        ("gathering over two axes doubles the bandwidth",
         "AllGather over 2 axes / over 1 axis, 8 devices (8 MiB 0.5 ms / 8 MiB 1 ms)", 0.5,
         0.5, 0.495 / 1.01, 0.505 / 0.99, HOLDS, ""),
        # 40 / 41, 39.6 / 45 = 0.88 to 40.4 / 35 = 1.15: both sides of 1
        ("small buffers are latency-bound, and there more devices cost more",
         "AllGather of the smallest V, 8 devices / 2 devices (4 KiB 0.04 ms / 4 KiB 0.041 ms)", ">1",
         40 / 41, 39.6 / 45, 40.4 / 35, UNSURE,
         "measured 0.98x, but its 95% interval 0.88-1.15 reaches both sides of 1: more rounds, or a quieter "
         "machine, would tell"),
        # the grad against the forward ReduceScatter of its group and V; the HLO decides
        ("the backward pass of an AllGather is a ReduceScatter",
         "time of grad / forward reduce-scatter; the grad's HLO has all-gather, reduce-scatter "
         "(8 MiB 1.2 ms / 8 MiB 1 ms)", 1.0,
         1.2, 1.188 / 1.01, 1.212 / 0.99, HOLDS, ""),
        ("the backward pass of a ReduceScatter is an AllGather",
         "time of grad / forward all-gather; the grad's HLO has ?", 1.0, None, None, None, MISSING, none),
        ("collective matmul approaches max(T_math, T_comms)",
         "collective matmul vs its naive counterpart (with a trace)", 1.0, None, None, None, MISSING,
         "the sweep has no collective_matmul point with a traced naive counterpart"),
    ]  # fmt: skip
    keys = ["claim", "measured", "expected", "ratio", "ci_low", "ci_high", "verdict", "reason"]
    assert rows == [pytest.approx(dict(zip(keys, w))) for w in want]


def test_the_console_says_each_measured_verdict_in_one_line():
    assert console_lines(claims_table(_sweep())) == [
        "fails: bandwidth-bound cost does not depend on the number of devices (0.625x, 95% interval 0.582-0.673; "
        "book 1.0): measured 0.62x",
        "holds: ReduceScatter costs what AllGather costs (1x, 95% interval 0.98-1.02; book 1.0)",
        "fails: AllReduce costs twice an AllGather (3x, 95% interval 2.94-3.06; book 2.0): measured 3.00x",
        "holds: gathering over two axes doubles the bandwidth (0.5x, 95% interval 0.49-0.51; book 0.5)",
        # the interval says why it cannot be told: no reason repeated
        "cannot tell at this noise: small buffers are latency-bound, and there more devices cost more "
        "(0.976x, 95% interval 0.88-1.15; book >1)",
        "holds: the backward pass of an AllGather is a ReduceScatter (1.2x, 95% interval 1.18-1.22; book 1.0)",
    ]


def test_the_backend_is_the_sweeps_unless_given_and_a_grad_that_compiled_otherwise_fails():
    sweep = _sweep("cpu")
    sweep.loc[sweep["point"] == "gag", "hlo_kind"] = "all-reduce"  # both rows: the grad is an all-reduce
    t = claims_table(sweep).set_index("claim")
    assert t.loc["AllReduce costs twice an AllGather", "reason"].startswith("in host memory")
    back = t.loc["the backward pass of an AllGather is a ReduceScatter"]
    assert (back["verdict"], back["reason"]) == (FAILS, "the backward pass compiled to ['all-reduce']")
    # given, the backend wins over the sweep's
    given = claims_table(sweep, backend="tpu").set_index("claim")
    assert given.loc["AllReduce costs twice an AllGather", "reason"] == "measured 3.00x"


def test_one_size_only_leaves_the_small_buffer_claim_unmeasured():
    one = _sweep()
    one = one[one["V_bytes"] == BIG]
    t = claims_table(one).set_index("claim")
    assert t.loc["small buffers are latency-bound, and there more devices cost more", "verdict"] == MISSING
    assert t.loc["bandwidth-bound cost does not depend on the number of devices", "ratio"] == pytest.approx(0.625)


def _matmul(point, strategy, t, lo, hi, compute=math.nan, coll=math.nan, overlap=math.nan, dims="64x64"):
    return _tpu_row(
        point, "matmul", 8, math.nan, t, lo, hi, kind=None, backend="cpu", expr="A[I_X,J] * B[J,K]", dims=dims,
        strategy=strategy, trace_compute_s=compute, trace_collective_s=coll, trace_overlap_frac=overlap,
    )  # fmt: skip


def _matmul_sweep(ring=(3.004e-3, 2.8e-3, 3.2e-3), overlap=0.1):
    return pd.DataFrame(
        [
            # a ring whose naive counterpart has no trace is skipped for the next ring
            _matmul("r0", "collective_matmul", 1e-3, 0.9e-3, 1.1e-3, dims="32x32"),
            _matmul("n0", "naive", 2e-3, 1.9e-3, 2.1e-3, dims="32x32"),
            # the naive program (listed before its ring, and no ring itself): compute 2.004 ms,
            # collectives 1.004 ms: the bound is 2.004 ms
            _matmul("n1", "naive", 2.504e-3, 2.4e-3, 2.6e-3, compute=2.004e-3, coll=1.004e-3),
            _matmul("r1", "collective_matmul", *ring, overlap=overlap),
        ]
    )


MM = "collective matmul approaches max(T_math, T_comms)"


def test_the_collective_matmul_against_its_naive_programs_trace():
    (row,) = _plain(claims_table(_matmul_sweep()).iloc[[-1]])
    # 3.004 / 2.004 = 1.50, 2.8 / 2.004 = 1.40 to 3.2 / 2.004 = 1.60: wholly above 1.25; three
    # digits in the text (3.004 ms reads 3 ms)
    assert row == pytest.approx(
        {
            "claim": MM,
            "measured": "collective matmul 3 ms / max(compute 2 ms, collectives 1 ms) of the naive program's trace; "
            "naive 2.5 ms",
            "expected": 1.0,
            "ratio": 3.004 / 2.004,
            "ci_low": 2.8 / 2.004,
            "ci_high": 3.2 / 2.004,
            "verdict": FAILS,
            "reason": "on the CPU backend collectives run synchronously on the device threads, so nothing hides "
            "under compute (1.50x of the bound; the trace shows 10% of collective time overlapped)",
        }
    )


def test_the_collective_matmul_that_holds_or_cannot_be_told_and_a_sweep_without_traces():
    held = claims_table(_matmul_sweep(ring=(2.004e-3, 1.9e-3, 2.1e-3))).iloc[-1]
    assert (held["verdict"], held["reason"]) == (HOLDS, "")
    # 2.404 / 2.004 = 1.2, its interval 2.204 / 2.004 = 1.1 to 2.605 / 2.004 = 1.3: inside and out
    unsure = claims_table(_matmul_sweep(ring=(2.404e-3, 2.2044e-3, 2.6052e-3))).iloc[-1]
    assert (unsure["verdict"], unsure["reason"]) == (
        UNSURE,
        "measured 1.20x, but its 95% interval 1.1-1.3 reaches inside and outside the band 0.8-1.25: more rounds, "
        "or a quieter machine, would tell",
    )
    # no overlap column: no overlap said
    no_overlap = claims_table(_matmul_sweep().drop(columns=["trace_overlap_frac"])).iloc[-1]
    assert no_overlap["reason"].endswith("nothing hides under compute (1.50x of the bound)")
    # no trace columns at all: nothing to hold the ring to
    bare = _matmul_sweep().drop(columns=["trace_compute_s", "trace_collective_s", "trace_overlap_frac"])
    assert claims_table(bare).iloc[-1]["verdict"] == MISSING


def test_the_console_leaves_out_numbers_a_claim_lacks():
    sweep = _sweep()
    # no forward ReduceScatter: the grad's claim has the HLO's verdict but no ratio
    sweep = sweep[sweep["op"] != "reduce_scatter"]
    # no interval on the AllReduce: a ratio without one
    sweep.loc[sweep["point"] == "ar8", ["time_ci_low_s", "time_ci_high_s"]] = math.nan
    lines = console_lines(claims_table(sweep))
    assert "holds: the backward pass of an AllGather is a ReduceScatter" in lines
    assert "cannot tell at this noise: AllReduce costs twice an AllGather (3x; book 2.0)" in lines


@pytest.mark.parametrize(
    "claim,cpu,other",
    [
        (
            "bandwidth-bound cost does not depend on the number of devices",
            "the CPU backend's devices share one host memory, not a link each, so the group size changes how "
            "their copies contend for it (1.50x; on the 4x2 mesh four 2-device groups run at once)",
            "measured 1.50x",
        ),
        (
            "AllToAll costs a quarter of an AllGather (on a ring)",
            "on the CPU backend the devices share host memory and there is no ring, so the 1/4 (a bidirectional "
            "ring's hop count) does not apply: AllToAll costs 1.50x an AllGather here",
            "measured 1.50x",
        ),
        (
            "gathering over two axes doubles the bandwidth",
            "on the CPU backend there are no links, so a second axis adds no bandwidth (1.50x)",
            "measured 1.50x",
        ),
        (
            "AllReduce costs twice an AllGather",
            "in host memory an AllReduce is not two ring passes; it costs 1.50x an AllGather here",
            "measured 1.50x",
        ),
        (
            "ReduceScatter costs what AllGather costs",
            "in host memory a ReduceScatter is not a ring pass: each device writes V/N where an AllGather writes "
            "V, against the reads of the sum (1.50x)",
            "measured 1.50x",
        ),
        (
            "small buffers are latency-bound, and there more devices cost more",
            "at this V the time barely changes with the group size (1.50x): fixed per-call costs dominate",
            "at this V the time barely changes with the group size (1.50x): fixed per-call costs dominate",
        ),
    ],
)
def test_every_claims_reason_on_cpu_and_elsewhere(claim, cpu, other):
    assert reason(claim, 1.5, "cpu") == cpu
    assert reason(claim, 1.5, "tpu") == other


def test_the_reasons_of_the_backward_pass_and_the_collective_matmul():
    claim = "the backward pass of an AllGather is a ReduceScatter"
    assert reason(claim, 1.234, "cpu", "reduce-scatter") == "its time is 1.23x that of a forward reduce-scatter"
    mm = "collective matmul approaches max(T_math, T_comms)"
    assert reason(mm, 2.0, "tpu") == "the ring's transfers did not hide under the multiplies (2.00x of the bound)"
    assert (
        reason(mm, 2.0, "tpu", math.nan)
        == "the ring's transfers did not hide under the multiplies (2.00x of the bound)"
    )
    assert reason(mm, 2.0, "tpu", 0.255) == (
        "the ring's transfers did not hide under the multiplies (2.00x of the bound; the trace shows 26% of "
        "collective time overlapped)"
    )
    # no interval: nothing to tell it by
    assert why(UNSURE, mm, 1.1, math.nan, 1.2, 1.0, "cpu") == "measured 1.10x, with no interval to tell it by"
    assert why(UNSURE, mm, 1.1, 0.5, math.inf, 1.0, "cpu") == "measured 1.10x, with no interval to tell it by"


def test_no_points_no_allgather_and_no_backend_leave_claims_unmeasured_or_generic():
    empty = claims_table(_sweep().iloc[0:0])
    assert len(empty) == 9 and set(empty["verdict"]) == {MISSING}
    no_ag = claims_table(_sweep()[lambda d: d["op"] != "all_gather"])
    assert set(no_ag["verdict"]) == {MISSING}
    # no backend recorded: not the CPU's reasons
    t = claims_table(_sweep().assign(backend=None)).set_index("claim")
    assert t.loc["AllReduce costs twice an AllGather", "reason"] == "measured 3.00x"


def test_a_sweep_without_grad_reads_every_point_as_forward():
    fwd = _sweep()[lambda d: d["point"] != "gag"]
    want = claims_table(fwd)
    pd.testing.assert_frame_equal(claims_table(fwd.drop(columns=["grad"])), want)
    pd.testing.assert_frame_equal(
        claims_table(fwd.assign(grad=pd.Series(math.nan, index=fwd.index, dtype=object))), want
    )


def test_the_middle_of_several_points_counts_each_point_once():
    rows = [
        _tpu_row("a", "all_gather", 8, BIG, 1e-3, 0.99e-3, 1.01e-3),
        _tpu_row("b", "all_gather", 8, BIG, 2e-3, 1.98e-3, 2.02e-3),
        # the slowest point has two rows (two HLO kinds): still one point
        _tpu_row("c", "all_gather", 8, BIG, 3e-3, 2.97e-3, 3.03e-3),
        _tpu_row("c", "all_gather", 8, BIG, 3e-3, 2.97e-3, 3.03e-3, kind="copy"),
        _tpu_row("d", "all_gather", 2, BIG, 2e-3, 1.98e-3, 2.02e-3),
    ]
    t = claims_table(pd.DataFrame(rows)).set_index("claim")
    assert t.loc["bandwidth-bound cost does not depend on the number of devices", "ratio"] == pytest.approx(1.0)
    # five points: the third fastest (a third of the way would take the second)
    times = [5e-3, 1e-3, 4e-3, 2e-3, 3e-3]
    five = [_tpu_row(f"p{i}", "all_gather", 8, BIG, t, t * 0.99, t * 1.01) for i, t in enumerate(times)]
    t = claims_table(pd.DataFrame([*five, rows[-1]])).set_index("claim")
    assert t.loc["bandwidth-bound cost does not depend on the number of devices", "ratio"] == pytest.approx(1.5)


def test_times_in_the_measured_text_keep_three_digits():
    from analysis.claims import _ms

    assert _ms({"time_s": 0.999e-3}) == "0.999 ms" and _ms({"time_s": 12.34e-3}) == "12.3 ms"


@pytest.mark.parametrize("lo,hi", [(None, 1.1), (0.9, None), (math.nan, 0.5), (0.5, math.nan)])
def test_half_an_interval_is_no_interval(lo, hi):
    from analysis.claims import verdict

    assert verdict(1.0, lo, hi, 1.0) == UNSURE


def test_a_ring_listed_before_its_naive_program_is_held_to_that_programs_trace():
    pts = _matmul_sweep()
    ring_first = pd.concat([pts.iloc[[3]], pts.iloc[[2]]], ignore_index=True)
    row = claims_table(ring_first).iloc[-1]
    assert (row["verdict"], row["ratio"]) == (FAILS, pytest.approx(3.004 / 2.004))


@pytest.mark.parametrize(
    "lo,hi,want",
    [
        # expected 2: the band is 2 / 1.25 = 1.6 to 2 x 1.25 = 2.5, both ends in it
        (1.6, 2.5, HOLDS),
        (1.55, 2.0, UNSURE),  # 1.55 is out of the band (2 x 0.75 = 1.5 would take it in)
        (1.6, 2.6, UNSURE),
        (1.0, 1.6, UNSURE),  # touches the band: not wholly outside
        (1.0, 1.5999, FAILS),
        (2.5, 3.0, UNSURE),
        (2.5001, 3.0, FAILS),
    ],
)
def test_the_band_of_an_expected_ratio_on_both_sides_of_each_end(lo, hi, want):
    assert verdict((lo + hi) / 2, lo, hi, 2.0) == want


@pytest.mark.parametrize(
    "lo,hi,want", [(1.0, 1.2, UNSURE), (1.0001, 1.2, HOLDS), (0.9, 1.0, FAILS), (0.9, 1.0001, UNSURE)]
)
def test_more_than_one_needs_the_interval_wholly_above_one(lo, hi, want):
    assert verdict((lo + hi) / 2, lo, hi, ">1") == want


def test_the_ratio_interval_is_the_conservative_one():
    a = pd.Series({"time_s": 2.0, "time_ci_low_s": 1.8, "time_ci_high_s": 2.4})
    b = pd.Series({"time_s": 1.0, "time_ci_low_s": 0.9, "time_ci_high_s": 1.2})
    # a's low over b's high, a's high over b's low: 1.5 to 2.667 (not 2.0 to 2.0)
    assert ratio_ci(a, b) == pytest.approx((2.0, 1.5, 2.4 / 0.9))


def _plain_row(point, op, group, V, t, status="ok"):
    return {
        "point": point,
        "status": status,
        "op": op,
        "group_size": group,
        "V_bytes": V,
        "axes": "X",
        "n_axes": 1,
        "grad": False,
        "time_s": t,
        "time_ci_low_s": t * 0.99,
        "time_ci_high_s": t * 1.01,
        "backend": "cpu",
        "hlo_kind": "all-gather",
        "expr": None,
        "dims": None,
        "strategy": None,
    }


def test_a_claim_reads_the_middle_of_several_points_and_no_failed_one():
    big = 8 << 20
    rows = [
        _plain_row("ag8a", "all_gather", 8, big, 1.0e-3),
        _plain_row("ag8b", "all_gather", 8, big, 9.0e-3),
        _plain_row("ag8c", "all_gather", 8, big, 1.2e-3),  # the middle of 1.0, 1.2 and 9.0 ms
        _plain_row("ag2", "all_gather", 2, big, 1.2e-3),
        _plain_row("ag2x", "all_gather", 2, big, 5e-3, status="failed"),  # would be the middle of two
        _plain_row("ag2s", "all_gather", 2, 4096, 10e-6),
        _plain_row("ag8s", "all_gather", 8, 4096, 30e-6),
    ]
    t = claims_table(pd.DataFrame(rows)).set_index("claim")
    same = t.loc["bandwidth-bound cost does not depend on the number of devices"]
    assert same["ratio"] == pytest.approx(1.0) and same["verdict"] == HOLDS
    small = t.loc["small buffers are latency-bound, and there more devices cost more"]
    assert small["ratio"] == pytest.approx(3.0) and small["verdict"] == HOLDS  # the smallest V, not the largest
