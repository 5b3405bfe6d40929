"""Meshes as the hardware has them (runner.worker.meshes.build_mesh / device_array) and where their
axes lie on the physical axes (physical_placement), on fake TPU and GPU devices shaped like
JAX's own mesh tests (tests/mesh_utils_test.py: objects with id, coords, core_on_chip,
slice_index, device_kind, platform, process_index; hosts of 2x2 chips)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from jax.experimental import mesh_utils

from runner.errors import ConfigError
from runner.worker.ceiling import link_roofline
from runner.worker.meshes import build_mesh, device_array, physical_placement


@dataclasses.dataclass(frozen=True)
class FakeDevice:
    id: int
    platform: str
    device_kind: str
    process_index: int
    coords: tuple | None = None
    core_on_chip: int = 0
    slice_index: int = 0


def fake_tpus(x: int, y: int, z: int, kind: str, cores: int = 1, slices: int = 1) -> list[FakeDevice]:
    """A TPU slice (or several) as jax.devices() lists it: hosts of 2x2 chips, ids counting
    cores, then x and y inside a host, then hosts, then z, then slices (JAX's mock layout)."""
    nxd, nyd = min(2, x), min(2, y)
    nxp, nyp = x // nxd, y // nyd
    out = []
    for s in range(slices):
        for zz in range(z):
            for yp in range(nyp):
                for xp in range(nxp):
                    for yd in range(nyd):
                        for xd in range(nxd):
                            for c in range(cores):
                                proc = xp + nxp * (yp + nyp * (zz + z * s))
                                did = c + cores * (xd + nxd * (xp + nxp * (yd + nyd * (yp + nyp * (zz + z * s)))))
                                out.append(FakeDevice(did, "tpu", kind, proc, (xd + nxd * xp, yd + nyd * yp, zz), c, s))
    return out


def ids(arr) -> list:
    return np.vectorize(lambda d: d.id, otypes=[int])(arr).tolist()


def coords(arr) -> list:
    return [d.coords for d in np.asarray(arr).flat]


def is_cycle_of_neighbours(chips: list[tuple]) -> bool:
    """Each chip one link from the next, the last from the first (no wraparound needed)."""
    return all(sum(abs(a - b) for a, b in zip(p, q)) == 1 for p, q in zip(chips, chips[1:] + chips[:1]))


def test_v6e_16_as_8x2_which_make_mesh_refuses():
    devices = fake_tpus(4, 4, 1, "TPU v6 lite")
    with pytest.raises(NotImplementedError):  # what jax.make_mesh does for v6e (no axis splitting)
        mesh_utils.create_device_mesh((8, 2), devices)
    mesh = build_mesh({"X": 8, "Y": 2}, devices=devices)
    assert dict(mesh.shape) == {"X": 8, "Y": 2}
    # Y pairs two x-neighbours; X takes the rest: x in {0, 2} (or {1, 3}) times y 0..3
    assert ids(mesh.devices) == [[0, 1], [4, 5], [8, 9], [12, 13], [2, 3], [6, 7], [10, 11], [14, 15]]
    assert coords(mesh.devices[:, 0]) == [
        (0, 0, 0),
        (0, 1, 0),
        (0, 2, 0),
        (0, 3, 0),
        (2, 0, 0),
        (2, 1, 0),
        (2, 2, 0),
        (2, 3, 0),
    ]
    place = physical_placement(mesh)
    assert place["slice_shape"] == [4, 4, 1]
    assert place["axes"] == {"X": {"x": 2, "y": 4}, "Y": {"x": 2}}


def test_4x4x4_as_8x8_and_as_one_axis_of_64():
    devices = fake_tpus(4, 4, 4, "TPU v4")
    with pytest.raises(NotImplementedError):
        mesh_utils.create_device_mesh((8, 8), devices)
    mesh = build_mesh({"X": 8, "Y": 8}, devices=devices)
    assert ids(mesh.devices)[0] == [0, 4, 1, 5, 2, 6, 3, 7]
    assert coords(mesh.devices[0]) == [
        (0, 0, 0),
        (0, 1, 0),
        (1, 0, 0),
        (1, 1, 0),
        (2, 0, 0),
        (2, 1, 0),
        (3, 0, 0),
        (3, 1, 0),
    ]
    assert physical_placement(mesh)["axes"] == {"X": {"y": 2, "z": 4}, "Y": {"x": 4, "y": 2}}
    one = build_mesh({"X": 64}, devices=devices)
    assert physical_placement(one)["axes"] == {"X": {"x": 4, "y": 4, "z": 4}}
    # the ICI ceiling counts the three physical axes X spans, not one mesh axis
    hw = {"name": "tpu_v4p", "interconnect": "torus", "link_bw_bidir_Bps": 9e10}
    assert link_roofline(hw, 1, physical_placement(one), ["X"])["busbw_Bps"] == 3 * 9e10
    assert link_roofline(hw, 2, physical_placement(mesh), ["Y"])["busbw_Bps"] == 2 * 9e10
    assert link_roofline(hw, 1)["busbw_Bps"] == 9e10  # no placement (CPU, GPU): one per mesh axis


def test_2x2x4_puts_the_busiest_axis_on_the_xy_plane():
    mesh = build_mesh({"X": 2, "Y": 2, "Z": 4}, devices=fake_tpus(2, 2, 4, "TPU v5"))
    # JAX maps the last (busiest) axis onto two physical axes of 2 rather than z's line of 4
    assert ids(mesh.devices)[0] == [[0, 2, 1, 3], [4, 6, 5, 7]]
    assert coords(mesh.devices[0, 0]) == [(0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0)]
    assert physical_placement(mesh)["axes"] == {"X": {"z": 2}, "Y": {"z": 2}, "Z": {"x": 2, "y": 2}}


def fake_v5e(x: int, y: int) -> list[FakeDevice]:
    return fake_tpus(x, y, 1, "TPU v5 lite")


@pytest.mark.parametrize("x, y", [(4, 2), (4, 4)])
def test_v5e_one_axis_is_a_ring_of_neighbouring_chips(x, y):
    # v5e-8 ("2x4"): JAX's ring order assumes chips 4 wide in x and 2 in y
    mesh = build_mesh({"X": x * y}, devices=fake_v5e(x, y))
    chips = coords(mesh.devices)
    assert sorted(chips) == sorted(d.coords for d in fake_v5e(x, y))
    assert is_cycle_of_neighbours(chips)
    if (x, y) == (4, 2):
        assert chips == [(0, 0, 0), (1, 0, 0), (2, 0, 0), (3, 0, 0), (3, 1, 0), (2, 1, 0), (1, 1, 0), (0, 1, 0)]


@pytest.mark.parametrize("x, y, axes, want", [
    (8, 16, {"X": 8, "Y": 16}, {"X": {"x": 8}, "Y": {"y": 16}}),
    (16, 16, {"X": 16, "Y": 16}, {"X": {"y": 16}, "Y": {"x": 16}}),  # the busiest (last) axis takes x
    (16, 16, {"X": 2, "Y": 128}, {"X": {"y": 2}, "Y": {"x": 16, "y": 8}}),  # Y spans two axes, X splits y
])  # fmt: skip
def test_v5e_large_slices(x, y, axes, want):
    mesh = build_mesh(axes, devices=fake_v5e(x, y))
    assert physical_placement(mesh)["axes"] == want
    if axes == {"X": 8, "Y": 16}:  # every Y group is one whole column of the torus, in order
        for row in mesh.devices:
            assert [d.coords[1] for d in row] == list(range(16))
            assert len({d.coords[0] for d in row}) == 1


def test_tpu7x_puts_a_chips_two_cores_on_the_inner_axis():
    devices = fake_tpus(2, 2, 2, "TPU7x", cores=2)
    mesh = build_mesh({"X": 8, "Y": 2}, devices=devices)
    assert ids(mesh.devices) == [[0, 1], [2, 3], [6, 7], [4, 5], [8, 9], [10, 11], [14, 15], [12, 13]]
    for a, b in mesh.devices:  # each Y pair: the two cores of one chip
        assert a.coords == b.coords and {a.core_on_chip, b.core_on_chip} == {0, 1}
    ring = coords(mesh.devices[:4, 0])  # a ring of four chips in the z=0 plane, then z=1
    assert ring == [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0)] and is_cycle_of_neighbours(ring)
    assert physical_placement(mesh)["axes"] == {"X": {"x": 2, "y": 2, "z": 2}, "Y": {"core": 2}}
    assert physical_placement(mesh)["cores_per_chip"] == 2


