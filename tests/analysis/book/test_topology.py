"""Collectives beyond one interconnect domain: GPU nodes over InfiniBand, TPU slices over DCN,
and groups too large for one domain, checked against values derived by hand.

Constants used below (conf/hardware): h100 W (NVLink egress) = 4.5e11 B/s, T_min = 1e-6 s,
W_out (400 Gb/s NDR per GPU) = 5e10 B/s, T_out = 5e-6 s, domain 8. tpu_v5e W_bidi = 9e10,
W_unidir = 4.5e10, DCN W_out = 3.125e9 B/s per chip, T_out = 1e-5 s, domain 256.
h100_nvl: W (bridge) = 3e11 between a pair, W_node (PCIe Gen5) = 6.4e10; a100_pcie W = 3.2e10.
The levels of a cross-domain collective overlap (the book's cross-node model): T = max over
levels; a ReduceScatter works on V inside a node, then on V/8 across nodes.

The network levels a group spans, whole (issue 30's mutation check): every ``--topology``
form parsed to its exact Layout and on both sides of each bound, and ``fabrics_for``'s every
branch as its full list of Fabric rows (name, where, interconnect, the W and T_min keys, block),
on made-up entries whose domain sizes make a plausible-wrong rule differ.
"""

from __future__ import annotations

import json
import math
import re

import pytest

from analysis.book.collective_cost import Span, predict_collective
from analysis.book.errors import BookError
from analysis.book.hardware import Hardware, load_hardware
from analysis.book.predict import predict_expr
from analysis.book.topology import (
    Fabric,
    Layout,
    fabrics_for,
    group_extents,
    parse_layout,
    parse_topology,
    split_axes,
    wraparound_for,
    wraparound_reason,
)
from analysis.cli import main

H100, V5E = load_hardware("h100"), load_hardware("tpu_v5e")
rel = dict(rel=1e-9)
V = 1e9


def spans(hw, topology, sizes):
    """The spans CostContext derives for one collective over all of ``sizes``."""
    fabrics = fabrics_for(hw, parse_layout(topology), math.prod(sizes))
    parts = split_axes(sizes, [f.block for f in fabrics])
    return [Span(f, tuple(p[i] for p in parts), (True,) * len(sizes)) for i, f in enumerate(fabrics)]


def test_layouts_parse_and_split():
    assert parse_layout("4x4x4").shape == (4, 4, 4)
    lay = parse_layout("slices=2,slice=16x16")
    assert (lay.kind, lay.blocks, lay.block_size, lay.shape) == ("slices", 2, 256, (16, 16))
    assert (parse_layout("nodes=4,gpus_per_node=8").blocks, parse_layout("slices=2").block_size) == (4, None)
    for bad in ("nodes=2", "slices=0", "nodes=2,gpus=8", "4y4", "slices=2,slice=4y4"):
        with pytest.raises(BookError, match="is not like"):
            parse_layout(bad)
    # row-major: the first axis varies slowest, so X's outer part crosses nodes
    assert split_axes([16], [8, 16]) == [(8, 2)]
    assert split_axes([2, 8], [8, 16]) == [(1, 2), (8, 1)]
    assert split_axes([4, 4], [8, 16]) == [(2, 2), (4, 1)]
    with pytest.raises(BookError, match="evenly"):
        split_axes([3, 4], [6, 12])  # devices 0, 4, 8 lie in blocks 0, 0, 1
    assert group_extents([0, 8], [8, 16]) == ([1, 2], True)  # one GPU in each of 2 nodes
    assert group_extents(list(range(16)), [8, 16]) == ([8, 2], True)


# One 8-GPU node:  AllGather = ReduceScatter = V*7/(8*4.5e11) = 1.9444 ms; AllReduce 3.8889 ms;
#                  AllToAll = V*7/(64*4.5e11) = 243.06 us.
# 2 nodes x 8:     inside each node the same 1.9444 ms; across nodes (V/8)*1/(2*5e10) = 1.25 ms;
#                  max = 1.9444 ms (one after another 3.1944 ms); AllReduce 2x = 3.8889 ms;
#                  AllToAll: V/16^2 * 7 peers / 4.5e11 = 60.76 us inside, V/16^2 * 8 peers / 5e10
#                  = 625 us across -> 625 us, 2.6x the single node (the book: "more than 4x" as N grows).
@pytest.mark.parametrize(
    "kind, node_s, two_nodes_s",
    [
        ("all_gather", V * 7 / (8 * 4.5e11), V * 7 / (8 * 4.5e11)),
        ("reduce_scatter", V * 7 / (8 * 4.5e11), V * 7 / (8 * 4.5e11)),
        ("all_reduce", 2 * V * 7 / (8 * 4.5e11), 2 * V * 7 / (8 * 4.5e11)),
        ("all_to_all", V * 7 / (64 * 4.5e11), V / 256 * 8 / 5e10),
    ],
)
def test_h100_node_vs_two_nodes(kind, node_s, two_nodes_s):
    one = predict_collective(kind, V, [8], H100)
    assert one.time_s == pytest.approx(node_s, **rel) and one.topology == "switch" and one.note == ""
    two = predict_collective(kind, V, [16], H100, spans=spans(H100, "nodes=2,gpus_per_node=8", [16]))
    assert two.time_s == pytest.approx(two_nodes_s, **rel) and two.note == ""
    assert two.topology == "hierarchical" and [lv["network"] for lv in two.levels] == [
        "NVLink switch",
        "InfiniBand NDR",
    ]
    assert "InfiniBand NDR" in two.formula and "W_out" in two.formula
    if kind != "all_to_all":
        across = (2 if kind == "all_reduce" else 1) * V / 8 / (2 * 5e10)
        assert two.levels[1]["time_s"] == pytest.approx(across, **rel)
        assert two.levels[1]["V_bytes"] == V / 8


