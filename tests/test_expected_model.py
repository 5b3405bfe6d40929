"""``expected_time_s`` (analysis.book.expected_cost) held against published nccl-tests tables
(tests/data/published, SOURCES.md). GPU entries are priced by NCCL's own model
(analysis.book.nccl_cost); its one fitted number per network, graph.latencyInter (the entries'
``net_latency_s``), was fitted to three sources only (the fit set, "fit" in FILES / ROWS_CSV): the
Dell 2x8 H200 RoCE table for the InfiniBand/RoCE/EFA entries, Google's 2x8 A3 High TCPX example for
gcp_a3_high, and a 2x8 A3 Mega TCPXO all_gather table (MG-Cafe) for gcp_a3_mega (the same three the
factor model before it was fitted to). Every other source is held out (the test set) and was never
used to set a number. The test prints, per source and regime, measured / roofline and measured /
expected with the shares within 25% and 2x (docs/validation.md), and pins the figures."""

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
    # added with NCCL's model (issue 41): held out, never used to set a number
    "h100_1node_nccl_tests_290_all_reduce_perf.txt": ("h100", "test"),
    "h100_2node_dgx_all_reduce_perf.txt": ("dgx_h100_ndr", "test"),
    "gcp_a3_ultra_h200_2node_rdma_all_gather_perf.txt": ("h200", "test"),
    "gcp_a4_b200_2node_gib_all_gather_perf.txt": ("b200", "test"),
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
    "gcp_a4_b200_1node_all_reduce_rows.csv": ("b200", "test", "all_reduce", 8),
    "gcp_a4_b200_2node_all_reduce_rows.csv": ("b200", "test", "all_reduce", 16),
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
    """Per row: measured / roofline and measured / expected (what docs/validation.md tabulates)."""
    out = []
    for r in rows:
        hw = load_hardware(r["hw"])
        p = predict_collective(r["op"], r["S"], [r["n"]], hw)
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
    # a GPU entry with an expected.nccl block: NCCL's price (tests/test_nccl_cost.py works it by hand)
    h100 = load_hardware("h100")
    e = expected_time(predict_collective("all_reduce", 1 << 30, [8], h100), h100)
    assert e.algorithm.name == "nvls/Simple" and (e.ranks, e.nodes, e.level) == (8, 1, "inside")
    assert e.time_s == pytest.approx(25e-6 + (1 << 30) / (400e9 * 8 / 14))
    # two nodes of the held-out A3 Mega table at 8 GiB: nvls_tree/Simple, latency 25 + 2 x (14 + 2 x 91.8)
    # us; per channel min(24 x 0.85 x 7/8 x 2, 2 x 24, 57.7) = 35.7 GB/s x 8 channels x 16/30
    mega = load_hardware("gcp_a3_mega")
    e = expected_time(predict_collective("all_reduce", 8 << 30, [16], mega), mega)
    assert (e.algorithm.name, e.nodes, e.level) == ("nvls_tree/Simple", 2, "across")
    assert e.time_s == pytest.approx((25 + 2 * (14 + 2 * 91.8)) * 1e-6 + (8 << 30) / (35.7e9 * 8 * 16 / 30))
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


def test_validation_against_published_tables(capsys):
    """Measured / expected per source and regime, printed as docs/validation.md shows it, and the
    figures pinned. GPU entries are priced by NCCL's model, whose one fitted number per network
    (net_latency_s) comes from the FIT files only; every other file is held out."""
    rows = ratios(published_rows())
    by = {}
    for r in rows:
        which = "fit" if r["set"] == "fit" else "new" if r["source"] in ADDED else "test"
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
    # only each network's latency was fitted to them. The A3 High TCPX table's large rows: 3 of 6 within
    # 25% (median 1.23: its 4 NICs of 200 Gb/s carry less than the 4 x 24 GB/s NCCL's search allots them)
    assert fit["large"][:2] == (19, 16) and fit["small"][:2] == (33, 33)
    # HELD OUT (never used to set a number), against the goal (>= 80% of large rows within 25%,
    # >= 75% of smaller rows within 2x; "within" symmetric: max(r, 1/r)):
    # large 53 of 68 (78%). Out: the A4 B200 2-node all_gather, 256 MiB - 8 GiB (6 rows, 1.45 - 4.2: 260
    # GB/s busbw against the 8 x 48 GB/s the model allots 8 NICs, and against the 376 GB/s of Google's own
    # two-A4 all_gather table, which the model matches: the run, not the model; docs/validation.md, "The
    # two biggest misses"), the A4 B200 2-node all_reduce at 2 - 16 GiB (4 rows, 0.73 - 0.75: faster than
    # NCCL's NVLS-tree price with Blackwell's nvlsEfficiency 0.74), the p4d EFA rows at 24 and 32 ranks (1.5,
    # 1.6; NVIDIA/nccl#527 asks whether they are healthy) and the 2-node DGX H100 table at 256 MiB - 1 GiB
    # (2.7, 1.46, 1.33: the same erratic run as below).
    # smaller 76 of 112 (68%). Out: the A4 B200 2-node all_gather (all 18 rows, 4.5 - 27.5: 250 - 1750 us
    # where Google's own two-A4 table takes 58 - 65 us at 4 - 128 KiB and the same plugin on A3 Ultra H200
    # 28 us), the 2-node DGX H100 table at 8 B and 8 KiB - 128 MiB (16 rows, 3.3 - 28.6: 300 - 2000 us,
    # times that fall as the size doubles, an in-place column that differs from the out-of-place one by
    # up to 20x where NCCL runs one algorithm for both; the same user's 2- and 4-GPU runs show the same
    # spikes). Both files are kept: each is what it says it is (docs/validation.md). A3 Mega's two nodes
    # at 16 MiB (2.24) and one node at 64 KiB driven from one process (2.23).
    assert test["large"][:2] == (68, 53)
    assert test["small"][:2] == (112, 76)
    roof = summary(held, "roofline")
    assert roof["large"][:2] == (68, 33) and roof["small"][:2] == (112, 5)
    # issue 28's held-out files alone (before the ones added here): large 28/30, smaller 38/40 (the factor
    # model: 24/30 and 35/40)
    old = summary([r for r in held if r["source"] not in ADDED], "expected")
    assert (old["large"][:2], old["small"][:2]) == ((30, 28), (40, 38))