def test_two_v5e_slices_cross_on_the_outer_part_of_one_axis():
    devices = fake_tpus(4, 2, 1, "TPU v5 lite", slices=2)
    mesh = build_mesh({"X": 2, "Y": 8}, devices=devices)
    for a, b in zip(mesh.devices[0], mesh.devices[1]):  # X: the same chip in the two slices
        assert a.coords == b.coords and (a.slice_index, b.slice_index) == (0, 1)
    assert is_cycle_of_neighbours(coords(mesh.devices[1]))  # Y: a ring inside each slice
    assert physical_placement(mesh)["axes"] == {"X": {"slice": 2}, "Y": {"x": 4, "y": 2}}
    # the axis named to cross them: its outer part crosses, the inner part stays in the slice
    both = build_mesh({"X": 2, "Y": 8}, cross_process_axis="Y", devices=devices)
    assert [d.slice_index for d in both.devices[0]] == [0] * 4 + [1] * 4
    # inside a slice JAX's v5e ring of 8 is folded into (2, 4): Y's inner 4 run along x, and
    # X pairs the two ends of the fold ((0,0) with (3,1)), two physical axes apart
    assert physical_placement(both)["axes"] == {"X": {"x": 2, "y": 2}, "Y": {"x": 4, "slice": 2}}