def test_many_nodes_become_scale_out_bound():
    # 16 nodes x 8: across nodes (V/8)*15/(16*5e10) = 2.3438 ms > 1.9444 ms inside a node.
    p = predict_collective("all_gather", V, [128], H100, spans=spans(H100, "nodes=16,gpus_per_node=8", [128]))
    assert p.time_s == pytest.approx(V / 8 * 15 / (16 * 5e10), **rel)
    # An axis that only crosses nodes (X=2 of mesh X=2,Y=8): V*1/(2*5e10) = 10 ms over InfiniBand alone.
    s = spans(H100, "nodes=2,gpus_per_node=8", [2, 8])
    only_x = [Span(x.fabric, x.sizes[:1]) for x in s]
    assert predict_collective("all_gather", V, [2], H100, spans=only_x).time_s == pytest.approx(V / (2 * 5e10))
    # Y=8 stays inside each node: exactly the single-node formula.
    only_y = [Span(x.fabric, x.sizes[1:]) for x in s]
    p = predict_collective("all_gather", V, [8], H100, spans=only_y)
    assert p == predict_collective("all_gather", V, [8], H100)


def test_tpu_v5e_across_two_slices():
    # mesh X=32,Y=16, slices=2,slice=16x16: X = 2 slices x 16 (a ring inside a slice).
    # A[I_X, J], I=16384, J=1024 bf16: V = 2*16384*1024 = 33,554,432 B.
    # AllGather: inside max(8 us, V/9e10 = 372.83 us); across (V/16)*1/(2*3.125e9) = 335.54 us
    #            -> 372.83 us (one after another 708.37 us). AllReduce 2x = 745.65 us.
    # AllToAll: inside V' = V*(16/32)^2, V'*16/(4*16*9e10) = 23.30 us; across V/32^2 * 16 peers
    #           / 3.125e9 = 167.77 us -> 167.77 us.
    mesh, dims, top = {"X": 32, "Y": 16}, {"I": 16384, "J": 1024}, "slices=2,slice=16x16"
    Vb = 33554432
    ag = predict_expr("AllGather_X(A[I_X, J])", mesh, dims, "bfloat16", V5E, top)
    assert ag.prediction.V_bytes == Vb and ag.time_s == pytest.approx(Vb / 9e10, **rel)
    assert ag.prediction.levels[1]["time_s"] == pytest.approx(Vb / 16 / (2 * 3.125e9), **rel)
    assert "DCN" in ag.prediction.formula and "708.37 us" in ag.prediction.formula
    assert ag.axis_notes == (
        (
            "X=32: 16 inside each slice (ICI, ring (tpu_v5e wraps around only an axis of 16; "
            "this one is 16)) x 2 across slices (DCN)"
        ),
    )
    ar = predict_expr("AllReduce_X(A[I, J]{U_X})", mesh, dims, "bfloat16", V5E, top)
    assert ar.time_s == pytest.approx(2 * Vb / 9e10, **rel)
    a2a = predict_expr("AllToAll_{X,J}(A[I_X, J])", mesh, dims, "bfloat16", V5E, top)
    assert a2a.time_s == pytest.approx(Vb / 1024 * 16 / 3.125e9, **rel)
    assert a2a.prediction.levels[0]["time_s"] == pytest.approx(Vb / 4 * 16 / (4 * 16 * 9e10), **rel)
    # Y=16 stays in its slice: the single-slice ring formula, unchanged.
    y = predict_expr("AllGather_Y(A[I, J_Y])", mesh, dims, "bfloat16", V5E, top).prediction
    assert (y.topology, y.time_s, y.levels) == ("ring", pytest.approx(Vb / 9e10, **rel), ())


def test_too_large_group_is_flagged_never_silently_one_domain():
    # 16 H100s, no topology: flagged, priced as 2 nodes of 8 (the 2-node numbers above).
    p = predict_collective("all_gather", V, [16], H100)
    assert "larger than h100's largest domain (8 devices)" in p.note and "--topology nodes=" in p.note
    assert p.time_s == pytest.approx(V * 7 / (8 * 4.5e11), **rel) and p.topology == "hierarchical"
    # v5e axes 32x16 = 512 chips > 256: two slices of 16x16 assumed. Inside: a 16x16 torus of rings,
    # V/(9e10*2) = 5.965 ms for V = 2^30; across: (V/256)*1/(2*3.125e9) = 671 us -> 5.965 ms.
    p = predict_collective("all_gather", 2**30, [32, 16], V5E)
    assert "largest domain (256 devices)" in p.note and "slices=K" in p.note
    assert p.time_s == pytest.approx(2**30 / 1.8e11, **rel)
    assert p.levels[1]["time_s"] == pytest.approx(2**30 / 256 / (2 * 3.125e9), **rel)
    assert predict_collective("all_gather", 2**30, [16, 16], V5E).note == ""  # one full pod: fine


