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
    """``n`` values 0..period-1 repeated, as ``dtype``."""
    # Small integers keep every sum exact. np.tile then a slice: 25x faster than np.resize at
    # 64 MiB (13 ms vs 0.32 s), which every large sweep point paid.
    return np.tile(np.arange(period, dtype=dtype), -(-n // period))[:n]


class LazyArray:
    """An array defined element by element, materialised one slice at a time: each process
    fills only its own devices' shards (and checks only those), so no process holds the
    whole global array, which on a large mesh may not fit one host.

    ``fn(flat)`` gives the values at the row-major flat indices ``flat`` (int64).
    """

    def __init__(self, shape: tuple[int, ...], dtype, fn):
        self.shape, self.dtype, self.fn = tuple(shape), np.dtype(dtype), fn

    def __getitem__(self, index) -> np.ndarray:
        index = index if isinstance(index, tuple) else (index,)
        index = index + (slice(None),) * (len(self.shape) - len(index))
        ranges = [np.arange(*i.indices(n), dtype=np.int64) for i, n in zip(index, self.shape)]
        flat = np.ravel_multi_index(np.ix_(*ranges), self.shape) if len(ranges) > 1 else ranges[0]
        return np.asarray(self.fn(flat)).astype(self.dtype, copy=False)

    def __array__(self, dtype=None, copy=None):
        out = self[tuple(slice(None) for _ in self.shape)]
        return out.astype(dtype) if dtype is not None else out
