"""Physical placement and wraparound pinned where a plausible-wrong version differs (issue 30):
a slice dimension of 1, an axis split between two mesh axes (their product, at most the whole
axis), a part of an axis, a chip's cores, groups of uneven extent, and uneven HLO groups."""

from __future__ import annotations

from analysis.book.placement import Placement, axis_wraps, from_positions, from_topology
from analysis.book.topology import group_extents


def test_wraparound_rules_with_dimensions_of_one():
    assert axis_wraps("multiple_of_4", (4, 4, 1), 4)  # a dimension of 1 is no axis
    assert not axis_wraps("multiple_of_4", (2, 2, 4), 4)
    assert axis_wraps("multiple_of_4", (4, 4, 8), 8)
    assert axis_wraps("only_16", (16, 16), 16) and not axis_wraps("only_16", (32,), 32)
    assert axis_wraps("always", (2,), 2) and not axis_wraps(None, (16,), 16)


def test_two_mesh_axes_that_split_one_physical_axis_span_their_product():
    # v6e-16, 4x4, as a mesh (8, 2): device i at (i // 4, i % 4)
    p = from_topology({"X": 8, "Y": 2}, [4, 4])
    assert p.axes == {"X": {"x": 4, "y": 2}, "Y": {"y": 2}}
    assert p.group(["X", "Y"]) == {"x": 4, "y": 4}
    assert p.describe(["X", "Y"]) == "x (4 of 4), y (4 of 4)"
    assert p.describe(["Y"]) == "y (2 of 4)"
    # only a whole axis of 16 wraps on v6e: neither 4 does
    assert p.links("only_16", ["X", "Y"]) == ([4, 4], [False, False])


def test_a_group_never_exceeds_the_whole_dimension():
    p = Placement((4, 2), {"A": {"x": 4}, "B": {"x": 2, "y": 2}})
    assert p.group(["A", "B"]) == {"x": 4, "y": 2}


def test_a_ring_is_a_whole_wrapped_chip_axis_and_cores_are_never_one():
    p = Placement((4, 4, 4), {"X": {"x": 4}, "Y": {"y": 2}, "C": {"core": 2}}, cores=2)
    assert p.links("multiple_of_4", ["X"]) == ([4], [True])
    assert p.links("multiple_of_4", ["Y"]) == ([2], [False])  # half of y: a line
    assert not p.ring("always", "core", 2)
    assert p.links("always", ["C"]) == ([], [])


def test_an_axis_extent_is_its_largest_group_not_its_last():
    # mesh X=2 (outer), Y=2: X's groups are devices {0, 2} and {1, 3}
    positions = [(0, 0), (2, 0), (1, 1), (2, 1)]
    p = from_positions(positions, {"X": 2, "Y": 2})
    assert p.axes["X"] == {"x": 2, "y": 2}  # {0, 2} spans 2 x 2; {1, 3} only y
    assert p.axes["Y"] == {"x": 2}
    assert p.shape == (3, 2, 1)


def test_uneven_hlo_groups_round_up_and_say_so():
    # ids 0, 1, 2 in blocks of 2 (nodes) of 4: 3 devices over 2 nodes -> 2 per node (rounded up), 2 nodes
    assert group_extents([0, 1, 2], [2, 4]) == ([2, 2], False)
    assert group_extents([0, 1, 2, 3], [2, 4]) == ([2, 2], True)
    assert group_extents([0, 2, 4, 6], [2, 8]) == ([1, 4], True)
