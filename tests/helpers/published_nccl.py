"""The published nccl-tests tables of tests/data/published (SOURCES.md) read into rows: which
hardware entry each prices, and whether it is in the fit set or held out. Read by
tests/analysis/book/test_expected_cost.py and tests/analysis/book/test_nccl_cost.py."""

from __future__ import annotations

from pathlib import Path

from analysis.importers.nccl_tests import parse_nccl_tests

DATA = Path(__file__).resolve().parents[1] / "data" / "published"
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
    # added in issue 41's third round: held out
    "a100_40gb_1node_oci_gpu_cluster_all_reduce_perf.txt": ("a100_40gb", "test"),
    "a100_40gb_2node_oci_gpu_cluster_all_reduce_perf.txt": ("a100_40gb", "test"),
    "a100_40gb_1node_oci_ubuntu_all_reduce_perf.txt": ("a100_40gb", "test"),
    "a100_40gb_2node_oci_ubuntu_all_reduce_perf.txt": ("a100_40gb", "test"),
    "a100_40gb_2node_oke_rdma_all_reduce_perf.txt": ("a100_40gb", "test"),
    "a100_40gb_2node_oke_volcano_all_reduce_perf.txt": ("a100_40gb", "test"),
    "h100_2node_8hca_all_reduce_perf.txt": ("h100", "test"),
    "h100_1node_dgx_layout_all_reduce_perf.txt": ("h100", "test"),
    "mi300x_1node_aac8_rccl_all_reduce_perf.txt": ("mi300x", "test"),
    "mi300x_2node_aac10_rccl_all_reduce_perf.txt": ("mi300x", "test"),
    "h200_1node_azure_ndv5_all_reduce_perf.txt": ("h200", "test"),
    # added in issue 41's fourth round (SEARCH_LOG_round4.md): held out
    "mi300x_2node_rich_console_all_reduce_perf.txt": ("mi300x", "test"),
    "h100_2node_oci_bm_h100_all_reduce_perf.txt": ("h100", "test"),
    "a100_40gb_2node_oci_oke_slurm_operator_all_reduce_perf.txt": ("a100_40gb", "test"),
    "mi300x_2node_oci_oke_slurm_operator_all_reduce_perf.txt": ("mi300x", "test"),
    "a100_40gb_1node_oci_stack_all_reduce_perf.txt": ("a100_40gb", "test"),
    "a100_40gb_2node_oci_stack_all_reduce_perf.txt": ("a100_40gb", "test"),
    "h200_1node_azure_nhc_all_reduce_perf.txt": ("h200", "test"),
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
    # added in issue 41's third round: held out
    "gb200_nvl72_2rack_all_reduce_rows.csv": ("gb200", "test", "all_reduce", 144),
    "gb200_nvl72_20rack_all_reduce_rows.csv": ("gb200", "test", "all_reduce", 1440),
    "h200_2node_dell_roce_10g_all_reduce_rows.csv": ("h200", "test", "all_reduce", 16),
    "gcp_a3_high_2node_cluster_toolkit_all_gather_rows.csv": ("gcp_a3_high", "test", "all_gather", 16),
    # added in issue 41's fourth round (SEARCH_LOG_round4.md): held out; the p5 files' ranks column
    # overrides the 16 here, and their time is S / algbw (the files print no time column)
    "gcp_a4_b200_2node_dstack_all_reduce_rows.csv": ("b200", "test", "all_reduce", 16),
    "b200_2node_lambda_dstack_all_reduce_rows.csv": ("b200", "test", "all_reduce", 16),
    "aws_p5_2to32node_hyperpod_all_reduce_rows.csv": ("aws_p5", "test", "all_reduce", 16),
    "aws_p5_2to32node_hyperpod_alltoall_rows.csv": ("aws_p5", "test", "all_to_all", 16),
    "gcp_a4_b200_2node_gke_doc_all_gather_rows.csv": ("b200", "test", "all_gather", 16),
    "gcp_a3_ultra_h200_2node_gke_doc_all_gather_rows.csv": ("h200", "test", "all_gather", 16),
}


def published_rows() -> list[dict]:
    """Every published row: source, entry, set, collective, ranks, S (nccl-tests' size: V, or V / ranks
    for all_to_all) and V, measured time."""
    rows = []
    for name, (hw, which) in FILES.items():
        (run,) = parse_nccl_tests((DATA / name).read_text(), DATA / name)
        for r in run.rows:
            rows.append(
                dict(
                    source=name,
                    hw=hw,
                    set=which,
                    op=run.op,
                    n=run.ranks,
                    S=r.S_bytes,
                    V=r.S_bytes * (run.ranks if run.op == "all_to_all" else 1),
                    t=r.out_of_place.time_s,
                )
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
                    V=int(cell["size_bytes"]) * (ranks if op == "all_to_all" else 1),
                    t=float(cell["time_us"]) * 1e-6,
                )
            )
    return rows
