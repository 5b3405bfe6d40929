"""What the CPU ceiling's copy (:func:`runner.worker.ceiling.device_copy`) moves: the buffer it
times is split over every device of the mesh, ``bytes_per_device`` of float32 on each, so that
all devices read and write their own share at once (a buffer on one device, replicated on all,
or of float64 would time another traffic than the one it reports). The clock is the tests' own,
as in ``tests/test_ceiling_exact.py``; the buffer is the one the copy keeps for its next call.
"""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from runner.worker import ceiling
from runner.worker.ceiling import device_copy


def _clock():
    """t(2K) - t(K) = 2 s for every repeat."""
    it = itertools.cycle([0.0, 3.0, 0.0, 1.0])
    return lambda: next(it)


@pytest.fixture
def mesh():
    yield jax.make_mesh((2, 4), ("X", "Y"))
    ceiling.release()


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
