"""RCCL's own cost model (analysis.book.rccl_cost, issue 41) by exact expectations: every number
below is worked out by hand from ROCm/rccl's src/graph/tuning.cc (commit 9e22c79d, baseLat and
tuning_model_5, the model rome_model_81 gives an MI300X node), topo.h (48 GB/s per XGMI link),
search.cc (totalBw: the links summed) and rccl_common.cc (the protocol by size across nodes)."""

from __future__ import annotations

import pytest

from analysis.book.collective_cost import predict_collective
from analysis.book.expected_cost import expected_time
from analysis.book.hardware import HardwareError, load_hardware
from analysis.book.rccl_cost import (
    RING_CORRECTION,
    TREE_CORRECTION,
    RcclSystem,
    _log_size,
    candidates,
    protocol_override,
    rccl_time,
    total_bw_GBps,
)

US = 1e-6
GIB = 1 << 30
# one MI300X node as RCCL sees it: 7 XGMI links x 48 GB/s (GFX94X_XGMI_WIDTH) = 336 GB/s totalBw;
# 8 NICs of 50 GB/s; AMD EPYC hosts (network post overhead 2 us)
MI300X = RcclSystem("gfx942", 7, 8, 50.0, "amd")


def times(priced):
    return {c.name: c.time_s / US for c in priced}


def test_the_tables_are_tuning_model_5s_and_the_bus_bandwidth_its_links():
    assert total_bw_GBps(MI300X) == 336.0  # 7 x 48
    assert all(len(row) == 27 for row in (*TREE_CORRECTION, *RING_CORRECTION))
    # log2i(nBytes >> 6): 1 KiB -> 16 -> 4; 1 GiB -> 2^24 -> 24; beyond 4 GiB the last entry (26)
    assert (_log_size(1024), _log_size(GIB), _log_size(8 * GIB), _log_size(8)) == (4, 24, 26, 0)


def test_one_mi300x_node_1_gib_all_reduce_takes_ring_simple():
    best, priced = rccl_time("all_reduce", GIB, 8, 1, MI300X)
    # tree/Simple is not priced on one gfx942 node (all the comm's GPUs in its topology): 5 pairs
    assert sorted(c.name for c in priced) == ["ring/LL", "ring/LL128", "ring/Simple", "tree/LL", "tree/LL128"]
    got = times(priced)
    # ring/Simple: baseLat 17 + 14 steps x hwLat XGMI 2.1 = 46.4 us; bus 336 x bwRatio 1.00 = 336,
    # x 8/14 -> 192 GB/s (no ring correction on one node): 46.4 + 2^30 / 192e3 = 46.4 + 5592.405333
    assert got["ring/Simple"] == pytest.approx(46.4 + 5592.405333, rel=1e-9)
    # ring/LL (= LL128): 12 + 14 x 0.8 = 23.2 us; 336 x 0.08 x 8/14 = 15.36 GB/s -> 69904.07 us more
    assert got["ring/LL"] == got["ring/LL128"] == pytest.approx(23.2 + 2**30 / 15360, rel=1e-9)
    # tree/LL (= LL128): 12 + 2 x (7 x 0.9) = 24.6 us; 336 x 0.06 x 0.5 = 10.08, x treeCorr[LL][24] 0.1
    assert got["tree/LL"] == got["tree/LL128"] == pytest.approx(24.6 + 2**30 / 1008, rel=1e-9)
    assert best.name == "ring/Simple"
    assert best.time_s == pytest.approx(5638.805333 * US, rel=1e-9)
    assert (best.latency_s, best.bw_GBps) == (pytest.approx(46.4 * US), pytest.approx(192.0))


def test_one_mi300x_node_1_kib_all_reduce_takes_ring_ll():
    best, priced = rccl_time("all_reduce", 1024, 8, 1, MI300X)
    got = times(priced)
    # ring/LL: 23.2 + 1024 / 15360 = 23.266667 us; ring/LL128 ties it and the first of equals wins
    assert got["ring/LL"] == pytest.approx(23.2 + 0.0666667, rel=1e-7)
    assert got["ring/LL128"] == got["ring/LL"]
    # tree/LL: 24.6 + 1024 / (10.08 x treeCorr[LL][4] 0.1 = 1.008 GB/s) = 25.615873; ring/Simple
    # 46.4 + 1024 / 192000 = 46.405333
    assert got["tree/LL"] == pytest.approx(25.615873, rel=1e-7)
    assert got["ring/Simple"] == pytest.approx(46.405333, rel=1e-7)
    assert best.name == "ring/LL" and best.time_s == pytest.approx(23.266667 * US, rel=1e-7)


