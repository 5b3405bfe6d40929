"""aws-ofi-nccl's region tuner on p5 (analysis.book.ofi_tuner, issue 41): the pair its regions
pick, read by hand off the vertices of src/tuner/nccl_ofi_regions.cpp (region_init_internal_p5_p5e,
all_reduce at 8 GPUs a node), and what predict says where the tuner, not NCCL's cheapest pair,
decides."""

from __future__ import annotations

import json

import pytest

from analysis.book.collective_cost import predict_collective
from analysis.book.expected_cost import expected_time
from analysis.book.hardware import load_hardware
from analysis.book.ofi_tuner import region_pair

MiB, GiB = 1 << 20, 1 << 30
ALL = {"tree/LL", "tree/LL128", "tree/Simple", "ring/LL", "ring/LL128", "ring/Simple", "nvls_tree/Simple"}


@pytest.mark.parametrize(
    "ranks, size, pair",
    [
        # tree/LL128 up to its edge: (36 MiB, 32), (112 MiB, 64), (288 MiB, 128) and (288 MiB, 256)
        (32, 32 * MiB, "tree/LL128"),
        (32, 37748736, "tree/LL128"),  # on the vertex itself: an edge counts, the first region wins
        (32, 37748736 + MiB, "ring/LL128"),
        (64, 112 * MiB, "tree/LL128"),
        (64, 128 * MiB, "ring/LL128"),
        (128, 256 * MiB, "tree/LL128"),
        (256, 256 * MiB, "tree/LL128"),
        # ring/LL128 to (2 GiB, 64) and (2 GiB, 128); at 32 ranks its edge (1 GiB, 17)-(2 GiB, 64) is near 1.5 GiB
        (32, GiB, "ring/LL128"),
        (32, 2 * GiB, "ring/Simple"),
        (64, 2 * GiB, "ring/LL128"),
        (128, 512 * MiB, "ring/LL128"),
        (128, 2 * GiB, "ring/LL128"),
        # NVLS-tree between (2 GiB, 128) and (6 GiB, 128), and at 256 ranks from (288 MiB, 256) to (1025 MiB, 256)
        (128, 4 * GiB, "nvls_tree/Simple"),
        (256, 512 * MiB, "nvls_tree/Simple"),
        (256, GiB, "nvls_tree/Simple"),
        (256, 2 * GiB, "ring/LL128"),  # the vertex (2 GiB, 256) of ring/LL128, checked before NVLS-tree
        # ring/Simple past (2.5 GiB, 64) and the edge (2.5 GiB, 64)-(7.5 GiB, 160): about 6.4 GiB at 128
        (64, 4 * GiB, "ring/Simple"),
        (128, 8 * GiB, "ring/Simple"),
    ],
)
def test_the_p5_regions_pick_the_pair_their_vertices_hold(ranks, size, pair):
    assert region_pair("aws_ofi_p5", "all_reduce", size, ranks, ranks // 8, ALL) == pair


def test_the_tuner_leaves_nccl_its_choice_where_it_has_no_region():
    assert region_pair("aws_ofi_p5", "all_reduce", GiB, 16, 2, ALL) is None  # 2 nodes or fewer
    assert region_pair("aws_ofi_p5", "all_gather", GiB, 64, 8, ALL) is None  # all_reduce only
    assert region_pair("aws_ofi_p5", "all_reduce", GiB, 32, 8, ALL) is None  # 4 GPUs a node: not modelled
    # a pair NCCL disabled (no NVLS) is skipped, and no later region holds the point: NCCL's own
    assert region_pair("aws_ofi_p5", "all_reduce", 512 * MiB, 256, 32, ALL - {"nvls_tree/Simple"}) is None


def test_aws_p5_sees_eight_grouped_nics_and_the_tuner_decides_past_two_nodes():
    hw = load_hardware("aws_p5")
    # 32 EFA devices of 100 Gb/s, 4 a GPU, grouped by aws-ofi-nccl's RDMA protocol into 8 of 400 Gb/s
    assert (hw.nccl.nics_per_node, hw.scaleout_bw_unidir_Bps, hw.nccl.tuner) == (8, 50e9, "aws_ofi_p5")

    def price(ranks, size):
        return expected_time(predict_collective("all_reduce", size, [ranks], hw), hw)

    # 2 nodes: NCCL's own cheapest, NVLS-tree over 8 channels capped at perChMaxNVLSTreeBws 57.7 GB/s
    # (below 0.85 x 48 x 7/8 x 2 = 71.4 and 2 x 48): bus 8 x 57.7, algorithm bandwidth x 16/30
    two = price(16, GiB)
    assert (two.algorithm.name, two.algorithm.channels, two.tuner) == ("nvls_tree/Simple", 8, "")
    assert two.algorithm.bw_GBps == pytest.approx(8 * 57.7 * 16 / 30)
    # 16 nodes at 1 GiB: the tuner's ring/LL128, dearer than the NVLS-tree NCCL would take
    big = price(128, GiB)
    cheapest = min(big.candidates, key=lambda c: c.time_s)
    assert big.algorithm.name == "ring/LL128" and cheapest.name == "nvls_tree/Simple"
    assert big.time_s == pytest.approx(next(c for c in big.candidates if c.name == "ring/LL128").time_s)
    assert big.tuner == (
        "aws-ofi-nccl's tuner plugin (its p5/p5e regions) runs ring/LL128 here, "
        "not NCCL's cheapest pair (nvls_tree/Simple)"
    )
    # where the tuner's pick is NCCL's cheapest too (NVLS-tree at 256 ranks, 512 MiB), it says so
    same = price(256, 512 * MiB)
    assert same.algorithm.name == "nvls_tree/Simple"
    assert same.tuner.endswith("runs nvls_tree/Simple here, NCCL's cheapest pair too")


def test_predict_says_the_tuner_picked_the_pair(capsys):
    from analysis.cli import main

    argv = ["predict", "AllReduce_X(A[I]{U_X})", "--hardware", "aws_p5", "--mesh", "X=128", "--dims", "I=268435456"]
    argv += ["--dtype", "float32", "--topology", "nodes=16,gpus_per_node=8"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["expected_algorithm"] == "ring/LL128" and out["expected_tuner"].startswith("aws-ofi-nccl's")
    assert main([*argv, "--explain"]) == 0
    text = capsys.readouterr().out
    assert "128 ranks on 16 nodes: ring/LL128 (the tuner plugin picked it), latency" in text
    tuner = "aws-ofi-nccl's tuner plugin (its p5/p5e regions) runs ring/LL128 here, not NCCL's cheapest pair"
    assert f"    ({tuner} (nvls_tree/Simple))\n" in text
    assert "    ring/LL128 " in text and "<- taken (the tuner's region)\n" in text
    assert "    nvls_tree/Simple " in text and "  <- cheapest\n" in text
    assert main([*argv[:-1], "nodes=2,gpus_per_node=8", "--mesh", "X=16", "--explain"]) == 0  # 2 nodes: NCCL's own
    text = capsys.readouterr().out
    assert "tuner" not in text and "<- cheapest" not in text
