"""The network levels a group spans, whole (issue 30's mutation check): every ``--topology``
form parsed to its exact Layout and on both sides of each bound, and ``fabrics_for``'s every
branch as its full list of Fabric rows (name, where, interconnect, the W and T_min keys, block),
on made-up entries whose domain sizes make a plausible-wrong rule differ."""

from __future__ import annotations

import pytest

from analysis.book.errors import BookError
from analysis.book.hardware import Hardware
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
