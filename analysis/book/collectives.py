"""The collective kinds, once: every spelling, the HLO opcode, nccl-tests' bus bandwidth, and
the backward partner.

To add a collective, add a row to :data:`KINDS`, its cost to :mod:`analysis.book.fabric_cost`
(unless ``cost_as`` prices it as another), and its program to
``runner.worker.programs.collectives.PROGRAMS`` with a ``conf/op`` YAML (and its measured
working set to ``runner.config.memory.WORKING_SET``); everything else looks it up here:
V of an HLO instruction (:func:`V_from_hlo`), the bytes a device holds and moves
(:func:`local_bytes`, :func:`bus_bytes`), which ops take ``op.grad``, the result check's sums
and divisibility. ``tests/analysis/book/test_collectives.py`` checks every consumer against the rows.

nccl-tests conventions (``src/*.cu``, ``*GetBw``): ``algbw = S / t`` and
``busbw = algbw * factor(n)`` with n ranks in the group, where S is

* AllGather: the gathered array (``count * nranks * typesize``, count per rank);
* ReduceScatter: the per-rank input, i.e. the unreduced array (``count * nranks * typesize``);
* AllReduce: the per-rank array (``count * typesize``);
* AllToAll: the per-rank buffer (``count * nranks * typesize``, count per peer), i.e. the
  whole array across the group divided by n.

The book's V is the gathered array (AllGather), the unreduced per-device array
(ReduceScatter, AllReduce) and the whole array across the group (AllToAll), so S = V except
for AllToAll, where S = V / n: S is the larger of one device's input and output buffers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from analysis.book.errors import NotationError

SIDES = ("shard", "whole")  # what one device holds of V: V / n, or all of V
V_SIDES = ("result", "operand", "operand x group")  # which bytes of an HLO instruction are V


@dataclass(frozen=True)
class CollectiveKind:
    """One collective, every fact about it that is not a formula: its names, where V sits in
    an HLO instruction and in the notation, what one device holds before and after,
    nccl-tests' bus bandwidth, how it is priced, and its backward pass."""

    op: str  # shardlab's name (configs, tables): all_gather
    notation: str  # the book's name: AllGather
    hlo: str  # XLA's HLO opcode: all-gather
    V_meaning: str  # what the book's V is, in words
    # V of one HLO instruction (per-device shapes): its result, its operand, or its operand
    # times the group size; in the notation, the operand as written ("operand") or without
    # the collective's axes (the other two)
    V_side: str
    input: str  # what one device holds of V before: "shard" (V / n) or "whole" (V)
    output: str  # ... and after
    busbw_factor: Callable[[int], float]  # nccl-tests: busbw = algbw * factor(n)
    backward: str | None  # op of the backward pass (jax.grad's transpose), if it is a collective
    grad: bool = False  # op.grad=true is offered: the runner measures jax.grad through it
    sums: bool = False  # adds the devices' arrays (its input is unreduced; nccl-tests' redop sum)
    splits: int = 1  # V's elements split over the group this many times: a multiple of n**splits
    # priced as cost_times x the collective cost_as (cost_why says why); by default as itself
    cost_as: str = ""
    cost_times: int = 1
    cost_why: str = ""

    def __post_init__(self):
        for key, value, allowed in (
            ("V_side", self.V_side, V_SIDES),
            ("input", self.input, SIDES),
            ("output", self.output, SIDES),
        ):
            if value not in allowed:
                raise NotationError(f"{self.op}: {key}={value!r}; allowed: {', '.join(allowed)}")

    @property
    def S_side(self) -> str:
        """nccl-tests' S is the larger of one device's two buffers: ``whole`` unless both are shards."""
        return "whole" if "whole" in (self.input, self.output) else "shard"

    def S_over_V(self, n: int) -> float:
        """nccl-tests' S (the bytes algbw divides) over the book's V, for ``n`` devices."""
        return 1.0 if self.S_side == "whole" else 1.0 / n

    @property
    def priced_as(self) -> str:
        """The op whose formula prices this one (``cost_times`` times)."""
        return self.cost_as or self.op


KINDS: tuple[CollectiveKind, ...] = (
    CollectiveKind(
        op="all_gather",
        notation="AllGather",
        hlo="all-gather",
        V_meaning="the gathered array each device ends with",
        V_side="result",
        input="shard",
        output="whole",
        busbw_factor=lambda n: (n - 1) / n,
        backward="reduce_scatter",
        grad=True,
    ),
    CollectiveKind(
        op="reduce_scatter",
        notation="ReduceScatter",
        hlo="reduce-scatter",
        V_meaning="the unreduced array each device starts with",
        V_side="operand",
        input="whole",
        output="shard",
        busbw_factor=lambda n: (n - 1) / n,
        backward="all_gather",
        grad=True,
        sums=True,
    ),
    CollectiveKind(
        op="all_reduce",
        notation="AllReduce",
        hlo="all-reduce",
        V_meaning="the unreduced array each device holds",
        V_side="operand",
        input="whole",
        output="whole",
        busbw_factor=lambda n: 2 * (n - 1) / n,
        backward="all_reduce",
        sums=True,
        splits=0,
        cost_as="reduce_scatter",
        cost_times=2,
        cost_why="ReduceScatter + AllGather",
    ),
    CollectiveKind(
        op="all_to_all",
        notation="AllToAll",
        hlo="all-to-all",
        V_meaning="the array across the group, before the move",
        V_side="operand x group",
        input="shard",
        output="shard",
        busbw_factor=lambda n: (n - 1) / n,
        backward="all_to_all",
        splits=2,  # rows over the group before, and each row's columns after
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
    device), by its row's ``V_side``: the gathered result for all-gather, the unreduced operand
    for reduce-scatter and all-reduce, the whole array across the group (operand x group size)
    for all-to-all; NaN for a kind the model has no V for (or an all-to-all of unknown group)."""
    k = BY_HLO.get(hlo_kind)
    side = k.V_side if k else None
    if side == "result":
        return float(result_bytes)
    if side == "operand":
        return float(operand_bytes)
    if side == "operand x group" and group_size:
        return float(operand_bytes * group_size)
    return float("nan")


def per_device_bytes(side: str, V: int, n: int, times: int = 1) -> int:
    """``times`` x what one device holds of V on ``side`` (``shard``: V / n, ``whole``: V), in
    whole bytes (rounded down once)."""
    return times * V if side == "whole" else times * V // n


def local_bytes(op: str, V: int, n: int) -> tuple[int, int]:
    """The bytes one device holds of ``op``'s input and of its output, V over ``n`` devices."""
    k = kind(op)
    return per_device_bytes(k.input, V, n), per_device_bytes(k.output, V, n)


def bus_bytes(op: str, V: int, n: int) -> int:
    """The bytes one device moves in ``op`` (nccl-tests' bus bytes: S x the busbw factor), in
    whole bytes."""
    k = kind(op)
    # the factor's lambda of a Fraction is exact, so whole bytes round down only once
    return math.floor(per_device_bytes(k.S_side, V, n) * k.busbw_factor(Fraction(n)))
