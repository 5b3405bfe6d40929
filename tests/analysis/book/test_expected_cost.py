"""``expected_time_s`` (analysis.book.expected_cost) held against published nccl-tests tables
(tests/data/published, SOURCES.md). GPU entries are priced by NCCL's own model
(analysis.book.nccl_cost); its one fitted number per network, graph.latencyInter (the entries'
``net_latency_s``), was fitted to three sources only (the fit set, "fit" in FILES / ROWS_CSV of
tests/helpers/published_nccl.py): the Dell 2x8 H200 RoCE table for the InfiniBand/RoCE/EFA entries,
Google's 2x8 A3 High TCPX example for gcp_a3_high, and a 2x8 A3 Mega TCPXO all_gather table
(MG-Cafe) for gcp_a3_mega (the same three the factor model before it was fitted to). Every other
source is held out (the test set) and was never used to set a number. The test prints, per source
and regime, measured / roofline and measured / expected with the shares within 25% and 2x
(docs/validation.md), and pins the figures.

The expected time (analysis.book.expected_cost) by exact expectations (issue 30, round two's
mutation check): a made-up entry whose factors differ per level and collective, predictions with
one and two levels, each of the three terms winning (floor, low-latency, bulk), a level or both
without factors, a group of one, and the dictionary ``predict --json`` prints.

Every number is worked out by hand from the formula in the module's docstring:
``max(floor, min(floor + B / small_share, setup + B / share))``, B each level's bandwidth time
(the slowest after its share counts), floor and setup the outer level's.
"""

from __future__ import annotations

import statistics

import pytest
from published_nccl import LARGE, published_rows

from analysis.book.collective_cost import CollectivePrediction, predict_collective
from analysis.book.expected_cost import ExpectedTime, expected_time, expected_time_s
from analysis.book.hardware import ExpectedFactor, Hardware, load_hardware


def ratios(rows):
    """Per row: measured / roofline and measured / expected (what docs/validation.md tabulates)."""
    out = []
    for r in rows:
        hw = load_hardware(r["hw"])
        p = predict_collective(r["op"], r["V"], [r["n"]], hw)
        e = expected_time(p, hw)
        out.append(dict(r, roofline=r["t"] / p.time_s, expected=r["t"] / e.time_s, algorithm=e.algorithm))
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


def test_gpu_entries_take_nccls_model_and_tpu_entries_keep_their_factors():
    # a GPU entry with an expected.nccl block: NCCL's price (tests/analysis/book/test_nccl_cost.py works it by hand)
    h100 = load_hardware("h100")
    e = expected_time(predict_collective("all_reduce", 1 << 30, [8], h100), h100)
    assert e.algorithm.name == "nvls/Simple" and (e.ranks, e.nodes, e.level) == (8, 1, "inside")
    assert e.time_s == pytest.approx(25e-6 + (1 << 30) / (476e9 * 8 / 14))
    # two nodes of the held-out A3 Mega table at 8 GiB, where TCPXO's profile leaves NCCL ring and tree
    # with Simple: tree/Simple, latency 8.4 + 2 x (7 x 4.0 + 14 + 2 x 30.1) us; bwIntra 45 GB/s after
    # search.cc's second pass, min(8 x 45 x 0.92, 8 x 41.4) = 331.2 GB/s bus, half of it for all_reduce
    mega = load_hardware("gcp_a3_mega")
    e = expected_time(predict_collective("all_reduce", 8 << 30, [16], mega), mega)
    assert (e.algorithm.name, e.nodes, e.level) == ("tree/Simple", 2, "across")
    assert e.time_s == pytest.approx((8.4 + 2 * (7 * 4.0 + 14 + 2 * 30.1)) * 1e-6 + (8 << 30) / 165.6e9)
    # a TPU entry keeps the book's model with its measured factors (no NCCL there)
    v5p = load_hardware("tpu_v5p")
    assert (
        v5p.nccl is None and expected_time(predict_collective("all_gather", 1 << 30, [8], v5p), v5p).algorithm is None
    )