def test_a_shape_the_devices_cannot_form_is_one_config_error_line():
    uneven = fake_tpus(4, 2, 1, "TPU v5 lite") + [
        dataclasses.replace(d, id=d.id + 8, slice_index=1) for d in fake_v5e(2, 2)
    ]
    with pytest.raises(ConfigError) as err:
        build_mesh({"X": 2, "Y": 6}, devices=uneven, name="xy_2x6")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("mesh=xy_2x6 (X=2,Y=6) cannot be laid on the devices (12 TPU v5 lite devices: chips 4x2x1")
    assert "2 slices" in msg
    four = [FakeDevice(i, "tpu", "TPU v5 lite", i, (0, 0, 0), 0, i) for i in range(4)]  # 4 slices of one chip
    with pytest.raises(ConfigError, match=r"no mesh axis is a multiple of the 4 slices, so none can cross them$"):
        build_mesh({"X": 2, "Y": 2}, devices=four)
    with pytest.raises(ConfigError, match="distributed.cross_process_axis=X .size 1. is a multiple"):
        device_array({"X": 1, "Y": 16}, fake_tpus(4, 2, 1, "TPU v5 lite", slices=2), "X", "m")


def test_gpus_across_processes_use_process_granules():
    gpus = [FakeDevice(p * 4 + i, "gpu", "NVIDIA H100 80GB HBM3", p) for p in range(2) for i in range(4)]
    arr = device_array({"X": 2, "Y": 4}, gpus[::-1], "X")  # listed in any order
    assert ids(arr) == [[0, 1, 2, 3], [4, 5, 6, 7]]  # a row per process, GPUs by id inside it
    one_per_process = [FakeDevice(p, "gpu", "NVIDIA H100 80GB HBM3", p) for p in range(8)]
    arr = device_array({"X": 2, "Y": 4}, one_per_process, "X")  # X a divisor: blocks of processes
    assert ids(arr) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert physical_placement(build_mesh({"X": 8}, devices=gpus)) is None  # GPUs have no coordinates


def test_cpu_devices_keep_the_order_jax_make_mesh_gives():
    devices = jax.devices()
    assert len(devices) == 8
    for axes in ({"X": 8}, {"X": 4, "Y": 2}, {"X": 2, "Y": 2, "Z": 2}):
        want = jax.make_mesh(tuple(axes.values()), tuple(axes))
        got = build_mesh(axes)
        assert ids(got.devices) == ids(want.devices)
        assert got.axis_types == want.axis_types
    assert ids(build_mesh({"X": 4}).devices) == [0, 1, 2, 3]  # a smaller mesh: the first devices


def test_result_json_prediction_uses_the_recorded_placement():
    from runner.sweep.point import predict

    # tpu_v5p, V = 2^25 B over X=64 on a 4x4x4: three rings, max(6 us, V / (1.8e11 * 3)) = 62.14 us;
    # taken as one ring of 64 it would be max(32 us, V / 1.8e11) = 186.41 us
    mesh = build_mesh({"X": 64}, devices=fake_tpus(4, 4, 4, "TPU v5"))
    exp = {"op": "all_gather", "axes": ["X"], "V_bytes": 2**25, "mesh": {"axes": {"X": 64}}}
    result = {"spec": exp, "hardware": {"name": "tpu_v5p"}}
    assert predict(result)["time_s"] == pytest.approx(2**25 / 1.8e11)
    exp["mesh"]["physical"] = physical_placement(mesh)
    got = predict(result)
    assert got["time_s"] == pytest.approx(2**25 / (1.8e11 * 3)) and got["axis_sizes"] == (4, 4, 4)


