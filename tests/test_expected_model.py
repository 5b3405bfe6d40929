"""``expected_time_s`` (analysis.book.expected_cost) held against published nccl-tests tables
(tests/data/published, SOURCES.md). The factors were fitted to three sources only (the fit set,
"fit" in FILES / ROWS_CSV): the Dell 2x8 H200 RoCE table for the Hopper entries (and, by
analogy, the A100 and Blackwell ones), Google's 2x8 A3 High TCPX example for gcp_a3_high's
across level, and a 2x8 A3 Mega TCPXO all_gather table (MG-Cafe) for gcp_a3_mega's across
level. Every other source is held out (the test set) and was never used to set a factor. The
test prints, per source and regime, the median expected/measured and the shares within 25% and
2x, for the roofline and for the expected model, and pins the figures."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from analysis.book.collective_cost import predict_collective
from analysis.book.expected_cost import expected_time
from analysis.book.hardware import load_hardware
from analysis.importers.nccl_tests import parse_nccl_tests

DATA = Path(__file__).parent / "data" / "published"
LARGE = 256 << 20  # the regimes: >= 256 MiB, and below
# file -> (hardware entry, set)
FILES = {
    "h200_2node_dell_roce_all_reduce_perf.txt": ("h200", "fit"),
    "gcp_a3_mega_2node_all_reduce_perf.txt": ("gcp_a3_mega", "test"),
    "h200_2node_oci_all_reduce_perf.txt": ("h200", "test"),
    "a100_40gb_2node_oci_all_reduce_perf.txt": ("a100_40gb", "test"),
}
# file -> (hardware entry, set, collective, ranks): tables printed without rank lines
ROWS_CSV = {
    "gcp_a3_high_2node_tcpx_all_reduce_rows.csv": ("gcp_a3_high", "fit", "all_reduce", 16),
    "gb200_nvl72_rack_all_reduce_rows.csv": ("gb200", "test", "all_reduce", 72),
    # p6-b200's EFA gives 400 Gb/s per GPU, the b200 entry's scale-out figure; its factors are
    # the Hopper fit's by analogy, never set from this file
    "b200_2node_aws_p6_efa_all_reduce_rows.csv": ("b200", "test", "all_reduce", 16),
    # one row per instance count: the file's ranks column overrides the 8 here
    "aws_p4d_1to4node_all_reduce_1gib_rows.csv": ("aws_p4de", "test", "all_reduce", 8),
    # the only source of gcp_a3_mega's across floor, setup and shares (SOURCES.md)
    "gcp_a3_mega_2node_tcpxo_all_gather_rows.csv": ("gcp_a3_mega", "fit", "all_gather", 16),
    # the same page's one-node table: nothing of the inside level was set from it
    "gcp_a3_mega_1node_all_reduce_rows.csv": ("gcp_a3_mega", "test", "all_reduce", 8),
    "gcp_a3_mega_2node_tcpxo_all_gather_8m_rows.csv": ("gcp_a3_mega", "test", "all_gather", 16),
}


def published_rows() -> list[dict]:
    """Every published row: source, entry, set, collective, ranks, S (= V here), measured time."""
    rows = []
    for name, (hw, which) in FILES.items():
        (run,) = parse_nccl_tests((DATA / name).read_text(), DATA / name)
        for r in run.rows:
            rows.append(
                dict(source=name, hw=hw, set=which, op=run.op, n=run.ranks, S=r.S_bytes, t=r.out_of_place.time_s)
            )
    for name, (hw, which, op, n) in ROWS_CSV.items():
        lines = [ln for ln in (DATA / name).read_text().splitlines() if ln and not ln.startswith("#")]
        cols = lines[0].split(",")
        for line in lines[1:]:
            cell = dict(zip(cols, line.split(","), strict=True))
            ranks = int(cell.get("ranks", n))
            rows.append(
                dict(
                    source=name,
                    hw=hw,
                    set=which,
                    op=op,
                    n=ranks,
                    S=int(cell["size_bytes"]),
                    t=float(cell["time_us"]) * 1e-6,
                )
            )
    return rows


def ratios(rows):
    """Per row: roofline / measured and expected / measured."""
    out = []
    for r in rows:
        hw = load_hardware(r["hw"])
        p = predict_collective(r["op"], r["S"], [r["n"]], hw)
        out.append(dict(r, roofline=p.time_s / r["t"], expected=expected_time(p, hw).time_s / r["t"]))
    return out


def within(rs, factor):
    return sum(max(x, 1 / x) <= factor for x in rs)


def summary(rows, key):
    large = [r[key] for r in rows if r["S"] >= LARGE]
    small = [r[key] for r in rows if r["S"] < LARGE]
    return {
        "large": (len(large), within(large, 1.25), statistics.median(large) if large else None),
        "small": (len(small), within(small, 2.0), statistics.median(small) if small else None),
    }


def test_expected_time_by_hand_on_one_h100_node():
    hw = load_hardware("h100")
    # AllGather of V = 64 MiB over 8 GPUs: roofline bandwidth time V * 7/8 / 4.5e11 = 130.49 us;
    # bulk: setup 25 us + 130.49 / 0.82 = 184.14 us; low latency: 12.5 + 130.49 / 0.22 = 605.6 us
    p = predict_collective("all_gather", 64 << 20, [8], hw)
    assert p.bandwidth_time_s == pytest.approx(130.4895e-6, rel=1e-5)
    e = expected_time(p, hw)
    assert e.time_s == pytest.approx(25e-6 + 130.4895e-6 / 0.82, rel=1e-5) and e.level == "inside"
    # 64 KiB: bandwidth time 0.12743 us; low latency 12.5 + 0.12743 / 0.22 = 13.079 us < bulk 25.155 us
    small = expected_time(predict_collective("all_gather", 64 << 10, [8], hw), hw)
    assert small.time_s == pytest.approx(12.5e-6 + 65536 * 0.875 / 4.5e11 / 0.22, rel=1e-6)
    # two nodes: the across level's floor, and the slower level's bandwidth term after its share
    two = predict_collective("all_reduce", 1 << 30, [16], hw)
    inside, across = (lv["bandwidth_time_s"] for lv in two.levels)
    e2 = expected_time(two, hw)
    assert e2.level == "across" and e2.floor_s == 43.5e-6
    assert e2.time_s == pytest.approx(210e-6 + max(inside / 1.0, across / 0.92), rel=1e-9)


def test_gcp_a3_mega_across_level_is_the_tcpxo_fit_not_the_roce_one():
    hw = load_hardware("gcp_a3_mega")
    # all_gather of 8 GiB over 2 x 8: across, the node receives the other half, 2^33 / 2 over 8 x 25 GB/s
    # = 21474.84 us of roofline; the ring moves twice that (share 0.51): 180 us + 21474.84 / 0.51
    p = predict_collective("all_gather", 8 << 30, [16], hw)
    inside, across = (lv["bandwidth_time_s"] for lv in p.levels)
    assert across == pytest.approx((8 << 30) / 2 / (8 * 2.5e10), rel=1e-9)
    e = expected_time(p, hw)
    assert (e.level, e.floor_s, e.bw_shares) == ("across", 1.1e-4, (0.82, 0.51))
    assert e.time_s == pytest.approx(1.8e-4 + across / 0.51, rel=1e-9)
    # a small all_reduce across the two nodes sits at TCPXO's floor, 110 us (the h200 entry: 43.5 us)
    tiny = predict_collective("all_reduce", 8, [16], hw)
    assert expected_time(tiny, hw).time_s == pytest.approx(1.1e-4, rel=1e-5)
    assert expected_time(tiny, load_hardware("h200")).time_s == pytest.approx(4.35e-5, rel=1e-5)


def test_a100_all_reduce_inside_a_node_runs_at_the_ring_share_not_nvlink_sharp():
    # A100 (NVLink 3) has no in-switch reduction: 1 GiB over one p4d node of 8 is setup 25 us +
    # roofline 2 * 7/8 * 2^30 / 3e11 = 6263.5 us at share 0.82 = 7663.2 us (an H100 node: share 1.0)
    hw = load_hardware("aws_p4de")
    e = expected_time(predict_collective("all_reduce", 1 << 30, [8], hw), hw)
    assert e.bw_shares == (0.82,)
    assert e.time_s == pytest.approx(25e-6 + 2 * 7 / 8 * (1 << 30) / 3e11 / 0.82, rel=1e-9)
    h100 = load_hardware("h100")
    assert expected_time(predict_collective("all_reduce", 1 << 30, [8], h100), h100).bw_shares == (1.0,)


def test_an_entry_without_factors_falls_back_to_the_roofline_terms_and_says_so():
    hw = load_hardware("tpu_v5e")
    p = predict_collective("all_gather", 1 << 30, [8], hw)
    e = expected_time(p, hw)
    assert e.time_s == pytest.approx(
        max(p.latency_time_s, min(p.latency_time_s + p.bandwidth_time_s, p.bandwidth_time_s + p.latency_time_s))
    )
    assert "no expected factors for all_gather inside" in e.source


def test_validation_against_published_tables(capsys):
    rows = ratios(published_rows())
    by = {}
    for r in rows:
        by.setdefault((r["set"], r["source"]), []).append(r)
    head = "set   source                                         regime    rows  "
    lines = [head + "roofline(med, <=25%, <=2x)  expected(med, <=25%, <=2x)"]
    for (which, source), rs in sorted(by.items()):
        for regime, pick in (("large", lambda r: r["S"] >= LARGE), ("small", lambda r: r["S"] < LARGE)):
            part = [r for r in rs if pick(r)]
            if not part:
                continue
            cells = []
            for key in ("roofline", "expected"):
                xs = [r[key] for r in part]
                cells.append(f"{statistics.median(xs):.2f}, {within(xs, 1.25)}/{len(xs)}, {within(xs, 2)}/{len(xs)}")
            lines.append(f"{which:5s} {source:46s} {regime:8s} {len(part):5d}  {cells[0]:26s}  {cells[1]}")
    for which in ("fit", "test"):
        s = summary([r for r in rows if r["set"] == which], "expected")
        lines.append(
            f"{which}: expected, >= 256 MiB: {s['large'][1]}/{s['large'][0]} within 25%; "
            f"< 256 MiB: {s['small'][1]}/{s['small'][0]} within 2x"
        )
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    fit, test = (summary([r for r in rows if r["set"] == w], "expected") for w in ("fit", "test"))
    # FIT set (Dell 2x8 H200 RoCE; Google's 2x8 A3 High TCPX example; MG-Cafe's 2x8 A3 Mega TCPXO
    # all_gather), by construction: every large row within 25%, every smaller row within 2x
    assert fit["large"][:2] == (19, 19) and fit["small"][:2] == (33, 33)
    # the A3 Mega fit lands on its table (medians 0.99 at >= 256 MiB and 1.01 below), as all_gather
    tcpxo = by[("fit", "gcp_a3_mega_2node_tcpxo_all_gather_rows.csv")]
    for regime, pick, med in (("large", lambda r: r["S"] >= LARGE, 0.99), ("small", lambda r: r["S"] < LARGE, 1.01)):
        assert statistics.median(r["expected"] for r in tcpxo if pick(r)) == pytest.approx(med, abs=0.005), regime
    # TEST set (held out: no factor was set or changed by looking at these files) against issue 28's
    # goal (>= 80% of large rows within 25%, >= 75% of smaller rows within 2x; "within" symmetric:
    # max(r, 1/r)). Large: 24 of 30 (80%; the roofline 14). Still out: the held-out A3 Mega all_reduce
    # at 256 MiB (0.69: its busbw is still ramping there, 213 of 339 GB/s), GB200 one rack 512 MiB and
    # 1 GiB (0.67, 0.76: 72 ranks' ramp against an 8-GPU setup of 25 us) and AWS p4d at 1 GiB on 2-4
    # instances over EFA (0.67, 0.48, 0.50; NVIDIA/nccl#527 asks whether they are healthy).
    # Smaller: 35 of 40 (88%): A3 Mega's across floor 110 us from the TCPXO fit (was the H200 RoCE
    # fit's 43.5 us) brings the held-out 2-node all_reduce to 21 of 25 within 2x (was 1; its 8 B - 1 MiB
    # rows at 0.63 - 0.89); out: its 8 - 64 MiB rows (0.39, 0.28, 0.34, 0.43: a slow ramp to the bulk
    # protocol that setup 180 us misses) and the one-node A3 Mega all_reduce at 64 KiB (0.39: 35 us
    # from one process driving 8 GPUs against the inside floor 12.5 us). The 21 large / 31 small rows
    # held out before the two new A3 Mega test files: 15/21 (unchanged) and 27/31 (was 7/31).
    assert test["large"][:2] == (30, 24)
    assert test["small"][:2] == (40, 35)
    roof = summary([r for r in rows if r["set"] == "test"], "roofline")
    assert roof["large"][:2] == (30, 14) and roof["small"][:2] == (40, 2)


def test_predict_gives_the_roofline_and_the_expected_time_side_by_side(capsys):
    import json

    from analysis.cli import main

    argv = ["predict", "AllGather_X(A[I_X])", "--hardware", "h100", "--mesh", "X=8", "--dims", "I=16777216"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # V = 16777216 * 2 B (bfloat16) = 32 MiB: roofline V * 7/8 / 4.5e11 = 65.24 us (bandwidth-bound);
    # expected: setup 25 us + 65.24 us / 0.82 = 104.57 us
    assert out["time_s"] == pytest.approx(33554432 * 0.875 / 4.5e11)
    assert out["expected_time_s"] == pytest.approx(25e-6 + 33554432 * 0.875 / 4.5e11 / 0.82)
    assert out["expected_level"] == "inside" and out["expected_bw_shares"] == [0.82]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "  predicted  65.24 us\n" in text
    assert "  expected   104.57 us on a real cluster = 1.6x the roofline above (floor 12.50 us inside; " in text