def test_an_entry_without_factors_falls_back_to_the_roofline_terms_and_says_so():
    hw = load_hardware("tpu_v5e")
    p = predict_collective("all_gather", 1 << 30, [8], hw)
    e = expected_time(p, hw)
    assert e.time_s == pytest.approx(
        max(p.latency_time_s, min(p.latency_time_s + p.bandwidth_time_s, p.bandwidth_time_s + p.latency_time_s))
    )
    assert "no expected factors for all_gather inside" in e.source


# the held-out files added with NCCL's model (issue 41); the other held-out ones are issue 28's
ADDED = {
    "h100_1node_nccl_tests_290_all_reduce_perf.txt",
    "h100_2node_dgx_all_reduce_perf.txt",
    "gcp_a3_ultra_h200_2node_rdma_all_gather_perf.txt",
    "gcp_a4_b200_2node_gib_all_gather_perf.txt",
    "gcp_a4_b200_1node_all_reduce_rows.csv",
    "gcp_a4_b200_2node_all_reduce_rows.csv",
}


# the held-out files a logged search added in issue 41's third round (tests/data/published/
# SEARCH_LOG_round3.md: every table found that met four rules fixed before any was priced)
ROUND3 = {
    "a100_40gb_1node_oci_gpu_cluster_all_reduce_perf.txt",
    "a100_40gb_2node_oci_gpu_cluster_all_reduce_perf.txt",
    "a100_40gb_1node_oci_ubuntu_all_reduce_perf.txt",
    "a100_40gb_2node_oci_ubuntu_all_reduce_perf.txt",
    "a100_40gb_2node_oke_rdma_all_reduce_perf.txt",
    "a100_40gb_2node_oke_volcano_all_reduce_perf.txt",
    "h100_2node_8hca_all_reduce_perf.txt",
    "h100_1node_dgx_layout_all_reduce_perf.txt",
    "mi300x_1node_aac8_rccl_all_reduce_perf.txt",
    "mi300x_2node_aac10_rccl_all_reduce_perf.txt",
    "h200_1node_azure_ndv5_all_reduce_perf.txt",
    "gb200_nvl72_2rack_all_reduce_rows.csv",
    "gb200_nvl72_20rack_all_reduce_rows.csv",
    "h200_2node_dell_roce_10g_all_reduce_rows.csv",
    "gcp_a3_high_2node_cluster_toolkit_all_gather_rows.csv",
}


# the fourth round's (tests/data/published/SEARCH_LOG_round4.md: the same rules, new queries)
ROUND4 = {
    "mi300x_2node_rich_console_all_reduce_perf.txt",
    "h100_2node_oci_bm_h100_all_reduce_perf.txt",
    "a100_40gb_2node_oci_oke_slurm_operator_all_reduce_perf.txt",
    "mi300x_2node_oci_oke_slurm_operator_all_reduce_perf.txt",
    "a100_40gb_1node_oci_stack_all_reduce_perf.txt",
    "a100_40gb_2node_oci_stack_all_reduce_perf.txt",
    "h200_1node_azure_nhc_all_reduce_perf.txt",
    "gcp_a4_b200_2node_dstack_all_reduce_rows.csv",
    "b200_2node_lambda_dstack_all_reduce_rows.csv",
    "aws_p5_2to32node_hyperpod_all_reduce_rows.csv",
    "aws_p5_2to32node_hyperpod_alltoall_rows.csv",
    "gcp_a4_b200_2node_gke_doc_all_gather_rows.csv",
    "gcp_a3_ultra_h200_2node_gke_doc_all_gather_rows.csv",
}


