"""A point's op, typed per kind: what each kind checks, holds in memory and is timed by.

``spec["op"]`` (:func:`runner.config.spec.build_spec`) is one of four frozen dataclasses: a
:class:`CollectiveOp` (any row of :data:`analysis.book.collectives.KINDS`), a :class:`MatmulOp`,
a :class:`BlockOp` (a transformer block's training step) or a :class:`ProgramOp` (a user's
function). Each carries its config's values, checked, and answers what the runner asks of a
kind: ``from_config`` (the checks before JAX starts), ``check_shapes`` (on a resolved mesh),
``estimate`` (its memory, counted by :mod:`runner.config.memory`), ``timed_collective`` (which
collective's instructions time it) and ``size_setting`` (the key a too-large point should
shrink). A new kind is a class here and its row in :data:`KINDS`, and its program's builder
in :data:`runner.worker.programs.BUILDERS` (which imports JAX, so it cannot stand here).

The spec reaches the worker pickled, these objects with it; no file holds them. ``to_json``
gives the plain dict the op was before it was typed (the point cache keys an op by it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from typing import ClassVar

from analysis.book.collectives import BY_OP
from analysis.book.dtypes import itemsize
from analysis.book.errors import NotationError
from analysis.book.notation import Array, parse
from analysis.book.units import format_size
from runner.config import memory
from runner.config.matmul_plan import check_dims, parse_matmul, plan, used_axes
from runner.config.spec_values import check_size
from runner.errors import ConfigError

# The largest integer each dtype holds exactly: sums of the small-integer inputs must stay
# below it, or the NumPy check compares wrapped (int) or rounded (float) sums.
EXACT_INT = {"int8": 127, "int32": 2**31 - 1, "float16": 2048, "bfloat16": 256, "float32": 2**24}
SHARDINGS = ("fsdp", "tp", "fsdp_tp")
BLOCK_DIMS = ("B", "S", "D", "F", "H")
_TARGET = re.compile(r"^(?P<module>[\w./-]+?(\.py)?):(?P<function>[A-Za-z_]\w*)$")


class _Op:
    """What every kind shares: its plain form."""

    def to_json(self) -> dict:
        """The op as the plain dict it was before it was typed: ``name`` first, then its fields
        in order, lists where it holds tuples."""
        plain = {f.name: getattr(self, f.name) for f in fields(self)}
        return {"name": self.name} | {k: list(v) if isinstance(v, tuple) else v for k, v in plain.items()}


class _Whole(_Op):
    """A program timed whole (a matmul, a block's step, a user's function): no V of its own,
    no one collective to time it by."""

    size_bytes: ClassVar[None] = None
    collective: ClassVar[None] = None

    def timed_collective(self, group: int) -> None:
        """None: the whole step is timed, whatever collectives it runs."""
        return None

    @property
    def size_setting(self) -> str:
        """The setting a too-large point should shrink: its dims."""
        return f"op.dims={self.dims}"


@dataclass(frozen=True)
class CollectiveOp(_Op):
    """One collective of the book's table over ``axes``, V = ``size_bytes``; with ``grad``,
    ``jax.grad`` through it (its backward pass)."""

    name: str
    axes: tuple[str, ...]
    size_bytes: int
    grad: bool = False

    @property
    def collective(self) -> str:
        """The row of :data:`analysis.book.collectives.BY_OP` it runs."""
        return self.name

    @property
    def size_setting(self) -> str:
        """The setting a too-large point should shrink: V."""
        return f"op.size_bytes={format_size(self.size_bytes)}"

    @classmethod
    def from_config(cls, op: dict, axes: dict[str, int], mesh_name: str, dtype: str) -> CollectiveOp:
        """The checked op of ``op=<collective>``, or ConfigError naming the key."""
        if op.get("expr") is not None or op.get("dims"):
            raise ConfigError(f"op.expr / op.dims are for op=matmul; op={op['name']} takes op.axes and op.size_bytes")
        if op.get("size_bytes") is None:
            raise ConfigError(f"op.size_bytes: missing; {op['name']} needs V, e.g. op.size_bytes=16MiB")
        op_axes = list(op["axes"])
        if not op_axes:
            raise ConfigError("op.axes=[]: name at least one mesh axis to run the collective over")
        for a in op_axes:
            if a not in axes:
                raise ConfigError(f"op.axes: {a!r} is not an axis of mesh {mesh_name!r} (axes: {', '.join(axes)})")
        if len(set(op_axes)) != len(op_axes):
            raise ConfigError(f"op.axes={op_axes}: a mesh axis may appear only once")
        size_bytes = check_size(op["size_bytes"], "op.size_bytes")
        if size_bytes % itemsize(dtype):
            raise ConfigError(
                f"op.size_bytes={op['size_bytes']!r}: V={size_bytes} B is not a whole number of "
                f"{dtype} elements ({itemsize(dtype)} B each)"
            )
        if op.get("grad") and not BY_OP[op["name"]].grad:
            allowed = " and ".join(name for name, k in BY_OP.items() if k.grad)
            raise ConfigError(f"op.grad=true: allowed only for {allowed}, not {op['name']}")
        return cls(op["name"], tuple(op_axes), size_bytes, bool(op.get("grad")))

    def check_shapes(self, mesh_axes: dict[str, int], dtype: str, check_result: bool) -> None:
        """V must split evenly over the group (twice over for AllToAll), and a checked sum fit
        the dtype."""
        p = math.prod(mesh_axes[a] for a in self.axes)
        size = itemsize(dtype)
        elems = self.size_bytes // size
        row = BY_OP[self.name]
        if row.sums and check_result:
            sum_inputs(dtype, p)  # raises when the dtype cannot hold the checked sums
        need = p**row.splits  # AllToAll: p rows, each split p ways again; AllReduce: not split
        if elems % need:
            raise ConfigError(
                f"op.size_bytes={self.size_bytes}: {elems} {dtype} elements do not split over "
                f"{'x'.join(self.axes)} ({p} devices); {self.name} needs a multiple of {need} "
                f"elements, i.e. of {need * size} bytes"
            )

    def estimate(self, mesh_axes: dict[str, int], dtype: str, loop: bool, checked: bool) -> dict[str, int]:
        """Its memory (:func:`runner.config.memory.collective_bytes`)."""
        return memory.collective_bytes(self, mesh_axes, loop, checked)

    def timed_collective(self, group: int) -> str | None:
        """The collective whose instructions time the point; None where the step is timed whole:
        a backward pass, or a group of 1 (XLA runs a copy)."""
        return None if self.grad or group < 2 else self.name


@dataclass(frozen=True)
class MatmulOp(_Whole):
    """A sharded matmul in the book's notation, run by ``strategy``
    (:mod:`runner.config.matmul_plan`); ``axes``: the mesh axes its expression names."""

    expr: str
    dims: dict[str, int]
    strategy: str
    axes: tuple[str, ...]
    name: ClassVar[str] = "matmul"

    @classmethod
    def from_config(cls, op: dict, axes: dict[str, int], mesh_name: str, dtype: str) -> MatmulOp:
        """The checked op of ``op=matmul``: its expression parses, the strategy fits it, its dims
        are given."""
        if op.get("expr") is None:
            raise ConfigError("op.expr: missing; op=matmul needs one, e.g. 'A[I, J_X] * B[J_X, K] -> C[I, K]'")
        mm = parse_matmul(op["expr"])
        plan(mm, op["strategy"], {n: max(s, 1) for n, s in axes.items()})  # strategy fits the expression
        dims = check_dims(mm, dict(op.get("dims") or {}), None)
        return cls(op["expr"], dims, op["strategy"], tuple(used_axes(mm)))

    def check_shapes(self, mesh_axes: dict[str, int], dtype: str, check_result: bool) -> None:
        """Each dim splits over its shards."""
        check_dims(parse_matmul(self.expr), self.dims, mesh_axes)

    def estimate(self, mesh_axes: dict[str, int], dtype: str, loop: bool, checked: bool) -> dict[str, int]:
        """Its memory (:func:`runner.config.memory.matmul_bytes`)."""
        return memory.matmul_bytes(self, mesh_axes, itemsize(dtype))


@dataclass(frozen=True)
class BlockOp(_Whole):
    """A transformer block's training step (:mod:`runner.worker.programs.block`): ``sharding``
    fsdp, tp or fsdp_tp over ``axes`` (one axis, or [FSDP axis, TP axis] for fsdp_tp), ``dims``
    B (batch), S (sequence), D (model), F (MLP hidden), H (heads)."""

    sharding: str
    axes: tuple[str, ...]
    dims: dict[str, int]
    name: ClassVar[str] = "transformer_block"

    @classmethod
    def from_config(cls, op: dict, axes: dict[str, int], mesh_name: str, dtype: str) -> BlockOp:
        """The checked op of ``op=transformer_block``, or ConfigError naming the key."""
        sharding = op.get("sharding") or "fsdp"
        if sharding not in SHARDINGS:
            raise ConfigError(f"op.sharding={sharding!r}: allowed are {', '.join(SHARDINGS)}")
        want = 2 if sharding == "fsdp_tp" else 1
        names = list(axes)
        op_axes = list(op["axes"]) or {"fsdp": names[:1], "tp": names[-1:], "fsdp_tp": names[:2]}[sharding]
        if len(op_axes) != want or len(set(op_axes)) != want:
            example = "[X, Y] (FSDP over X, tensor parallel over Y)" if want == 2 else "[X]"
            raise ConfigError(
                f"op.axes={op_axes}: op.sharding={sharding} takes {want} distinct mesh axis(es), e.g. {example}"
            )
        for a in op_axes:
            if a not in axes:
                raise ConfigError(f"op.axes: {a!r} is not an axis of the mesh ({', '.join(axes)})")
        dims = dict(op.get("dims") or {})
        missing = [d for d in BLOCK_DIMS if d not in dims]
        if missing:
            raise ConfigError(f"op.dims: no size for {', '.join(missing)}; a block needs {', '.join(BLOCK_DIMS)}")
        for d, v in dims.items():
            if d not in BLOCK_DIMS or not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(
                    f"op.dims.{d}={v!r}: a block's dims are {', '.join(BLOCK_DIMS)}, each a positive integer"
                )
        if dims["D"] % dims["H"]:
            raise ConfigError(f"op.dims: D={dims['D']} is not a multiple of H={dims['H']} (each head has D/H dims)")
        return cls(sharding, tuple(op_axes), dims)

    def check_shapes(self, mesh_axes: dict[str, int], dtype: str, check_result: bool) -> None:
        """Every sharded dim divides by its axis: B and D by the FSDP axis, H and F by the TP axis."""
        fsdp, tp = (self.axes[0], None) if self.sharding == "fsdp" else (None, self.axes[0])
        if self.sharding == "fsdp_tp":
            fsdp, tp = self.axes
        for axis, names in [(fsdp, ("B", "D")), (tp, ("H", "F"))]:
            if axis is None:
                continue
            n = mesh_axes[axis]
            for d in names:
                if self.dims[d] % n:
                    raise ConfigError(
                        f"op.dims.{d}={self.dims[d]} does not split over {axis} ({n} devices); "
                        f"{self.sharding} shards {' and '.join(names)} over {axis}"
                    )

    def estimate(self, mesh_axes: dict[str, int], dtype: str, loop: bool, checked: bool) -> dict[str, int]:
        """Its memory (:func:`runner.config.memory.block_bytes`)."""
        return memory.block_bytes(self, mesh_axes, itemsize(dtype))


@dataclass(frozen=True)
class ProgramOp(_Whole):
    """A user's function (:mod:`runner.worker.programs.user`): ``target`` names it
    (``package.module:function`` or ``path/to/file.py:function``), ``inputs`` its positional
    arguments in the book's notation (``x[B_X, D]``), ``dims`` their sizes; ``axes``: the mesh
    axes they are sharded over."""

    target: str
    inputs: tuple[str, ...]
    dims: dict[str, int]
    axes: tuple[str, ...]
    name: ClassVar[str] = "program"

    @classmethod
    def from_config(cls, op: dict, axes: dict[str, int], mesh_name: str, dtype: str) -> ProgramOp:
        """The checked op of ``op=program``: its target and its inputs as arrays."""
        target = op.get("target")
        if not target or not _TARGET.match(str(target)):
            raise ConfigError(
                f"op.target={target!r}: name the function as package.module:function or path/to/file.py:function"
            )
        inputs = list(op.get("inputs") or [])
        if not inputs:
            raise ConfigError(
                "op.inputs: missing; list the function's arguments in the book's notation, e.g. [x[B_X, D]]"
            )
        dims = dict(op.get("dims") or {})
        arrays = tuple(str(_input_array(text, dims, axes)) for text in inputs)
        used = dict.fromkeys(a for text in arrays for d in parse(text).dims for a in d.axes)
        return cls(str(target), arrays, dims, tuple(used))

    def check_shapes(self, mesh_axes: dict[str, int], dtype: str, check_result: bool) -> None:
        """Each sharded dim divides by the product of its axes."""
        for text in self.inputs:
            for d in parse(text).dims:
                n, size = math.prod(mesh_axes[a] for a in d.axes), self.dims[d.name]
                if size % n:
                    raise ConfigError(f"op.dims.{d.name}={size} does not split over {'x'.join(d.axes)} ({n})")

    def estimate(self, mesh_axes: dict[str, int], dtype: str, loop: bool, checked: bool) -> dict[str, int]:
        """Its memory (:func:`runner.config.memory.program_bytes`)."""
        return memory.program_bytes(self, mesh_axes, itemsize(dtype))


def _input_array(text, dims: dict, mesh_axes: dict[str, int]) -> Array:
    """One of ``op.inputs``, parsed: one array whose dims have sizes and whose axes are the mesh's."""
    try:
        arr = parse(str(text))
    except NotationError as exc:
        raise ConfigError(f"op.inputs: {text!r} is not an array in the book's notation ({exc})") from None
    if not isinstance(arr, Array):
        raise ConfigError(f"op.inputs: {text!r} is not one array, e.g. x[B_X, D]")
    for d in arr.dims:
        if d.name not in dims:
            raise ConfigError(f"op.dims: no size for {d.name} (used by {text})")
        for a in d.axes:
            if a not in mesh_axes:
                raise ConfigError(f"op.inputs: {text}: {a!r} is not an axis of the mesh ({', '.join(mesh_axes)})")
    return arr


