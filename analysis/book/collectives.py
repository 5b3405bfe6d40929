"""The collective kinds, once: every spelling, the HLO opcode, nccl-tests' bus bandwidth, and
the backward partner.

To add a collective, add a row to :data:`KINDS` (and its cost to
:mod:`analysis.book.collective_cost`); everything else looks it up here.

nccl-tests conventions (``src/*.cu``, ``*GetBw``): ``algbw = S / t`` and
``busbw = algbw * factor(n)`` with n ranks in the group, where S is

* AllGather: the gathered array (``count * nranks * typesize``, count per rank);
* ReduceScatter: the per-rank input, i.e. the unreduced array (``count * nranks * typesize``);
* AllReduce: the per-rank array (``count * typesize``);
* AllToAll: the per-rank buffer (``count * nranks * typesize``, count per peer), i.e. the
  whole array across the group divided by n.

The book's V is the gathered array (AllGather), the unreduced per-device array
(ReduceScatter, AllReduce) and the whole array across the group (AllToAll), so S = V except
for AllToAll, where S = V / n.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from analysis.book.errors import NotationError


@dataclass(frozen=True)
class CollectiveKind:
    """One collective: its names, HLO opcode, bus-bandwidth convention and backward pass."""

    op: str  # shardlab's name (configs, tables): all_gather
    notation: str  # the book's name: AllGather
    hlo: str  # XLA's HLO opcode: all-gather
    busbw_factor: Callable[[int], float]  # nccl-tests: busbw = algbw * factor(n)
    S_over_V: Callable[[int], float]  # nccl-tests' S (the bytes algbw divides) over the book's V
    V_meaning: str  # what the book's V is, in words
    backward: str | None  # op of the backward pass (jax.grad's transpose), if it is a collective


KINDS: tuple[CollectiveKind, ...] = (
    CollectiveKind(
        "all_gather",
        "AllGather",
        "all-gather",
        lambda n: (n - 1) / n,
        lambda n: 1.0,
        "the gathered array each device ends with",
        "reduce_scatter",
    ),
    CollectiveKind(
        "reduce_scatter",
        "ReduceScatter",
        "reduce-scatter",
        lambda n: (n - 1) / n,
        lambda n: 1.0,
        "the unreduced array each device starts with",
        "all_gather",
    ),
    CollectiveKind(
        "all_reduce",
        "AllReduce",
        "all-reduce",
        lambda n: 2 * (n - 1) / n,
        lambda n: 1.0,
        "the unreduced array each device holds",
        "all_reduce",
    ),
    CollectiveKind(
        "all_to_all",
        "AllToAll",
        "all-to-all",
        lambda n: (n - 1) / n,
        lambda n: 1.0 / n,
        "the array across the group, before the move",
        "all_to_all",
    ),
)
BY_OP = {k.op: k for k in KINDS}
OPS = tuple(BY_OP)  # all_gather, reduce_scatter, all_reduce, all_to_all
BY_HLO = {k.hlo: k for k in KINDS}
BY_NOTATION = {k.notation: k for k in KINDS}

# Every HLO opcode that moves data between devices (the model prices the first four).
HLO_OPCODES = (
    "all-gather",
    "reduce-scatter",
    "all-reduce",
    "all-to-all",
    "collective-permute",
    "collective-broadcast",
    "ragged-all-to-all",
)


def kind(name: str) -> CollectiveKind:
    """The kind for any spelling: ``AllGather``, ``all-gather``, ``all_gather``, ``allgather``."""
    key = str(name).replace("_", "").replace("-", "").lower()
    for k in KINDS:
        if k.op.replace("_", "") == key:
            return k
    raise NotationError(f"unknown collective {name!r} (one of {', '.join(OPS)})")


def normalize_kind(name: str) -> str:
    """``"AllGather"``, ``"all-gather"``, ``"all_gather"`` -> ``"all_gather"``."""
    return kind(name).op


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor for ``op`` over ``n`` devices."""
    return kind(op).busbw_factor(n)


def nccl_S_bytes(op: str, V_bytes: float, n: int) -> float:
    """The bytes nccl-tests divides by the time for ``op``, from the book's V."""
    return V_bytes * kind(op).S_over_V(n)


def V_from_hlo(hlo_kind: str, operand_bytes: float, result_bytes: float, group_size: int | None) -> float:
    """The book's V of one HLO collective instruction, from its operand and result bytes (per
    device): the gathered result for all-gather, the unreduced operand for reduce-scatter and
    all-reduce, the whole array across the group (operand x group size) for all-to-all; NaN
    for a kind the model has no V for (or an all-to-all of unknown group)."""
    if hlo_kind == "all-gather":
        return float(result_bytes)
    if hlo_kind in ("reduce-scatter", "all-reduce"):
        return float(operand_bytes)
    if hlo_kind == "all-to-all" and group_size:
        return float(operand_bytes * group_size)
    return float("nan")