def test_validation_against_published_tables(capsys):
    """Measured / expected per source and regime, printed as docs/validation.md shows it, and the
    figures pinned. GPU entries are priced by NCCL's model, whose one fitted number per network
    (net_latency_s) comes from the FIT files only; every other file is held out."""
    rows = ratios(published_rows())
    by = {}
    for r in rows:
        which = "fit" if r["set"] == "fit" else "test"
        which = "new" if r["source"] in ADDED else "r3" if r["source"] in ROUND3 else which
        which = "r4" if r["source"] in ROUND4 else which
        by.setdefault((which, r["source"]), []).append(r)
    lines = [
        "set   source                                            regime rows  measured/roofline     measured/expected"
    ]
    for (which, source), rs in sorted(by.items()):
        for regime, pick, f in (("large", lambda r: r["S"] >= LARGE, 1.25), ("small", lambda r: r["S"] < LARGE, 2)):
            part = [r for r in rs if pick(r)]
            if not part:
                continue
            cells = []
            for key in ("roofline", "expected"):
                xs = [r[key] for r in part]
                cells.append(f"{statistics.median(xs):5.2f}, {within(xs, f):2d}/{len(xs):<2d} in   ")
            lines.append(f"{which:5s} {source:49s} {regime:6s} {len(part):4d}  {cells[0]}  {cells[1]}")
    held = [r for r in rows if r["set"] == "test"]
    for name, part in (("fit", [r for r in rows if r["set"] == "fit"]), ("held out", held)):
        s = summary(part, "expected")
        lines.append(
            f"{name}: expected, >= 256 MiB: {s['large'][1]}/{s['large'][0]} within 25%; "
            f"< 256 MiB: {s['small'][1]}/{s['small'][0]} within 2x"
        )
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    fit, test = (summary([r for r in rows if r["set"] == w], "expected") for w in ("fit", "test"))
    # FIT files (Dell 2x8 H200 RoCE; Google's 2x8 A3 High TCPX; MG-Cafe's 2x8 A3 Mega TCPXO all_gather):
    # only each network's latency was fitted to them, the A3 ones with the NCCL_ALGO / NCCL_PROTO their
    # platforms set across nodes (ring/Simple for TCPX: its large rows 1.23 -> 1.04 once priced so)
    assert fit["large"][:2] == (19, 19) and fit["small"][:2] == (33, 33)
    # HELD OUT (never used to set a number), against the goal (>= 80% of large rows within 25%,
    # >= 75% of smaller rows within 2x; "within" symmetric: max(r, 1/r)): large 167 of 223 (75%), smaller
    # 248 of 339 (73%). Out, by file (docs/validation.md says more of each):
    # - mi300x (RCCL's model, analysis/book/rccl_cost.py): two nodes below 256 MiB (AAC10: 22 of 25 rows, 4.7,
    #   about 220 us where RCCL's tables price 47 us; the round-4 console table's 8 - 128 MiB rows, 0.22: RCCL's
    #   tables steer tree/Simple at about 1 ms where the runs take 0.2 - 1.1 ms), a few large rows;
    # - the A4 B200 2-node all_gather (6 large, 18 small): the run, not the model (Google's own two-A4
    #   table agrees with the model; "The two biggest misses");
    # - the 2-node DGX H100 all_reduce (3 large, 16 small): the same, an erratic run;
    # - OCI's A100 2-node cluster tutorial at >= 256 MiB (6 rows, 2.66: about 72 GB/s busbw, the page's own
    #   figure) and its 1-node table below 256 MiB (15 rows, 2.1 median: 8 GPUs from one process);
    # - GB200 racks: 20 racks (6 rows, 2.76) and 2 racks at 512 MiB - 2 GiB (3 rows), 1 rack at 512 MiB - 1 GiB;
    # - B200 2-node all_reduce at >= 256 MiB in three files (GCP A4 twice, Lambda: 0.73 - 0.76, faster than
    #   NCCL's own NVLS-tree price with Blackwell's nvlsEfficiency 0.74);
    # - p5 (EFA, 16 - 256 ranks): all_reduce at 4 large rows (128 and 256 ranks, 256 MiB - 1 GiB) once priced with
    #   aws-ofi-nccl's 8 grouped NICs and its tuner's pairs (26 of 30 large, 15 of 15 smaller; 21 and 11 before),
    #   all_to_all at some sizes; the p4d EFA rows at 24 and 32 ranks (NVIDIA/nccl#527 asks whether they are
    #   healthy), A3 Mega's two nodes at 8 - 32 MiB.
    assert test["large"][:2] == (223, 167)
    assert test["small"][:2] == (339, 248)
    roof = summary(held, "roofline")
    assert roof["large"][:2] == (223, 81) and roof["small"][:2] == (339, 42)
    # issue 28's held-out files alone: large 25/30, smaller 35/40 (the factor model: 24/30 and 35/40)
    old = summary([r for r in held if r["source"] not in ADDED | ROUND3 | ROUND4], "expected")
    assert (old["large"][:2], old["small"][:2]) == ((30, 25), (40, 35))
    # the files added with NCCL's model, and the third and fourth rounds'
    added = summary([r for r in held if r["source"] in ADDED], "expected")
    assert (added["large"][:2], added["small"][:2]) == ((38, 25), (72, 38))
    round3 = summary([r for r in held if r["source"] in ROUND3], "expected")
    assert (round3["large"][:2], round3["small"][:2]) == ((61, 44), (126, 83))
    round4 = summary([r for r in held if r["source"] in ROUND4], "expected")
    assert (round4["large"][:2], round4["small"][:2]) == ((94, 73), (101, 92))