def test_two_nodes_price_the_network_and_set_the_protocol_by_size():
    # 1 KiB over 2 x 8: tree/LL: 12 + 2 x ((8-1) x 0.9 + log2(2) x hwLat NET tree LL 10.5) = 45.6 us,
    # + 1024 / 1.008 GB/s = 46.615873 us. ring/LL: 12 + 28 steps x max(0.8, AMD post overhead 2.0) +
    # 2 network steps x 9.5 = 87.0 us. ring/Simple: 17 + 28 x max(2.1, 3 x 2.0) + 2 x 320 = 825 us.
    # tree/Simple now priced (8 GPUs in the topology, 16 ranks): 17 + 2 x (7 x 2.3 + 25) = 99.2 us.
    # The size table: 1024 bytes per rank is in LL's (0, 1 MiB]: tree/LL stays.
    best, priced = rccl_time("all_reduce", 1024, 16, 2, MI300X)
    lat = {c.name: c.latency_s / US for c in priced}
    assert lat == pytest.approx(
        {
            "tree/LL": 45.6,
            "tree/LL128": 45.6,
            "tree/Simple": 99.2,
            "ring/LL": 87.0,
            "ring/LL128": 87.0,
            "ring/Simple": 825.0,
        }
    )
    assert best.name == "tree/LL" and best.time_s == pytest.approx(46.615873 * US, rel=1e-7)
    # 4 MiB: the cheapest is tree/Simple, 99.2 + 4 MiB / (336 x 0.11 x 0.5 = 18.48 x treeCorr[Simple][16]
    # 1.0) = 326.1645 us (ring/Simple: 825 + 4 MiB / (336 x 16/30 x ringCorr[Simple][16] 0.1 = 17.92)
    # = 1059.06); 4 MiB per rank is in LL128's (1 MiB, 9 MiB]: RCCL runs tree/LL128, its estimate
    # still the cheapest's (tree/LL128's own line, 45.6 + 4 MiB / 1.008 = 4206.6 us, is not used)
    best, priced = rccl_time("all_reduce", 4 << 20, 16, 2, MI300X)
    got = times(priced)
    assert got["tree/Simple"] == pytest.approx(99.2 + 4194304 / 18480, rel=1e-9)
    assert got["ring/Simple"] == pytest.approx(825 + 4194304 / 17920, rel=1e-9)
    assert got["tree/LL128"] == pytest.approx(45.6 + 4194304 / 1008, rel=1e-9)
    assert best.name == "tree/LL128" and best.time_s == pytest.approx(326.1645 * US, rel=1e-6)
    # 1 GiB: ring/Simple, 825 + 2^30 / 179.2 GB/s (ringCorr[Simple][24] 1.0) = 6816.863 us, Simple by size
    best, _ = rccl_time("all_reduce", GIB, 16, 2, MI300X)
    assert best.name == "ring/Simple" and best.time_s == pytest.approx((825 + 2**30 / 179200) * US, rel=1e-9)


def test_the_size_table_per_collective_and_node_count():
    # all_reduce: the buffer itself; LL128's top 9437184 x 3.8 above 2 nodes
    assert protocol_override("all_reduce", 16 << 20, 16, 2, MI300X) == "Simple"
    assert protocol_override("all_reduce", 16 << 20, 24, 3, MI300X) == "LL128"
    assert protocol_override("all_reduce", 1048576, 16, 2, MI300X) == "LL"  # (0, 1048576]: LL
    # all_gather: per rank (nBytes / ranks); LL (0, 98304], LL128 (98304, 5046272]
    assert protocol_override("all_gather", 16 * 98304, 16, 2, MI300X) == "LL"
    assert protocol_override("all_gather", 16 * 98305, 16, 2, MI300X) == "LL128"
    assert (
        protocol_override("all_gather", 16 * 98305, 16, 2, RcclSystem("gfx942", 7, 8, 50.0, "amd", False)) == "Simple"
    )
    # reduce_scatter: 655360 per rank is in LL's range and LL128's (131072, 3211264]: LL128 overrides
    assert protocol_override("reduce_scatter", 16 * 655360, 16, 2, MI300X) == "LL128"
    assert protocol_override("reduce_scatter", 16 * 3211265, 16, 2, MI300X) == "Simple"
    assert protocol_override("all_reduce", 1024, 8, 1, MI300X) is None  # one node: the cheapest stands