def test_the_ici_ceiling_of_a_core_axis_is_the_on_chip_bandwidth():
    mesh = build_mesh({"X": 8, "Y": 2}, devices=fake_tpus(2, 2, 2, "TPU7x", cores=2))
    hw = {"name": "tpu_v7x", "interconnect": "torus", "link_bw_bidir_Bps": 9e10, "core_bw_unidir_Bps": 1.85e12}
    place = physical_placement(mesh)
    assert link_roofline(hw, 1, place, ["Y"])["busbw_Bps"] == 2 * 1.85e12  # no ICI link between the cores
    assert link_roofline(hw, 1, place, ["X"])["busbw_Bps"] == 3 * 9e10  # x, y and z
    assert link_roofline(hw, 2, place, ["X", "Y"])["busbw_Bps"] == 3 * 9e10 + 2 * 1.85e12


def test_the_record_says_which_axis_parts_wrap_around():
    # v5e 16x16 as (16, 16): both axes whole, both of 16: rings; v5p 2x2x4: no full cube, lines
    square = physical_placement(build_mesh({"X": 16, "Y": 16}, devices=fake_v5e(16, 16)), "only_16")
    assert square["wraparound"] == {"X": {"y": True}, "Y": {"x": True}}
    cube = physical_placement(
        build_mesh({"X": 2, "Y": 2, "Z": 4}, devices=fake_tpus(2, 2, 4, "TPU v5")), "multiple_of_4"
    )
    assert cube["wraparound"] == {"X": {"z": False}, "Y": {"z": False}, "Z": {"x": False, "y": False}}
    full = physical_placement(build_mesh({"X": 64}, devices=fake_tpus(4, 4, 4, "TPU v5")), "multiple_of_4")
    assert full["wraparound"] == {"X": {"x": True, "y": True, "z": True}}


def test_cpu_processes_keep_process_granules():
    # distributed=local: 2 processes x 4 CPU devices, as jax.devices() lists them
    cpus = [FakeDevice(p * 4 + i, "cpu", "cpu", p) for p in range(2) for i in range(4)]
    assert ids(device_array({"X": 2, "Y": 4}, cpus, "X")) == [[0, 1, 2, 3], [4, 5, 6, 7]]  # X across
    assert ids(device_array({"X": 4, "Y": 2}, cpus, "Y")) == [[0, 4], [1, 5], [2, 6], [3, 7]]  # Y across
    assert ids(device_array({"X": 4, "Y": 2}, cpus)) == [[0, 1], [2, 3], [4, 5], [6, 7]]  # no axis named


def test_a_group_over_two_folded_axes_spans_at_most_the_slice():
    # JAX folds v5e's ring of 8 into (2, 4): X touches x twice and both rows, Y four columns;
    # together they are the whole 4x2 slice, not 8 along x
    from analysis.book.placement import Placement

    place = Placement.from_dict(physical_placement(build_mesh({"X": 2, "Y": 4}, devices=fake_v5e(4, 2))))
    assert place.axes == {"X": {"x": 2, "y": 2}, "Y": {"x": 4}}
    assert place.group(["X", "Y"]) == {"x": 4, "y": 2}


def test_a_matmuls_prediction_uses_the_recorded_placement_too():
    from runner.sweep.point import predict

    # A[I, J_X] * B[J_X, K] -> C[I, K] on X=64: AllReduce of C (4096 x 4096 bf16, V = 2^25 B):
    # one ring of 64: 2 * V / 1.8e11 = 372.83 us; on the 4x4x4's three rings: 2 * V / (1.8e11 * 3)
    exp = {"op": "matmul", "expr": "A[I, J_X] * B[J_X, K] -> C[I, K]", "axes": ["X"], "dtype": "bfloat16"}
    exp.update(dims={"I": 4096, "J": 8192, "K": 4096}, mesh={"axes": {"X": 64}})
    result = {"spec": exp, "hardware": {"name": "tpu_v5p"}}
    assert predict(result)["T_comms_s"] == pytest.approx(2 * 2**25 / 1.8e11)
    exp["mesh"]["physical"] = physical_placement(build_mesh({"X": 64}, devices=fake_tpus(4, 4, 4, "TPU v5")))
    assert predict(result)["T_comms_s"] == pytest.approx(2 * 2**25 / (1.8e11 * 3))
