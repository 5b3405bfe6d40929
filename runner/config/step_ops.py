"""Checks for the ops that are whole programs rather than one collective: the built-in
``transformer_block`` and a user's ``program``. No JAX: they run before any device work.

``op=transformer_block``: ``op.sharding`` (fsdp, tp, fsdp_tp) over ``op.axes`` (one axis,
or [FSDP axis, TP axis] for fsdp_tp), ``op.dims`` B (batch), S (sequence), D (model), F (MLP
hidden), H (heads). See :mod:`runner.worker.programs.block`.

``op=program``: ``op.target`` names a function (``package.module:function`` or
``path/to/file.py:function``), ``op.inputs`` its positional arguments in the book's notation
(``x[B_X, D]``), ``op.dims`` their sizes. See :mod:`runner.worker.programs.user`.
"""

from __future__ import annotations

import math
import re

from analysis.book.errors import NotationError
from analysis.book.notation import Array, parse
from runner.errors import ConfigError

SHARDINGS = ("fsdp", "tp", "fsdp_tp")
BLOCK_DIMS = ("B", "S", "D", "F", "H")
_TARGET = re.compile(r"^(?P<module>[\w./-]+?(\.py)?):(?P<function>[A-Za-z_]\w*)$")


def block_op(op: dict, mesh_axes: dict[str, int]) -> dict:
    """The checked spec of a transformer block, or ConfigError naming the key."""
    sharding = op.get("sharding") or "fsdp"
    if sharding not in SHARDINGS:
        raise ConfigError(f"op.sharding={sharding!r}: allowed are {', '.join(SHARDINGS)}")
    want = 2 if sharding == "fsdp_tp" else 1
    names = list(mesh_axes)
    axes = list(op["axes"]) or {"fsdp": names[:1], "tp": names[-1:], "fsdp_tp": names[:2]}[sharding]
    if len(axes) != want or len(set(axes)) != want:
        example = "[X, Y] (FSDP over X, tensor parallel over Y)" if want == 2 else "[X]"
        raise ConfigError(f"op.axes={axes}: op.sharding={sharding} takes {want} distinct mesh axis(es), e.g. {example}")
    for a in axes:
        if a not in mesh_axes:
            raise ConfigError(f"op.axes: {a!r} is not an axis of the mesh ({', '.join(mesh_axes)})")
    dims = dict(op.get("dims") or {})
    missing = [d for d in BLOCK_DIMS if d not in dims]
    if missing:
        raise ConfigError(f"op.dims: no size for {', '.join(missing)}; a block needs {', '.join(BLOCK_DIMS)}")
    for d, v in dims.items():
        if d not in BLOCK_DIMS or not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ConfigError(f"op.dims.{d}={v!r}: a block's dims are {', '.join(BLOCK_DIMS)}, each a positive integer")
    if dims["D"] % dims["H"]:
        raise ConfigError(f"op.dims: D={dims['D']} is not a multiple of H={dims['H']} (each head has D/H dims)")
    return {"name": "transformer_block", "sharding": sharding, "axes": axes, "dims": dims}


def check_block_shapes(op: dict, mesh_axes: dict[str, int]) -> None:
    """Every sharded dim divides by its axis: B and D by the FSDP axis, H and F by the TP axis."""
    fsdp, tp = (op["axes"][0], None) if op["sharding"] == "fsdp" else (None, op["axes"][0])
    if op["sharding"] == "fsdp_tp":
        fsdp, tp = op["axes"]
    need = [(fsdp, ("B", "D")), (tp, ("H", "F"))]
    for axis, names in need:
        if axis is None:
            continue
        n = mesh_axes[axis]
        for d in names:
            if op["dims"][d] % n:
                raise ConfigError(
                    f"op.dims.{d}={op['dims'][d]} does not split over {axis} ({n} devices); "
                    f"{op['sharding']} shards {' and '.join(names)} over {axis}"
                )


def program_op(op: dict, mesh_axes: dict[str, int]) -> dict:
    """The checked spec of a user's program: its target and its inputs as arrays."""
    target = op.get("target")
    if not target or not _TARGET.match(str(target)):
        raise ConfigError(
            f"op.target={target!r}: name the function as package.module:function or path/to/file.py:function"
        )
    inputs = list(op.get("inputs") or [])
    if not inputs:
        raise ConfigError("op.inputs: missing; list the function's arguments in the book's notation, e.g. [x[B_X, D]]")
    dims = dict(op.get("dims") or {})
    arrays = []
    for text in inputs:
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
        arrays.append(str(arr))
    return {"name": "program", "target": str(target), "inputs": arrays, "dims": dims, "axes": _used_axes(arrays)}


def check_program_shapes(op: dict, mesh_axes: dict[str, int]) -> None:
    """Each sharded dim divides by the product of its axes."""
    for text in op["inputs"]:
        for d in parse(text).dims:
            n = math.prod(mesh_axes[a] for a in d.axes)
            if op["dims"][d.name] % n:
                raise ConfigError(f"op.dims.{d.name}={op['dims'][d.name]} does not split over {'x'.join(d.axes)} ({n})")


def _used_axes(arrays: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for text in arrays:
        for d in parse(text).dims:
            seen.update(dict.fromkeys(d.axes))
    return list(seen)