US = 1e-6
LAB = Hardware(
    name="lab",
    kind="gpu",
    expected=(
        # all_reduce: every field set, and different per level
        ExpectedFactor("inside", "all_reduce", bw_share=0.5, floor_s=10 * US, setup_s=40 * US, small_bw_share=0.125),
        ExpectedFactor("across", "all_reduce", bw_share=0.25, floor_s=100 * US, setup_s=300 * US),
        # all_gather inside: a setup below the floor, so the floor can win over the bulk term
        ExpectedFactor("inside", "all_gather", bw_share=0.5, floor_s=10 * US, setup_s=2 * US),
        # reduce_scatter: across only; no setup and no small share (both fall back)
        ExpectedFactor("across", "reduce_scatter", bw_share=0.5, floor_s=60 * US),
    ),
    expected_source="lab bench, 2026",
)


def pred(kind: str, *level_bw_s: float, bw_s: float = 0.0, latency_s: float = 7 * US, time_s: float = 1.0):
    """A prediction with the given levels' bandwidth times (none: a one-level prediction whose
    own ``bandwidth_time_s`` is ``bw_s``); ``latency_s`` is the roofline's latency term."""
    levels = tuple({"bandwidth_time_s": b} for b in level_bw_s)
    return CollectivePrediction(
        kind=kind,
        V_bytes=1.0,
        axis_sizes=(16,),
        wraparound=(True,),
        topology="ring",
        hops=1.0,
        latency_time_s=latency_s,
        bandwidth_time_s=bw_s,
        time_s=time_s,
        regime="bandwidth",
        formula="-",
        levels=levels,
    )


def check(e: ExpectedTime, time_s, level, floor_s, bandwidth_time_s, shares, source):
    assert e.time_s == pytest.approx(time_s, rel=1e-12)
    assert e.level == level
    assert e.floor_s == pytest.approx(floor_s, rel=1e-12)
    assert e.bandwidth_time_s == pytest.approx(bandwidth_time_s, rel=1e-12)
    assert e.bw_shares == shares
    assert e.source == source


def test_one_level_large_takes_the_bulk_protocol_after_its_setup():
    # B = 80 us: bulk 40 + 80 / 0.5 = 200 us; low latency 10 + 80 / 0.125 = 650 us
    e = expected_time(pred("all_reduce", bw_s=80 * US), LAB)
    check(e, 200 * US, "inside", 10 * US, 160 * US, (0.5,), "lab bench, 2026")
    assert expected_time_s(pred("all_reduce", bw_s=80 * US), LAB) == e.time_s


def test_one_level_mid_size_takes_the_low_latency_protocol_at_its_small_share():
    # B = 2 us: bulk 40 + 4 = 44 us; low latency 10 + 2 / 0.125 = 26 us
    e = expected_time(pred("all_reduce", bw_s=2 * US), LAB)
    check(e, 26 * US, "inside", 10 * US, 4 * US, (0.5,), "lab bench, 2026")


def test_a_setup_below_the_floor_never_gives_less_than_the_floor():
    # all_gather inside: B = 2 us; bulk 2 + 2 / 0.5 = 6 us; low latency (small share = the
    # share, 0.5) 10 + 4 = 14 us; the faster, 6 us, is below the floor 10 us
    e = expected_time(pred("all_gather", bw_s=2 * US), LAB)
    check(e, 10 * US, "inside", 10 * US, 4 * US, (0.5,), "lab bench, 2026")
    # B = 20 us: bulk 2 + 40 = 42 us, low latency 10 + 40 = 50 us: bulk, above the floor
    assert expected_time_s(pred("all_gather", bw_s=20 * US), LAB) == pytest.approx(42 * US, rel=1e-12)


