"""Placement read exactly (issue 30's mutation check): the record result.json keeps and its
defaults, a slice of fewer than three axes, a mesh of one device, devices that do not start at
the origin, and every group of an axis counted (its later groups, and those that start inside
a stride)."""

from __future__ import annotations

import pytest

from analysis.book.errors import NotationError
from analysis.book.placement import Placement, from_positions, from_topology, spread


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