Op = CollectiveOp | MatmulOp | BlockOp | ProgramOp
# The kinds that are whole programs, by op.name; every other name is a collective of the book's table.
KINDS: dict[str, type[Op]] = {k.name: k for k in (MatmulOp, BlockOp, ProgramOp)}


def kind(name: str) -> type[Op]:
    """The class of ``op.name`` (a name :func:`runner.config.spec.build_spec` has checked)."""
    return KINDS.get(name, CollectiveOp)


def sum_inputs(dtype: str, group: int) -> tuple[int, bool]:
    """``(period, offset)`` of the small-integer inputs of a ReduceScatter or AllReduce over
    ``group`` devices: device k holds ``base + k`` (``offset``) with ``base`` cycling through
    ``0..period-1``, the largest choice whose sums ``dtype`` holds exactly. ConfigError when
    not even 0s and 1s fit."""
    limit = EXACT_INT[dtype]
    for period, offset in ((7, True), (7, False), (2, False)):
        if group * (period - 1) + (group * (group - 1) // 2 if offset else 0) <= limit:
            return period, offset
    raise ConfigError(
        f"dtype={dtype}: a sum over {group} devices can exceed {limit}, the largest integer "
        f"{dtype} holds exactly, so the result cannot be checked; use int32 or float32, a smaller "
        "group, or check_result=false"
    )