def test_pcie_and_nvl_pairs_price_the_node_over_pcie():
    # a100_pcie, 8 cards, no topology: no NVLink domain (1), flagged, one node over PCIe:
    # V*7/(8*3.2e10) = 27.34 ms.
    p = predict_collective("all_gather", V, [8], load_hardware("a100_pcie"))
    assert p.time_s == pytest.approx(V * 7 / (8 * 3.2e10), **rel) and "largest domain (1 device)" in p.note
    # h100_nvl, one node of 8 = 4 bridged pairs: pair V*1/(2*3e11) = 1.667 ms; across pairs over
    # PCIe (V/2)*3/(4*6.4e10) = 5.859 ms -> 5.859 ms.
    nvl = load_hardware("h100_nvl")
    p = predict_collective("all_gather", V, [8], nvl, spans=spans(nvl, "nodes=1,gpus_per_node=8", [8]))
    assert [lv["network"] for lv in p.levels] == ["NVLink", "PCIe"]
    assert p.time_s == pytest.approx(V / 2 * 3 / (4 * 6.4e10), **rel)
    assert predict_collective("all_gather", V, [2], nvl).time_s == pytest.approx(V / (2 * 3e11), **rel)


@pytest.mark.parametrize(
    "hw, topology, message",
    [
        ("h100", "nodes=3,gpus_per_node=8", "has 24 GPUs but the mesh has 16"),
        ("h100", "slices=2", "describes TPU slices"),
        ("tpu_v5e", "nodes=2,gpus_per_node=8", "describes GPU nodes"),
        ("tpu_v5e", "slices=1,slice=16x32", "larger than tpu_v5e's largest slice (256)"),
        ("h100", "nodes=1,gpus_per_node=16", "no node_bw_unidir_Bps"),
    ],
)
def test_bad_topologies(hw, topology, message):
    mesh = {"X": 16} if topology != "slices=1,slice=16x32" else {"X": 16, "Y": 32}
    with pytest.raises(BookError, match=re.escape(message)):
        predict_expr("AllGather_X(A[I_X, J])", mesh, {"I": 1024, "J": 32}, "bfloat16", load_hardware(hw), topology)