def test_all_gather_is_rings_only():
    # 1 MiB over one node: ring/Simple 17 + 7 x 2.1 = 31.7 us + 2^20 / (336 x 8/7 = 384 GB/s) =
    # 34.430667 us; ring/LL 12 + 7 x 0.8 = 17.6 + 2^20 / (336 x 0.08 x 8/7 = 30.72) = 51.733 us
    best, priced = rccl_time("all_gather", 1 << 20, 8, 1, MI300X)
    assert sorted(times(priced)) == ["ring/LL", "ring/LL128", "ring/Simple"]
    assert times(priced)["ring/LL"] == pytest.approx(17.6 + 2**20 / 30720, rel=1e-9)
    assert best.name == "ring/Simple" and best.time_s == pytest.approx((31.7 + 2**20 / 384000) * US, rel=1e-9)
    assert [c[:2] for c in candidates("reduce_scatter", MI300X, 16, 2)] == [
        ("ring", "LL"),
        ("ring", "LL128"),
        ("ring", "Simple"),
    ]


def test_the_mi300x_entry_is_priced_by_rccls_model():
    hw = load_hardware("mi300x")
    assert hw.rccl == RcclSystem("gfx942", 7, 8, 0.0, "amd", True, 0.0) and hw.nccl is None
    e = expected_time(predict_collective("all_reduce", GIB, [8], hw), hw)
    assert (e.library, e.algorithm.name, e.ranks, e.nodes) == ("RCCL", "ring/Simple", 8, 1)
    assert e.time_s == pytest.approx(5638.805333 * US, rel=1e-9)


def test_predict_says_rccl_and_explains_the_override(capsys):
    from analysis.cli import main

    main(
        [
            "predict",
            "--hardware",
            "mi300x",
            "--mesh",
            "X=16",
            "--dims",
            "D=2097152",
            "--topology",
            "nodes=2,gpus_per_node=8",
            "--explain",
            "AllReduce_X([D]{U_X})",
        ]
    )
    out = capsys.readouterr().out
    assert "RCCL's model, 16 ranks on 2 nodes: tree/LL128" in out and "expected.rccl block" in out
    assert "tree/Simple" in out and "<- cheapest: RCCL runs tree/LL128" in out
    assert "<- run (RCCL's protocol by size)" in out


def test_a_malformed_rccl_block_is_refused_naming_it(tmp_path):
    from analysis.book.hardware import Hardware

    raw = {"name": "x", "kind": "gpu", "expected": {"rccl": {"arch": "gfx90a", "xgmi_links": 7}}}
    with pytest.raises(HardwareError, match="expected.rccl needs"):
        Hardware.from_dict(raw)
    raw["expected"]["rccl"] = {"arch": "gfx90a", "xgmi_links": 7, "nics_per_node": 8, "cpu": "amd", "ll128": True}
    with pytest.raises(HardwareError, match="arch one of gfx942"):
        Hardware.from_dict(raw)


def test_all_to_all_is_priced_as_send_recv_over_xgmi_then_the_nics():
    # one node: baseLat Simple 17 + hwLat XGMI ring Simple 2.1 = 19.1 us; 7/8 of each GPU's 1 MiB
    # buffer over 7 x 48 = 336 GB/s of XGMI
    best, priced = rccl_time("all_to_all", 1 << 20, 8, 1, MI300X)
    assert best.name == "p2p/Simple" and priced == [best]
    assert best.time_s == pytest.approx((19.1 + (1 << 20) * 7 / 8 / (1000 * 336)) * 1e-6)
    # two nodes: the network's ring Simple hwLat 320 us, and half of the buffer over the GPU's NIC
    # (8 NICs x 50 GB/s over 8 GPUs), slower than 7/16 of it over XGMI
    best, _ = rccl_time("all_to_all", 1 << 20, 16, 2, MI300X)
    assert best.time_s == pytest.approx((17 + 320 + (1 << 20) * 8 / 16 / (1000 * 50)) * 1e-6)
