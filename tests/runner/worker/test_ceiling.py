"""The bus-bandwidth ceiling (:mod:`runner.worker.ceiling`) worked out by hand: the book's link
roofline for a switch, a torus without and with the recorded placement (chip axes, a chip's two
cores, a slice axis), and the CPU copy's size clamp, trip count, median, retries and buffers on
a fake clock (issue 30: the ceiling was scored by the mutation check)."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from runner.worker import ceiling
from runner.worker.ceiling import device_copy, link_roofline

ICI = "bidirectional ICI link bandwidth"


def test_a_switch_is_one_gpus_nvlink_egress():
    hw = {"name": "h100", "interconnect": "switch", "link_bw_unidir_Bps": 450, "link_bw_bidir_Bps": 900}
    got = link_roofline(hw, 3)
    assert got == {"kind": "link", "busbw_Bps": 450.0, "what": "h100 per-GPU NVLink egress (book constant)"}
    assert type(got["busbw_Bps"]) is float
    # a switch without its egress constant falls back to the torus formula; a torus ignores egress
    assert link_roofline(dict(hw, link_bw_unidir_Bps=None), 2)["busbw_Bps"] == 1800.0
    assert link_roofline(dict(hw, interconnect="torus"), 2)["busbw_Bps"] == 1800.0


@pytest.mark.parametrize(
    "hw", [{"name": "cpu"}, {"name": "x", "link_bw_bidir_Bps": 0}, {"name": "x", "link_bw_bidir_Bps": None}]
)
def test_no_link_constant_is_no_ceiling(hw):
    assert link_roofline(hw, 2) is None
    assert link_roofline(dict(hw, interconnect="switch", link_bw_unidir_Bps=0), 2) is None


@pytest.mark.parametrize("n_axes, links", [(0, 1), (1, 1), (3, 3)])
def test_without_a_placement_each_mesh_axis_is_one_link(n_axes, links):
    hw = {"name": "tpu_v4", "interconnect": "torus", "link_bw_bidir_Bps": 90}
    want = {
        "kind": "link",
        "busbw_Bps": 90.0 * links,
        "physical_axes": links,
        "what": f"tpu_v4 {ICI} x {links} mesh axis/axes (book)",
    }
    assert link_roofline(hw, n_axes) == want
    assert type(link_roofline(hw, n_axes)["busbw_Bps"]) is float
    # a placement without the op's axes, or no axes, is no placement
    physical = {"slice_shape": [4, 4, 4], "axes": {"X": {"x": 4, "y": 4, "z": 4}}}
    assert link_roofline(hw, n_axes, physical, []) == want
    assert link_roofline(hw, n_axes, {}, ["X"]) == want
    assert link_roofline(hw, n_axes, physical, None) == want


# a 4x2x4 slice of two-core chips over two slices: X spans x and z, Y the cores, Z y,
# S the slices, W the cores and x (two mesh axes that split x span their product, 4 at most)
PHYSICAL = {
    "slice_shape": [4, 2, 4],
    "cores_per_chip": 2,
    "slices": 2,
    "axes": {"X": {"x": 2, "z": 4}, "Y": {"core": 2}, "Z": {"y": 2}, "S": {"slice": 2}, "W": {"core": 2, "x": 4}},
}
HW = {"name": "tpu_v7x", "interconnect": "torus", "link_bw_bidir_Bps": 100, "core_bw_unidir_Bps": 1000}


@pytest.mark.parametrize(
    "axes, busbw, links, what",
    [
        (["X"], 200.0, 2, f"{ICI} x 2 physical axis/axes (x, z)"),
        (["X", "Z"], 300.0, 3, f"{ICI} x 3 physical axis/axes (x, y, z)"),
        (["Y"], 2000.0, 0, "2 x the on-chip W between a chip's two cores"),
        (["Y", "Z"], 2100.0, 1, f"{ICI} x 1 physical axis/axes (y) + 2 x the on-chip W between a chip's two cores"),
        (["W", "X"], 2200.0, 2, f"{ICI} x 2 physical axis/axes (x, z) + 2 x the on-chip W between a chip's two cores"),
        (["S"], 100.0, 1, f"{ICI} x 1 physical axis/axes ()"),  # only the slice axis: one link counted
    ],
)
def test_with_a_placement_the_group_counts_its_chip_axes_and_a_chips_cores(axes, busbw, links, what):
    got = link_roofline(HW, 9, PHYSICAL, axes)
    assert got == {
        "kind": "link",
        "busbw_Bps": busbw,
        "physical_axes": links,
        "what": f"tpu_v7x {what} (book constants)",
    }
    assert type(got["busbw_Bps"]) is float


def test_a_core_axis_without_an_on_chip_constant_counts_one_link():
    hw = {k: v for k, v in HW.items() if k != "core_bw_unidir_Bps"}
    assert link_roofline(hw, 1, PHYSICAL, ["Y"]) == {
        "kind": "link",
        "busbw_Bps": 100.0,
        "physical_axes": 1,
        "what": f"tpu_v7x {ICI} x 1 physical axis/axes () (book constants)",
    }
    assert link_roofline(dict(hw, core_bw_unidir_Bps=None), 1, PHYSICAL, ["Y", "X"])["busbw_Bps"] == 200.0


def _clock(*per_repeat):
    """A clock that reads t(2K) then t(K) for each repeat: ``per_repeat`` pairs, then (3, 1) s."""
    ticks = [t for pair in per_repeat for t in (0.0, pair[0], 0.0, pair[1])]
    it = itertools.chain(ticks, itertools.cycle([0.0, 3.0, 0.0, 1.0]))
    return lambda: next(it)


@pytest.fixture
def mesh():
    yield jax.make_mesh((2, 4), ("X", "Y"))
    ceiling.release()


def test_the_copy_clamps_its_size_to_whole_floats_and_takes_the_median_of_its_repeats(mesh):
    asked = []
    # 10003 B -> 10000 B a device; K = 32 MiB // (2 x 10000) = 1677; per iteration (t(2K) - t(K)) / K
    got = device_copy(
        mesh, 10003, repeats=3, clock=_clock((4, 1), (9, 1), (2, 1)), agree=lambda ok: asked.append(ok) or ok
    )
    assert asked == [True]
    assert got == {
        "kind": "device_copy",
        "busbw_Bps": 10000 / (3 / 1677),  # the median of 3, 8 and 1 s over K
        "bytes_per_device": 10000,
        "devices": 8,
        "iterations": 1677,
        "what": "each of the 8 devices reading and writing 10000 B at once (x+1 in an XLA loop), median of 3",
    }


def test_a_small_size_is_raised_to_4_kib_and_its_trip_count_capped_at_4096(mesh):
    got = device_copy(mesh, 5, repeats=2, clock=_clock((5, 1), (3, 1)), agree=bool)
    assert (got["bytes_per_device"], got["iterations"]) == (4096, 4096)
    assert got["busbw_Bps"] == 4096 / (3 / 4096)  # the median of two is their mean
    assert got["what"].endswith("4096 B at once (x+1 in an XLA loop), median of 2")


def test_a_large_size_takes_two_iterations_at_least():
    # 16 MiB a device: 32 MiB // 32 MiB = 1 -> 2 iterations
    mesh = jax.make_mesh((2,), ("X",), devices=jax.devices()[:2])
    try:
        got = device_copy(mesh, 16 << 20, repeats=1, clock=_clock((5, 1)), agree=bool)
    finally:
        ceiling.release()
    assert (got["bytes_per_device"], got["devices"], got["iterations"]) == (16 << 20, 2, 2)
    assert got["busbw_Bps"] == (16 << 20) / 2.0


def test_three_stalls_give_no_ceiling_after_doubling_twice(mesh):
    asked = []
    stall = (1, 1)  # t(2K) = t(K): no time per iteration
    got = device_copy(
        mesh, 1 << 20, repeats=1, clock=_clock(stall, stall, stall), agree=lambda ok: asked.append(ok) or ok
    )
    assert asked == [False, False, False]
    # 1 MiB: K = 16, doubled after each of the three tries
    assert (got["busbw_Bps"], got["iterations"]) == (None, 128)


def test_a_stall_then_a_time_keeps_the_doubled_count(mesh):
    got = device_copy(mesh, 1 << 20, repeats=1, clock=_clock((1, 2), (3, 1)), agree=bool)
    assert (got["busbw_Bps"], got["iterations"]) == ((1 << 20) / (2 / 32), 32)


def test_the_buffers_are_kept_only_when_asked_and_released(mesh):
    device_copy(mesh, 8192, repeats=1, clock=_clock((3, 1)), agree=bool)
    device_copy(mesh, 4096, repeats=1, clock=_clock((3, 1)), agree=bool)
    assert sorted(k for k in ceiling._programs if k != "fn") == [(id(mesh), 4096)]  # one size at a time
    device_copy(mesh, 8192, repeats=1, clock=_clock((3, 1)), agree=bool, keep=True)
    assert sorted(k for k in ceiling._programs if k != "fn") == [(id(mesh), 4096), (id(mesh), 8192)]
    assert "fn" in ceiling._programs
    ceiling.release()
    assert ceiling._programs == {}


# What the copy moves: the timed buffer is split over every device of the mesh, float32 on each,
# so all devices read and write their own share at once (a buffer on one device, replicated on
# all, or of float64 would time another traffic than the one it reports).
def test_each_device_holds_its_own_share_of_float32(mesh):
    # 10003 B -> 10000 B a device: 2500 float32 on each of the 8 devices, 80000 B in all
    got = device_copy(mesh, 10003, repeats=1, clock=_clock(), agree=bool)
    assert (got["bytes_per_device"], got["devices"]) == (10000, 8)
    _, x = ceiling._programs[(id(mesh), 10000)]
    assert (x.shape, x.dtype) == ((20000,), np.float32)
    assert x.sharding.is_equivalent_to(NamedSharding(mesh, P(("X", "Y"))), 1)
    shards = x.addressable_shards
    assert sorted(s.device.id for s in shards) == sorted(d.id for d in mesh.devices.flat)
    assert {s.data.shape for s in shards} == {(2500,)}
    assert sorted(s.index[0].start for s in shards) == list(range(0, 20000, 2500))  # disjoint shares


def test_a_mesh_of_two_devices_splits_the_buffer_in_two():
    mesh = jax.make_mesh((2,), ("X",), devices=jax.devices()[:2])
    try:
        device_copy(mesh, 4096, repeats=1, clock=_clock(), agree=bool)
        _, x = ceiling._programs[(id(mesh), 4096)]
        assert [s.data.shape for s in x.addressable_shards] == [(1024,), (1024,)]
        assert {s.device.id for s in x.addressable_shards} == {d.id for d in jax.devices()[:2]}
    finally:
        ceiling.release()


class _Loop:
    """Stands in for the compiled loop: records the trip count of each call."""

    def __init__(self):
        self.trips = []

    def __call__(self, x, k):
        self.trips.append(int(k))
        return self

    def block_until_ready(self):
        return self


def test_each_repeat_times_2k_then_k_iterations_on_a_clock_that_does_not_start_at_0(mesh):
    # 1 MiB a device: K = 32 MiB // 2 MiB = 16; the clock reads 100 -> 104 around 2K and
    # 104 -> 106 around K: (4 - 2) s / 16 a iteration, 1 MiB / 0.125 s = 8 MiB/s
    loop = _Loop()
    ceiling._programs[(id(mesh), 1 << 20)] = (loop, None)  # as a first call leaves it: compiled
    reads = iter([100.0, 104.0, 104.0, 106.0, 106.0, 111.0, 111.0, 113.0])
    got = device_copy(mesh, 1 << 20, repeats=2, clock=lambda: next(reads), agree=bool)
    assert loop.trips == [32, 16, 32, 16]
    # per iteration: 2/16 and 3/16 s, their median 2.5/16 s
    assert (got["busbw_Bps"], got["iterations"]) == ((1 << 20) / (2.5 / 16), 16)