def test_predict_cli_shows_the_scale_out_network(capsys):
    # A[I_X, J], I=16384, J=8192 bf16: V = 268,435,456 B. Inside each node V*7/(8*4.5e11) = 521.96 us;
    # across (V/8)/(2*5e10) = 335.54 us -> 521.96 us.
    argv = [
        "predict",
        "AllGather_X(A[I_X, J])",
        "--hardware",
        "h100",
        "--mesh",
        "X=16",
        "--dims",
        "I=16384,J=8192",
        "--topology",
        "nodes=2,gpus_per_node=8",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "X=16: 8 inside each node (NVLink switch) x 2 across nodes (InfiniBand NDR)" in out
    assert "[across nodes, InfiniBand NDR (N=2)" in out and "W_out" in out and "521.96 us" in out
    assert main(argv + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["topology"] == "hierarchical" and d["time_s"] == pytest.approx(268435456 * 7 / (8 * 4.5e11))
    assert [lv["devices"] for lv in d["levels"]] == [8, 2]
    assert main(argv[:-2]) == 0  # no topology: flagged and the note printed
    assert "note       a group of 16 devices is larger than h100's largest domain" in capsys.readouterr().out


def test_hlo_cli_places_groups_by_device_id(tmp_path, capsys):
    # all-gather over 16: bf16[1048576] -> bf16[16777216], V = 33,554,432 B; inside each node
    # V*7/(8*4.5e11) = 65.24 us, across (V/8)/(2*5e10) = 41.94 us -> 65.24 us.
    # all-reduce over pairs {i, i+8}: one GPU in each of 2 nodes, f32[1048576] = 4,194,304 B:
    # only InfiniBand, 2 * V*1/(2*5e10) = 83.89 us (over NVLink it would be 2 * V/(2*4.5e11) = 9.32 us).
    groups = ",".join(f"{{{i},{i + 8}}}" for i in range(8))
    f = tmp_path / "m.hlo"
    f.write_text(
        "HloModule m, num_partitions=16\n\nENTRY e {\n  p = bf16[1048576]{0} parameter(0)\n"
        "  q = f32[1048576]{0} parameter(1)\n"
        "  ag = bf16[16777216]{0} all-gather(p), replica_groups=[1,16]<=[16], dimensions={0}\n"
        f"  ROOT ar = f32[1048576]{{0}} all-reduce(q), replica_groups={{{groups}}}, to_apply=add\n}}\n"
    )
    top = ["--hardware", "h100", "--topology", "nodes=2,gpus_per_node=8"]
    assert main(["hlo", str(f), *top, "--json"]) == 0
    found = {r["name"]: r for r in json.loads(capsys.readouterr().out)["collectives"]}
    assert found["ag"]["links"] == "hierarchical"
    assert found["ag"]["model_time_s"] == pytest.approx(33554432 * 7 / (8 * 4.5e11))
    assert found["ar"]["model_time_s"] == pytest.approx(2 * 4194304 / (2 * 5e10))
    assert found["ar"]["wraparound_reason"].startswith("2 across nodes (InfiniBand NDR)")
    assert main(["hlo", str(f), *top]) == 0
    out = capsys.readouterr().out
    assert "formula (ag): max over levels" in out and "[across nodes, InfiniBand NDR (N=2)" in out
    assert "device i lies in node/slice i // (devices per node/slice)" in out
    assert main(["hlo", str(f), "--hardware", "h100"]) == 0  # no topology: the 16-group is flagged
    assert "note (ag): a group of 16 devices is larger than h100's largest domain" in capsys.readouterr().out


# ---------------------------------------------------------------- physical axes of a slice
# tpu_v5p: T_min = 1e-6 s, W_unidir = 9e10, W_bidi = 1.8e11; tpu_v6e the same links; tpu_v5e
# W_unidir = 4.5e10, W_bidi = 9e10. A[I_Z] with I = 2^24 bf16: V = 33,554,432 B.
VBIG = 2**25


def predict_json(capsys, expr, hardware, mesh, topology, dims="I=16777216"):
    argv = ["predict", expr, "--hardware", hardware, "--mesh", mesh, "--dims", dims, "--json"]
    assert main(argv + (["--topology", topology] if topology else [])) == 0
    return json.loads(capsys.readouterr().out)


def test_v5p_2x2x4_has_no_wraparound_and_4x4x4_does(capsys):
    # 2x2x4 is no full cube: Z=4 (z, 4 of 4) is a line: max(1e-6 * 3, 3 * (V/4) / 9e10) = 279.62 us
    d = predict_json(capsys, "AllGather_Z(A[I_Z])", "tpu_v5p", "X=2,Y=2,Z=4", "2x2x4")
    assert (d["topology"], d["hops"], d["wraparound"]) == ("line", 3, [False])
    assert d["time_s"] == pytest.approx(3 * (VBIG / 4) / 9e10, **rel)
    assert d["axis_notes"][0].startswith("Z=4: on z (4 of 4) of slice 2x2x4: line")
    # without --topology the mesh stands for the slice: the same 2x2x4, the same line
    assert predict_json(capsys, "AllGather_Z(A[I_Z])", "tpu_v5p", "X=2,Y=2,Z=4", None)["topology"] == "line"
    # 4x4x4 is a full cube: a ring, max(1e-6 * ceil(4/2), V / 1.8e11) = 186.41 us
    d = predict_json(capsys, "AllGather_Z(A[I_Z])", "tpu_v5p", "X=4,Y=4,Z=4", "4x4x4")
    assert (d["topology"], d["hops"]) == ("ring", 2)
    assert d["time_s"] == pytest.approx(VBIG / 1.8e11, **rel)


def test_a_64_device_axis_spans_all_three_axes_of_4x4x4(capsys):
    # X=64 takes x, y and z: three rings, max(1e-6 * (2 + 2 + 2), V / (1.8e11 * 3)) = 62.14 us
    d = predict_json(capsys, "AllGather_X(A[I_X])", "tpu_v5p", "X=64", "4x4x4")
    assert (d["axis_sizes"], d["wraparound"], d["hops"]) == ([4, 4, 4], [True, True, True], 6)
    assert d["time_s"] == pytest.approx(VBIG / (1.8e11 * 3), **rel)
    assert d["axis_notes"][0].startswith("X=64: on x (4 of 4), y (4 of 4), z (4 of 4) of slice 4x4x4: ring")
    # X=16 over x and y, Y=4 on z; an AllReduce over both is all three rings: 2 * V / (1.8e11 * 3)
    d = predict_json(capsys, "AllReduce_XY(A[I]{U_XY})", "tpu_v5p", "X=16,Y=4", "4x4x4")
    assert d["axis_sizes"] == [4, 4, 4] and d["time_s"] == pytest.approx(2 * VBIG / (1.8e11 * 3), **rel)


def test_v6e_16_as_8x2_spans_parts_of_axes(capsys):
    # X=8 on 4x4 takes x (4 of 4) and half of y; v6e wraps only an axis of 16, so two lines:
    # hops 3 + 1 = 4, V / (9e10 * 4/3 + 9e10 * 2/1) = 111.85 us
    d = predict_json(capsys, "AllGather_X(A[I_X])", "tpu_v6e", "X=8,Y=2", "4x4")
    assert (d["axis_sizes"], d["wraparound"], d["hops"]) == ([4, 2], [False, False], 4)
    assert d["time_s"] == pytest.approx(VBIG / (9e10 * 4 / 3 + 9e10 * 2), **rel)
    # v5e 8x16: X=128 spans x (8, a line) and y (16, a ring): V / (4.5e10 * 8/7 + 9e10)
    d = predict_json(capsys, "AllGather_X(A[I_X])", "tpu_v5e", "X=128", "8x16")
    assert (d["axis_sizes"], d["wraparound"], d["topology"]) == ([8, 16], [False, True], "mixed")
    assert d["time_s"] == pytest.approx(VBIG / (4.5e10 * 8 / 7 + 9e10), **rel)


def test_a_recorded_placement_prices_what_the_devices_did():
    # A run on a 2x2x4 v5p recorded Z on the x-y plane (JAX's choice): two lines of 2, not z's
    # line of 4: hops 1 + 1, V / (9e10 * 2 + 9e10 * 2) = 93.21 us
    from analysis.book.notation import parse
    from analysis.book.notation_cost import CostContext
    from analysis.book.placement import Placement

    place = Placement((2, 2, 4), {"X": {"z": 2}, "Y": {"z": 2}, "Z": {"x": 2, "y": 2}})
    ctx = CostContext.build({"X": 2, "Y": 2, "Z": 4}, {"I": 2**24}, "bfloat16", load_hardware("tpu_v5p"), None, place)
    p = ctx.cost(parse("AllGather_Z(A[I_Z])")).prediction
    assert (p.axis_sizes, p.wraparound, p.hops) == ((2, 2), (False, False), 2)
    assert p.time_s == pytest.approx(VBIG / (9e10 * 2 + 9e10 * 2), **rel)


def test_a_recorded_placement_across_two_slices_prices_the_dcn():
    # Two v5e 4x2 slices, X across them (DCN), Y=8 inside each (x 4, y 2: two lines).
    # AllGather_X: DCN only, V / (2 * 3.125e9) = 5.37 ms. AllGather_XY: ICI on V,
    # max(1e-6 * 4, V / (4.5e10 * 4/3 + 4.5e10 * 2)) = 223.70 us; DCN on V/8: 671.09 us -> 671.09 us
    from analysis.book.notation import parse
    from analysis.book.notation_cost import CostContext
    from analysis.book.placement import Placement

    place = Placement((4, 2, 1), {"X": {"slice": 2}, "Y": {"x": 4, "y": 2}}, 1, 2)
    ctx = CostContext.build({"X": 2, "Y": 8}, {"I": 2**24}, "bfloat16", V5E, None, place)
    x = ctx.cost(parse("AllGather_X(A[I_X])"))
    assert x.prediction.time_s == pytest.approx(VBIG / (2 * 3.125e9), **rel)
    assert x.axis_notes == ("X=2: across 2 slices (DCN)",)
    xy = ctx.cost(parse("AllGather_XY(A[I_XY])")).prediction
    assert [(lv["network"], lv["devices"]) for lv in xy.levels] == [("ICI", 8), ("DCN", 2)]
    assert xy.levels[0]["time_s"] == pytest.approx(VBIG / (4.5e10 * 4 / 3 + 4.5e10 * 2), **rel)
    assert xy.time_s == pytest.approx(VBIG / 8 / (2 * 3.125e9), **rel)


# ---------------------------------------------------------------- two devices per chip
# tpu_v7x per device: W_unidir = 4.5e10, W_bidi = 9e10, T_min = 1e-6, W_core = 1.85e12 (HBM-bound,
# no published figure). A 2x2x2 slice of two-core chips as mesh (8, 2): X on the chips, Y the cores.
V7X = load_hardware("tpu_v7x")
CORES = {"X": {"x": 2, "y": 2, "z": 2}, "Y": {"core": 2}}


def v7x_cost(expr):
    from analysis.book.notation import parse
    from analysis.book.notation_cost import CostContext
    from analysis.book.placement import Placement

    place = Placement((2, 2, 2), CORES, cores=2)
    return CostContext.build({"X": 8, "Y": 2}, {"I": 2**24}, "bfloat16", V7X, None, place).cost(parse(expr))


def test_a_chips_two_cores_are_priced_at_their_own_bandwidth():
    # Y: a line of 2 at W_core: max(1e-6 * 1, (2-1) * (V/2) / 1.85e12) = 9.07 us (over ICI: 372.82 us)
    y = v7x_cost("AllGather_Y(A[I_Y])")
    assert (y.prediction.axis_sizes, y.prediction.hops) == ((2,), 1)
    assert y.time_s == pytest.approx((VBIG / 2) / 1.85e12, **rel)
    assert "W_core" in y.prediction.formula and "not an ICI link" in y.prediction.note
    # X and Y: three lines of 2 (a 2x2x2 is no full cube) and the cores:
    # V / (3 * 4.5e10 * 2 + 1.85e12 * 2) = 8.45 us, hops 4 -> max(4 us, 8.45 us)
    xy = v7x_cost("AllGather_XY(A[I_XY])")
    assert xy.prediction.hops == 4
    assert xy.time_s == pytest.approx(VBIG / (3 * 4.5e10 * 2 + 1.85e12 * 2), **rel)
    # an entry without the on-chip figure says so instead of pricing the cores as an ICI link
    import dataclasses

    from analysis.book.collective_cost import placed_group, predict_collective
    from analysis.book.placement import Placement

    bare = dataclasses.replace(V7X, core_bw_unidir_Bps=None)
    with pytest.raises(BookError, match="core_bw_unidir_Bps"):
        predict_collective("all_gather", VBIG, hw=bare, **placed_group(bare, Placement((2, 2, 2), CORES, 2), ["Y"]))


def test_tpu_v3_constants_are_per_core():
    # the book's per-chip v3 numbers (1.4e14 FLOP/s, 9e11 B/s HBM, 1e11 one-way per link,
    # 6.25e9 DCN per TPU) halved: a JAX device on v3 is one of the chip's two TensorCores
    v3 = load_hardware("tpu_v3")
    assert v3.flops("bfloat16") == 7e13 and v3.hbm_bw_Bps == 4.5e11
    assert (v3.link_bw_unidir_Bps, v3.link_bw_bidir_Bps, v3.scaleout_bw_unidir_Bps) == (5e10, 1e11, 3.125e9)
    assert v3.core_bw_unidir_Bps == v3.hbm_bw_Bps / 2 and "HBM-bound" in v3.source
    assert V7X.core_bw_unidir_Bps == V7X.hbm_bw_Bps / 2 and "publishes no die-to-die figure" in V7X.source


def test_the_report_prices_a_point_over_its_recorded_placement():
    # a summary row of a v5p run whose X=64 lay on a 4x4x4 (three rings): V / (1.8e11 * 3);
    # without the placement column, X is one ring of 64: max(32 us, V / 1.8e11)
    import pandas as pd

    from analysis.predictions import predict_points

    place = {"slice_shape": [4, 4, 4], "axes": {"X": {"x": 4, "y": 4, "z": 4}}, "cores_per_chip": 1, "slices": 1}
    row = {"op": "all_gather", "V_bytes": VBIG, "axes": "X", "axis_sizes": "64", "placement": json.dumps(place)}
    got = predict_points(pd.DataFrame([row, {**row, "placement": None}]), load_hardware("tpu_v5p"))
    assert got["model_time_s"].tolist() == pytest.approx([VBIG / (1.8e11 * 3), VBIG / 1.8e11], rel=1e-9)


def test_profile_prices_a_runs_collectives_over_its_recorded_placement():
    # analysis profile on a run folder: the mesh axes a group spans, on the physical axes the
    # run recorded (X=64 on a 4x4x4: three rings, V / (1.8e11 * 3)); --topology overrides it
    import argparse
    import types

    from analysis.cli.profile import _predictor

    place = {"slice_shape": [4, 4, 4], "axes": {"X": {"x": 4, "y": 4, "z": 4}}, "cores_per_chip": 1, "slices": 1}
    ag = types.SimpleNamespace(kind="all-gather", operand_bytes=VBIG // 64, result_bytes=VBIG, group_size=64)
    args = argparse.Namespace(topology=None)
    hw = load_hardware("tpu_v5p")
    got = _predictor(args, hw, {"X": 64}, place)(ag, ["X"])
    assert got["model_time_s"] == pytest.approx(VBIG / (1.8e11 * 3), **rel)
    flat = _predictor(argparse.Namespace(topology="64"), hw, {"X": 64}, place)(ag, ["X"])  # one axis of 64
    assert flat["model_time_s"] == pytest.approx(VBIG / 1.8e11, **rel)


def _v5p_all_gather(path, capsys, devices: int, elements: int, groups: str, topology: str) -> dict:
    """``analysis hlo --json`` on one bf16 all-gather of ``elements`` per device into 16M
    elements over ``devices`` devices, on a v5p of ``topology``: its row."""
    path.write_text(
        f"HloModule m, num_partitions={devices}\n\nENTRY e {{\n  p = bf16[{elements}]{{0}} parameter(0)\n"
        f"  ROOT ag = bf16[16777216]{{0}} all-gather(p), replica_groups={groups}, dimensions={{0}}\n}}\n"
    )
    assert main(["hlo", str(path), "--hardware", "tpu_v5p", "--topology", topology, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["collectives"][0]


def test_hlo_places_a_group_on_the_slice_by_its_device_ids(tmp_path, capsys):
    # bf16[262144] -> bf16[16777216] over 64 devices: V = 33,554,432 B. On a 4x4x4 v5p, ids 0..63
    # cover x, y and z: three rings, V / (1.8e11 * 3) = 62.14 us (as one ring of 64: 186.41 us).
    # Groups of 4 consecutive ids on a 2x2x4 lie along z, no full cube: a line, 3 * (V/4) / 9e10.
    ag = _v5p_all_gather(tmp_path / "ag.hlo", capsys, 64, 262144, "[1,64]<=[64]", "4x4x4")
    assert (ag["links"], ag["model_time_s"]) == ("ring", pytest.approx(VBIG / (1.8e11 * 3), **rel))
    assert ag["wraparound_reason"].startswith("on x (4 of 4), y (4 of 4), z (4 of 4) of topology 4x4x4")
    # 16 devices in groups of 4 consecutive ids: bf16[4194304] -> bf16[16777216], V = 2^25 B
    ag = _v5p_all_gather(tmp_path / "z.hlo", capsys, 16, 4194304, "[4,4]<=[16]", "2x2x4")
    assert (ag["links"], ag["model_time_s"]) == ("line", pytest.approx(3 * (VBIG / 4) / 9e10, **rel))
    assert ag["wraparound_reason"].startswith("on z (4 of 4) of topology 2x2x4")


LINK = ("link_bw_unidir_Bps", "hop_latency_s")
OUT = ("scaleout_bw_unidir_Bps", "scaleout_latency_s")
# a switch domain of 8 with a named network; one of 4 whose nodes add a PCIe level; a torus of 16
NV = Hardware("nv", "gpu", interconnect="switch", domain_size=8, scaleout_network="IB")
PCIE = Hardware("pcie", "gpu", interconnect="switch", domain_size=4, node_bw_unidir_Bps=3e10)
PAIR = Hardware("pair", "gpu", interconnect="switch", domain_size=2, node_bw_unidir_Bps=3e10)
TPU = Hardware("tpu", "tpu", interconnect="torus", domain_size=16, wraparound="only_16")


def test_each_form_parses_to_its_layout():
    assert parse_topology("4×4") == [4, 4] and parse_topology("4x1") == [4, 1]
    assert parse_layout(" 4x4 ") == Layout("4x4", "shape", (4, 4))
    assert parse_layout("nodes=2, gpus_per_node=1") == Layout("nodes=2, gpus_per_node=1", "nodes", None, 2, 1)
    assert parse_layout("slices=2") == Layout("slices=2", "slices", None, 2, None)
    assert parse_layout("slices=2,slice=4x2") == Layout("slices=2,slice=4x2", "slices", (4, 2), 2, 8)


@pytest.mark.parametrize(
    "text, message",
    [
        ("4x0", "topology '4x0' is not like 4x4x4 or 8x16"),
        ("nodes=0,gpus_per_node=8", "topology 'nodes=0,gpus_per_node=8' is not like "),
        ("nodes=2,gpus_per_node=0", "topology 'nodes=2,gpus_per_node=0' is not like "),
        ("slices=0", "topology 'slices=0' is not like "),
        ("nodes=2,gpus_per_node=4,nodes=3", "topology 'nodes=2,gpus_per_node=4,nodes=3': 'nodes=3' is not like "),
    ],
)
def test_bad_forms_are_refused_quoting_them(text, message):
    with pytest.raises(BookError) as err:
        parse_layout(text)
    assert str(err.value).startswith(message)


def test_one_domain_on_both_sides_of_its_size():
    assert fabrics_for(NV, None, 8) == [Fabric("NVLink switch", "in one domain", "switch", *LINK, 8)]
    assert fabrics_for(NV, parse_layout("8"), 8) == [Fabric("NVLink switch", "in one domain", "switch", *LINK, 8)]
    # no domain size, or the host: one domain however large
    assert fabrics_for(Hardware("t", "tpu"), None, 64) == [Fabric("ICI", "in one domain", "torus", *LINK, 64)]
    host = Hardware("cpu", "cpu", interconnect="host", domain_size=8)
    assert fabrics_for(host, None, 16) == [Fabric("ICI", "in one domain", "host", *LINK, 16)]


def test_a_group_larger_than_a_domain_fills_domains_of_the_largest_common_size():
    # 12 GPUs, domains of 8: gcd 4, three nodes of 4, joined by the entry's named network
    assert fabrics_for(NV, None, 12) == [
        Fabric("NVLink switch", "inside each node", "switch", *LINK, 4),
        Fabric("IB", "across nodes", "switch", *OUT, 12),
    ]
    # 24 TPU chips, slices of 16: gcd 8, three slices of 8
    assert fabrics_for(TPU, None, 24) == [
        Fabric("ICI", "inside each slice", "torus", *LINK, 8),
        Fabric("scale-out network", "across slices", "switch", *OUT, 24),
    ]
    # cards in pairs: one node of all of them, over PCIe
    assert fabrics_for(PAIR, None, 8) == [
        Fabric("NVLink", "inside each NVLink pair", "switch", *LINK, 2),
        Fabric("PCIe", "inside each node", "switch", "node_bw_unidir_Bps", "hop_latency_s", 8),
    ]
    with pytest.raises(BookError) as err:
        fabrics_for(PCIE, None, 6)
    assert str(err.value) == (
        "topology '(assumed)': pcie's NVLink domain is 4 GPUs, smaller than a node of 6, and the entry gives "
        "no node_bw_unidir_Bps for the rest of the node; use gpus_per_node=4 or add it"
    )


def test_nodes_and_slices_as_written():
    assert fabrics_for(NV, parse_layout("nodes=1,gpus_per_node=8"), 8) == [
        Fabric("NVLink switch", "inside each node", "switch", *LINK, 8)
    ]
    assert fabrics_for(PCIE, parse_layout("nodes=2,gpus_per_node=8"), 16) == [
        Fabric("NVLink", "inside each NVLink domain", "switch", *LINK, 4),
        Fabric("PCIe", "inside each node", "switch", "node_bw_unidir_Bps", "hop_latency_s", 8),
        Fabric("scale-out network", "across nodes", "switch", *OUT, 16),
    ]
    got = fabrics_for(TPU, parse_layout("slices=2"), 32)
    assert got == [
        Fabric("ICI", "inside each slice", "torus", *LINK, 16),
        Fabric("scale-out network", "across slices", "switch", *OUT, 32),
    ]
    assert type(got[0].block) is int


@pytest.mark.parametrize(
    "hw, text, message",
    [
        (
            TPU,
            "nodes=2,gpus_per_node=4",
            "topology 'nodes=2,gpus_per_node=4' describes GPU nodes (an entry whose interconnect is a switch); "
            "tpu is torus: use slices=N[,slice=AxB]",
        ),
        (NV, "slices=2", "topology 'slices=2' describes TPU slices; nv is switch: use nodes=N,gpus_per_node=M"),
    ],
)
def test_a_form_for_the_other_kind_of_network_says_which_to_use(hw, text, message):
    with pytest.raises(BookError) as err:
        fabrics_for(hw, parse_layout(text), 8)
    assert str(err.value) == message


def test_a_node_larger_than_its_domain_needs_the_pcie_rate_and_a_domain_of_one_adds_no_nvlink():
    no_pcie = Hardware("np", "gpu", interconnect="switch", domain_size=4)
    with pytest.raises(BookError, match=r"^topology 'nodes=1,gpus_per_node=8': np's NVLink domain is 4 GPUs"):
        fabrics_for(no_pcie, parse_layout("nodes=1,gpus_per_node=8"), 8)
    cards = Hardware("cards", "gpu", interconnect="switch", domain_size=1, node_bw_unidir_Bps=3e10)
    assert fabrics_for(cards, parse_layout("nodes=1,gpus_per_node=4"), 4) == [
        Fabric("PCIe", "inside each node", "switch", "node_bw_unidir_Bps", "hop_latency_s", 4)
    ]


V3 = Hardware("v3", "tpu", interconnect="torus", wraparound="always")
V5P = Hardware("v5p", "tpu", interconnect="torus", wraparound="multiple_of_4")
LINES = Hardware("lines", "tpu", interconnect="torus")


@pytest.mark.parametrize(
    "hw, size, shape, reason",
    [
        (V3, 2, None, "v3 wraps around every axis"),
        (V5P, 4, None, "v5p wraps around only a slice of full 4x4x4 cubes (every dimension a multiple of 4); 4 is"),
        (
            V5P,
            4,
            [2, 2, 4],
            "v5p wraps around only a slice of full 4x4x4 cubes (every dimension a multiple of 4); 2x2x4 is not",
        ),
        (TPU, 8, None, "tpu wraps around only an axis of 16; this one is 8"),
        (LINES, 16, None, "lines has no wraparound"),
    ],
)
def test_each_wraparound_rule_says_why(hw, size, shape, reason):
    assert wraparound_reason(hw, size, shape) == reason


@pytest.mark.parametrize(
    "hw, sizes, topology, rings",
    [
        (TPU, [16, 8], None, [True, False]),  # only an axis of 16
        (V5P, [4, 2], None, [False, False]),  # the mesh stands in for the slice: 2 is no multiple of 4
        (V5P, [4, 4], None, [True, True]),
        (NV, [4, 2], None, [True, True]),  # a switch is all-to-all
        (TPU, [16, 2], "16x2", [True, False]),
        (V5P, [4, 16], "4x4x4", [True, True]),  # the second spans y and z, both whole
        (V5P, [4, 4], "2x2x4", [False, False]),
        # the part inside one slice decides: 16 (a ring) or 8 (a line); the outer 2 crosses slices
        (TPU, [2, 16], "slices=2", [True, True]),
        (TPU, [2, 8], "slices=2", [True, False]),
        (TPU, [2, 16], "slices=2,slice=4x4", [True, False]),  # 16 on a 4x4 slice: two axes of 4
        (NV, [2, 8], "nodes=2,gpus_per_node=8", [True, True]),
    ],
)
def test_which_axes_are_rings(hw, sizes, topology, rings):
    assert wraparound_for(hw, sizes, topology) == rings


def test_three_axes_and_three_levels_keep_their_strides():
    # devices 0..15 as a mesh (2, 2, 4) over blocks of 8 and 16: the outer axis crosses the
    # two blocks, the middle one stays inside (its stride is 4, not 2)
    assert split_axes([2, 2, 4], [8, 16]) == [(1, 2), (2, 1), (4, 1)]
    # 8 ids over blocks of 2, 4 and 8: two at each level
    assert group_extents(list(range(8)), [2, 4, 8]) == ([2, 2, 2], True)


def test_rings_of_a_switch_or_the_host_under_any_layout():
    host = Hardware("cpu", "cpu", interconnect="host", wraparound="never")
    assert wraparound_for(host, [8], None) == [True]  # fitted to the ring formula
    assert wraparound_for(host, [2, 4], "slices=2") == [True, True]
    # a switch is all-to-all even where its mesh axis would not split over the nodes
    assert wraparound_for(NV, [2, 6], "nodes=3,gpus_per_node=4") == [True, True]


def test_an_inner_part_of_two_is_a_line_and_a_topology_is_quoted_as_written():
    assert wraparound_for(TPU, [2, 2], "slices=2") == [True, False]
    with pytest.raises(BookError) as err:
        wraparound_for(TPU, [8], "4X4")
    assert str(err.value) == "topology '4X4' has 16 chips but the mesh has 8"
