"""What every measured program is: a jitted function, its input, and the answer it must give."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import jax
import numpy as np


@dataclass
class Program:
    expr: str  # the collective in the book's notation
    fn: Callable  # jitted: input array -> output array
    make_input: Callable[[], jax.Array]
    reference: Callable[[], np.ndarray]  # what fn(make_input()) must equal
    V_bytes: int | None  # the bytes the book's formula uses (None for a matmul)
    extra: dict = field(default_factory=dict)  # op-specific facts for result.json's experiment


def small_ints(n: int, dtype, period: int = 7) -> np.ndarray:
    """``n`` values 0..period-1 repeated, as ``dtype``."""
    # Small integers keep every sum exact. np.tile then a slice: 25x faster than np.resize at
    # 64 MiB (13 ms vs 0.32 s), which every large sweep point paid.
    return np.tile(np.arange(period, dtype=dtype), -(-n // period))[:n]