def test_two_levels_take_the_outer_floor_and_setup_and_the_slowest_level_after_its_share():
    # inside 80 us / 0.5 = 160 us, across 50 us / 0.25 = 200 us: B' = 200 us (the across level);
    # bulk: across setup 300 + 200 = 500 us; low latency: inside 80 / 0.125 = 640 us, across
    # 50 / 0.25 (no small share: the share) = 200 us, so 100 + 640 = 740 us
    e = expected_time(pred("all_reduce", 80 * US, 50 * US), LAB)
    check(e, 500 * US, "across", 100 * US, 200 * US, (0.5, 0.25), "lab bench, 2026")
    # the inside level the slower after its share: 120 / 0.5 = 240 us against 10 / 0.25 = 40 us;
    # bulk 300 + 240 = 540 us; low latency 100 + max(960, 40) = 1060 us
    e = expected_time(pred("all_reduce", 120 * US, 10 * US), LAB)
    check(e, 540 * US, "across", 100 * US, 240 * US, (0.5, 0.25), "lab bench, 2026")
    # tiny: bulk 300 + max(0.0625 / 0.5, 0.1 / 0.25) = 300.4 us; low latency 100 +
    # max(0.0625 / 0.125, 0.1 / 0.25) = 100.5 us (the inside level's small share limits)
    e = expected_time(pred("all_reduce", 0.0625 * US, 0.1 * US), LAB)
    check(e, 100.5 * US, "across", 100 * US, 0.4 * US, (0.5, 0.25), "lab bench, 2026")


def test_a_level_without_factors_runs_at_the_roofline_and_the_source_names_it():
    # reduce_scatter: no inside factor (share 1), across share 0.5, floor 60 us, no setup (the
    # floor); inside 100 us / 1 = 100 us, across 30 / 0.5 = 60 us: bulk 60 + 100 = 160 us, low
    # latency the same (no small share): 160 us
    e = expected_time(pred("reduce_scatter", 100 * US, 30 * US), LAB)
    why = "lab has no expected factors for reduce_scatter inside: the roofline's own terms stand in there"
    check(e, 160 * US, "across", 60 * US, 100 * US, (1.0, 0.5), why)
    # one level, inside: no factor there, so the roofline's latency term is the floor and setup:
    # 7 + 30 = 37 us
    e = expected_time(pred("reduce_scatter", bw_s=30 * US), LAB)
    check(e, 37 * US, "inside", 7 * US, 30 * US, (1.0,), why)


def test_a_collective_without_any_factor_is_the_roofline_at_both_levels_and_names_both():
    # all_to_all: floor = setup = the latency term 7 us; 7 + max(20, 30) = 37 us
    e = expected_time(pred("all_to_all", 20 * US, 30 * US), LAB)
    why = "lab has no expected factors for all_to_all across and inside: the roofline's own terms stand in there"
    check(e, 37 * US, "across", 7 * US, 30 * US, (1.0, 1.0), why)


def test_an_entry_without_a_source_says_so_where_every_factor_is_there():
    bare = Hardware(name="lab", kind="gpu", expected=LAB.expected)
    e = expected_time(pred("all_reduce", bw_s=80 * US), bare)
    check(e, 200 * US, "inside", 10 * US, 160 * US, (0.5,), "no expected factors")


def test_a_group_of_one_moves_nothing_and_names_its_outer_level():
    zero = dict(latency_s=0.0, time_s=0.0)
    check(expected_time(pred("all_reduce", **zero), LAB), 0.0, "inside", 0.0, 0.0, (), "no communication")
    check(expected_time(pred("all_reduce", 0.0, 0.0, **zero), LAB), 0.0, "across", 0.0, 0.0, (), "no communication")


def test_the_dictionary_predict_prints_names_every_field():
    e = expected_time(pred("all_reduce", 80 * US, 50 * US), LAB)
    d = e.to_dict()
    assert d == {
        "expected_time_s": e.time_s,
        "expected_level": "across",
        "expected_floor_s": e.floor_s,
        "expected_bandwidth_time_s": e.bandwidth_time_s,
        "expected_bw_shares": [0.5, 0.25],
        "expected_source": "lab bench, 2026",
    }
    assert (d["expected_floor_s"], d["expected_bandwidth_time_s"]) == pytest.approx((100 * US, 200 * US), rel=1e-12)
