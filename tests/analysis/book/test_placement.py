"""Physical placement and wraparound pinned where a plausible-wrong version differs (issue 30):
a slice dimension of 1, an axis split between two mesh axes (their product, at most the whole
axis), a part of an axis, a chip's cores, groups of uneven extent, and uneven HLO groups.

Placement read exactly (issue 30's mutation check): the record result.json keeps and its
defaults, a slice of fewer than three axes, a mesh of one device, devices that do not start at
the origin, and every group of an axis counted (its later groups, and those that start inside
a stride).
"""

from __future__ import annotations

import pytest

from analysis.book.errors import NotationError
from analysis.book.placement import Placement, axis_wraps, from_positions, from_topology, spread
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


def test_the_record_round_trips_and_fills_its_defaults():
    p = Placement((4, 2), {"X": {"x": 4, "core": 2}}, cores=2, slices=3, source="s")
    assert p.to_dict() == {
        "slice_shape": [4, 2],
        "cores_per_chip": 2,
        "slices": 3,
        "axes": {"X": {"x": 4, "core": 2}},
        "source": "s",
    }
    assert Placement.from_dict(p.to_dict()) == p
    bare = Placement.from_dict({"slice_shape": ["4"], "axes": {"X": {"x": "4"}}})
    assert bare == Placement((4,), {"X": {"x": 4}}, 1, 1, "")


def test_a_missing_chip_axis_has_size_one_and_an_empty_group_is_one_device():
    p = Placement((4, 2), {"X": {"x": 4}, "Y": {}})
    assert [p.size(d) for d in ("x", "y", "z", "core", "slice")] == [4, 2, 1, 1, 1]
    assert p.describe(["Y"]) == "one device"


def test_one_device_and_a_slice_that_does_not_start_at_the_origin():
    one = from_positions([(3, 1, 0)], {"X": 1})
    assert (one.shape, one.axes, one.cores, one.slices, one.source) == ((1, 1, 1), {"X": {}}, 1, 1, "devices")
    # four devices at x 2..3, y 5..6 (part of a larger slice): a 2x2x1 shape
    part = from_positions([(2, 5, 0), (3, 5, 0), (2, 6, 0), (3, 6, 0)], {"X": 2, "Y": 2}, source="jax")
    assert (part.shape, part.axes, part.source) == ((2, 2, 1), {"X": {"y": 2}, "Y": {"x": 2}}, "jax")
    assert spread([]) == {}


def test_every_group_of_an_axis_counts_the_later_ones_and_those_inside_a_stride():
    # mesh A=2 (outer), B=2: A's groups are devices {0, 2} and {1, 3} (the second starts
    # inside A's stride of 2), B's {0, 1} and {2, 3} (the second starts at 2); each second
    # group spreads further than the first
    positions = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 1)]
    p = from_positions(positions, {"A": 2, "B": 2})
    assert p.axes == {"A": {"y": 2, "z": 2}, "B": {"x": 2, "z": 2}}
    assert p.shape == (2, 2, 2)


def test_a_spread_of_two_counts_and_a_topology_names_itself():
    assert spread([(0, 0), (1, 0)]) == {"x": 2}
    p = from_topology({"X": 4, "Y": 4}, [4, 4])
    assert p.source == "--topology 4x4: mesh axes take its axes in order"
    assert from_topology({"X": 16}, [4, 4], "4X4").source == "--topology 4X4: mesh axes take its axes in order"
    with pytest.raises(NotationError) as err:
        from_topology({"X": 8}, [4, 4])
    assert str(err.value) == "topology '4x4' has 16 chips but the mesh has 8"
    with pytest.raises(NotationError) as err:
        from_topology({"X": 16}, [2, 2, 2, 2])
    assert str(err.value) == "topology '2x2x2x2' has more than three axes (x, y, z)"
