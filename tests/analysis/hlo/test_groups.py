"""Tests for analysis.hlo.groups: replica groups in their three spellings (explicit, iota,
mesh axes) and the mesh axes a list of groups spans."""

from __future__ import annotations

import numpy as np
import pytest
from hlo_samples import X_GROUPS, Y_GROUPS, MESH_4x2, one_op, only

from analysis.hlo import HloParseError, expand_iota_groups, group_mesh_axes, parse_collectives

# ----------------------------------------------------------------------------- mesh axes


@pytest.mark.parametrize(
    "spec, expected",
    [
        # 4x2 mesh, group over axis 'b' of mesh[a=4,b=2] in iota order: the Y groups.
        ("mesh['a'=4,'b'=2] {'b'}", Y_GROUPS),
        ("mesh[a=4,b=2] {a}", X_GROUPS),
        ("mesh[a=4,b=2] {a,b}", ((0, 1, 2, 3, 4, 5, 6, 7),)),
        # 2x2x2 mesh X,Y,Z; ids 4x+2y+z; grouping X and Z fixes y: {0,1,4,5}, {2,3,6,7}.
        (
            "mesh['axis_0'=1,'axis_1'=4,'axis_2'=2], device_ids=([2,2,2]T(0,2,1)) {'axis_1'}",
            ((0, 1, 4, 5), (2, 3, 6, 7)),
        ),
        # sub-axis a:(1)2 of a=8 is the major half: reshape [1,2,4], vary the 2: {0,4},{1,5},...
        ("mesh[a=8] {a:(1)2}", ((0, 4), (1, 5), (2, 6), (3, 7))),
        ("mesh[a=8] {a:(2)2}", ((0, 2), (1, 3), (4, 6), (5, 7))),
        ("mesh[a=8] {a:(1)2,a:(4)2}", ((0, 1, 4, 5), (2, 3, 6, 7))),
        # explicit device order [[0,4,1,5],[2,6,3,7]]: columns are the groups over a.
        ("mesh[a=2,b=4], device_ids=(0,4,1,5,2,6,3,7) {a}", ((0, 2), (4, 6), (1, 3), (5, 7))),
        # [2,4]T(1,0) = iota(8).reshape(2,4).T = [0,4,1,5,2,6,3,7]: the same mesh as above.
        ("mesh[a=2,b=4], device_ids=([2,4]T(1,0)) {a}", ((0, 2), (4, 6), (1, 3), (5, 7))),
    ],
)
def test_mesh_axes_replica_groups(spec, expected):
    assert only(one_op("all-reduce", f"replica_groups={spec}, to_apply=add")).replica_groups == expected


@pytest.mark.parametrize(
    "bad",
    [
        "replica_groups={{0,1},{2,x}}",  # not an int
        "replica_groups={0,1}",  # not a list of lists
        "replica_groups=[2,3]<=[8]",  # 6 != 8
        "replica_groups=mesh[a=2] {b}",  # axis not in the mesh
        "replica_groups=mesh[a=0] {a}",  # empty mesh
        "replica_groups=mesh[a=8] {a:(3)2}",  # sub-axis does not divide the axis
        "replica_groups=hello",
    ],
)
def test_malformed_groups_raise(bad):
    with pytest.raises(HloParseError):
        parse_collectives(one_op("all-reduce", f"{bad}, to_apply=add"))


# ----------------------------------------------------------------------------- groups


@pytest.mark.parametrize(
    "spec, reference",
    [
        ("[2,4]<=[8]", np.arange(8).reshape(2, 4)),
        ("[2,2]<=[2,2]T(1,0)", np.arange(4).reshape(2, 2).T),
        ("[3,10]<=[6,5]T(1,0)", np.arange(30).reshape(6, 5).T.reshape(3, 10)),
        ("[4,2]<=[2,2,2]T(2,0,1)", np.arange(8).reshape(2, 2, 2).transpose(2, 0, 1).reshape(4, 2)),
        ("[1,8]<=[8]", np.arange(8).reshape(1, 8)),
    ],
)
def test_expand_iota_groups_matches_numpy(spec, reference):
    assert expand_iota_groups(spec) == tuple(tuple(int(d) for d in row) for row in reference)


@pytest.mark.parametrize(
    "bad",
    ["[2,4]<=[7]", "[8]<=[8]", "[2,2]<=[2,2]T(0,0)", "[2,2]<=[4]T(1,0)", "{{0,1}}", "", "[99999,99999]<=[99999,99999]"],
)
def test_expand_iota_groups_rejects(bad):
    with pytest.raises(HloParseError):
        expand_iota_groups(bad)


def test_group_mesh_axes_on_4x2():
    names = ("X", "Y")
    assert group_mesh_axes(X_GROUPS, MESH_4x2, names) == ("X",)
    assert group_mesh_axes(Y_GROUPS, MESH_4x2, names) == ("Y",)
    assert group_mesh_axes(None, MESH_4x2, names) == ("X", "Y")
    assert group_mesh_axes([list(range(8))], MESH_4x2.tolist(), names) == ("X", "Y")
    assert group_mesh_axes([[d] for d in range(8)], MESH_4x2, names) == ()
    with pytest.raises(HloParseError):  # {0,1,2,3} = x in {0,1} and all y: not whole axes
        group_mesh_axes(((0, 1, 2, 3), (4, 5, 6, 7)), MESH_4x2, names)
    with pytest.raises(HloParseError):  # leaves devices out
        group_mesh_axes(((0, 2, 4, 6),), MESH_4x2, names)
    with pytest.raises(HloParseError):  # mixed spans
        group_mesh_axes(((0, 1), (2, 4), (3, 5), (6, 7)), MESH_4x2, names)
    with pytest.raises(HloParseError):
        group_mesh_axes(X_GROUPS, MESH_4x2, ("X",))
    with pytest.raises(HloParseError):
        group_mesh_axes(((0, 9),), MESH_4x2, names)


def test_group_mesh_axes_uses_logical_positions():
    # HLO groups name logical ids (positions in the mesh), not physical device ids: with the
    # mesh's devices permuted, X groups are still {0,2,4,6},{1,3,5,7} in the HLO.
    physical = np.array([0, 2, 4, 6, 1, 3, 5, 7]).reshape(4, 2)
    logical = np.arange(physical.size).reshape(physical.shape)
    assert group_mesh_axes(X_GROUPS, logical, ("X", "Y")) == ("X",)
    with pytest.raises(HloParseError):
        group_mesh_axes(X_GROUPS, physical, ("X", "Y"))
    # 2x2x2: groups fixing y span X and Z.
    assert group_mesh_axes(((0, 1, 4, 5), (2, 3, 6, 7)), np.arange(8).reshape(2, 2, 2), "XYZ") == ("X", "Z")
