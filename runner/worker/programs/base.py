"""What every measured program is: a jitted function, its input, and the answer it must give."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import jax
import numpy as np


@dataclass
class Program:
    expr: str  # the collective in the book's notation
    fn: Callable  # jitted: input array -> output array
    make_input: Callable[[], jax.Array]
    reference: Callable[[], np.ndarray]  # what fn(make_input()) must equal
    V_bytes: int | None  # the bytes the book's formula uses (None for a matmul)
    extra: dict = field(default_factory=dict)  # op-specific facts for result.json's spec
    # relative tolerance of the check; None: exact for float32 and integers (small-integer
    # inputs), 1e-2 for 16-bit floats
    tolerance: float | None = None


def small_ints(n: int, dtype, period: int = 7) -> np.ndarray:
    """``n`` values 0..period-1 repeated, as ``dtype`` (small integers keep every sum exact)."""
    return cyclic(0, n, period, dtype)


def cyclic(start: int, stop: int, period: int, dtype, scale: int = 1, offset: int = 0) -> np.ndarray:
    """``j % period * scale + offset`` for ``j`` in ``range(start, stop)``, as ``dtype``: one
    period computed, then tiled (one pass over the memory; index arithmetic over a 64 MiB
    shard made four, 0.4 s on this machine, and np.resize took 0.32 s where np.tile takes 13 ms)."""
    n = max(stop - start, 0)
    first = start % period
    one = (np.arange(period, dtype=np.int64) * scale + offset).astype(dtype)
    return np.tile(one, -(-(first + n) // period))[first : first + n]


class LazyArray:
    """An array defined element by element, materialised one slice at a time: each process
    fills only its own devices' shards (and checks only those), so no process holds the
    whole global array, which on a large mesh may not fit one host.

    ``fn(flat)`` gives the values at the row-major flat indices ``flat`` (int64). ``runs(start,
    stop)``, where given, gives the same values for the flat range ``start..stop`` without an
    index array: a shard is one such range (whole rows), and building a 64 MiB AllReduce's
    eight blocks from index arithmetic took 3.2 s a point, more than its timing.
    """

    def __init__(self, shape: tuple[int, ...], dtype, fn, runs=None):
        self.shape, self.dtype, self.fn, self.runs = tuple(shape), np.dtype(dtype), fn, runs

    def __getitem__(self, index) -> np.ndarray:
        index = index if isinstance(index, tuple) else (index,)
        index = index + (slice(None),) * (len(self.shape) - len(index))
        bounds = [i.indices(n) for i, n in zip(index, self.shape)]
        flat = _flat_range(bounds, self.shape) if self.runs is not None else None
        if flat is not None:
            out = self.runs(*flat).reshape([len(range(*b)) for b in bounds])
            return out.astype(self.dtype, copy=False)
        ranges = [np.arange(*b, dtype=np.int64) for b in bounds]
        flat = np.ravel_multi_index(np.ix_(*ranges), self.shape) if len(ranges) > 1 else ranges[0]
        return np.asarray(self.fn(flat)).astype(self.dtype, copy=False)

    def __array__(self, dtype=None, copy=None):
        out = self[tuple(slice(None) for _ in self.shape)]
        return out.astype(dtype) if dtype is not None else out


def _flat_range(bounds: list[tuple[int, int, int]], shape: tuple[int, ...]) -> tuple[int, int] | None:
    """The row-major flat ``(start, stop)`` a non-empty slice covers where it is one contiguous
    range: unit steps, every axis after the last partial one whole, every axis before it a
    single index. Else None."""
    extents = [stop - start for start, stop, _ in bounds]
    if any(step != 1 for _, _, step in bounds) or any(e <= 0 for e in extents):
        return None
    last = max((d for d, (e, n) in enumerate(zip(extents, shape)) if e != n), default=0)
    if any(e != 1 for e in extents[:last]):
        return None
    start = int(np.ravel_multi_index([b[0] for b in bounds], shape))
    return start, start + int(np.prod(extents))
