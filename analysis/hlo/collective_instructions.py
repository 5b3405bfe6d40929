"""Collectives in XLA HLO text, as :class:`Collective` records.

Reads the text of one or more HLO modules, as printed by
``jax.jit(f).lower(x).compile().as_text()`` or dumped by XLA (``--xla_dump_to``) from any
backend, and lists every collective instruction with its bytes, groups and metadata.

The work is split by purpose: :mod:`.scan` finds modules, computations and
instructions in the text; :mod:`.shapes` sizes shapes; :mod:`.groups`
expands replica groups; this module turns the scanned instructions into :class:`Collective`
records. Only stdlib and numpy; pandas is imported lazily by :func:`collectives_frame`.

Decisions worth knowing:

* ``replica_groups={}`` or no attribute means one group of all devices: ``replica_groups`` is
  None, ``num_groups`` is 1, and ``group_size`` is ``num_devices`` when given, else the module
  header's ``replica_count * num_partitions`` when the header states either, else None.
* collective-permute has pairs, not groups: ``replica_groups`` and ``group_size`` are None and
  ``num_groups`` is the number of pairs. :func:`permute_groups` turns the pairs into the
  connected sets of devices they link, which :func:`group_mesh_axes` accepts.
* An async collective is counted once, at its start: ``X-start``/``X-done`` pairs and
  ``async-start(...), calls=%c`` wrapping a collective in ``c`` (the wrapped instruction is not
  listed again). Its result is the matching done's shape when the done is in the text.
* Every textual occurrence counts once: a collective in a while body is one entry.
* Text outside computations (module header, ``FileNames``/``StackFrames`` sections, logs) is
  skipped; instruction lines found outside any computation are kept, in computation ``""``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

import numpy as np

from analysis.hlo.groups import parse_groups
from analysis.hlo.lex import HloParseError, parse_int, parse_ints, split_top
from analysis.hlo.scan import KINDS, Instr, Module, scan, truncation
from analysis.hlo.shapes import ARRAY_RE, leaves, leaves_bytes, shape_end, tuple_elements

__all__ = ["Collective", "parse_collectives", "collectives_frame"]

_OP_NAME_RE = re.compile(r'op_name="((?:[^"\\\n]++|\\.)*+)"')  # possessive: see analysis.hlo.lex


@dataclass(frozen=True)
class Collective:
    """One collective instruction of an HLO module (see the module docstring for conventions)."""

    name: str
    kind: str
    computation: str
    is_async: bool
    dtype: str
    operand_bytes: int
    result_bytes: int
    replica_groups: tuple[tuple[int, ...], ...] | None
    group_size: int | None
    num_groups: int | None
    source_target_pairs: tuple[tuple[int, int], ...] | None
    dimensions: tuple[int, ...] | None
    channel_id: int | None
    op_name: str | None


# ---------------------------------------------------------------- collectives


def _attrs(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    key = None
    for part in split_top(text):
        # Mesh-axes replica groups print a top-level comma: `mesh[...], device_ids=(...) {a}`.
        if part.startswith("device_ids=") and key is not None and out[key].startswith("mesh["):
            out[key] += ", " + part
            continue
        k, eq, value = part.partition("=")
        if eq:
            key = k.strip()
            out.setdefault(key, value.strip())
    return out


def _operand_shape(op: str, ins: Instr, mod: Module) -> str:
    op = op.strip()
    if op.startswith("(") or ARRAY_RE.match(op):  # older printers put the shape inline
        return op[: shape_end(op, 0)]
    name = op.lstrip("%")
    for shape in (
        mod.defs.get((ins.comp, name)),
        mod.params.get(ins.comp, {}).get(name),
        mod.global_defs.get(name),
    ):
        if shape:
            return shape
    raise HloParseError(f"cannot find the shape of operand {op!r} of {ins.name}")


def _operand_name(op: str) -> str:
    return op.split()[-1].lstrip("%") if op.split() else ""


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), s)


def _collective(
    ins: Instr,
    mod: Module,
    *,
    name: str,
    comp: str,
    is_async: bool,
    result_shape: str | None,
    fallback_op_name: str | None,
    num_devices: int | None,
) -> Collective:
    kind = ins.opcode.removesuffix("-start")
    attrs = _attrs(ins.attrs)
    if result_shape is None:
        raise HloParseError(f"{ins.name} has no result shape")
    result_leaves = leaves(result_shape)
    operands = split_top(ins.operands)
    operand_bytes = sum(leaves_bytes(leaves(_operand_shape(op, ins, mod))) for op in operands)

    groups = pairs = None
    group_size = num_groups = None
    if kind == "collective-permute":
        pairs = parse_groups(attrs.get("source_target_pairs", "{}"), "source_target_pairs")
        if any(len(p) != 2 for p in pairs):
            raise HloParseError(f"source_target_pairs of {ins.name} are not pairs")
        num_groups = len(pairs)
    else:
        groups = parse_groups(attrs.get("replica_groups", "{}"), "replica_groups") or None
        if groups is None:
            # One group of every device, however many there are: the count is 1 even where
            # only the size is unknown (PyTorch/XLA SPMD headers state no device count).
            n = num_devices if num_devices is not None else mod.num_devices
            group_size, num_groups = n, 1
        else:
            sizes = {len(g) for g in groups}
            group_size = sizes.pop() if len(sizes) == 1 else None  # XLA allows ragged all-reduce groups
            num_groups = len(groups)

    meta = _OP_NAME_RE.search(attrs.get("metadata", ""))
    return Collective(
        name=name,
        kind=kind,
        computation=comp,
        is_async=is_async,
        dtype=result_leaves[0][0] if result_leaves else "",
        operand_bytes=operand_bytes,
        result_bytes=leaves_bytes(result_leaves),
        replica_groups=groups,
        group_size=group_size,
        num_groups=num_groups,
        source_target_pairs=pairs,
        dimensions=parse_ints(attrs["dimensions"].strip("{} "), "dimensions") if "dimensions" in attrs else None,
        channel_id=parse_int(attrs["channel_id"], "channel_id") if "channel_id" in attrs else None,
        op_name=_unescape(meta.group(1)) if meta else fallback_op_name,
    )


def _start_result(start: Instr, done: Instr | None) -> str | None:
    """Logical result of an ``X-start``: the done's shape, else read off the start's tuple."""
    if done is not None and done.shape:
        return done.shape
    if start.shape is None:
        return None
    if start.opcode == "all-reduce-start":  # its shape is the result itself
        return start.shape
    parts = tuple_elements(start.shape)  # (operands, result[, context...])
    return parts[1] if len(parts) >= 2 else start.shape


def _module_collectives(mod: Module, num_devices: int | None) -> list[Collective]:
    done_of: dict[str, Instr] = {}
    by_comp: dict[str, list[Instr]] = {}
    for ins in mod.instrs:
        if ins.opcode.endswith("-done"):
            ops = split_top(ins.operands)
            if ops:
                done_of.setdefault(_operand_name(ops[0]), ins)
        elif ins.opcode in KINDS:
            by_comp.setdefault(ins.comp, []).append(ins)

    # async-start(...), calls=%c: the collective inside c is reported once, as the start.
    wrapped: dict[str, Instr] = {}
    for ins in mod.instrs:
        if ins.opcode == "async-start":
            called = _attrs(ins.attrs).get("calls", "").lstrip("%")
            inner = by_comp.get(called)
            if inner:
                wrapped[ins.name] = inner[-1]  # the root is printed last

    consumed = {id(i) for i in wrapped.values()}
    out = []
    for ins in mod.instrs:
        if ins.opcode in KINDS and id(ins) not in consumed:
            out.append(
                _collective(
                    ins,
                    mod,
                    name=ins.name,
                    comp=ins.comp,
                    is_async=False,
                    result_shape=ins.shape,
                    fallback_op_name=None,
                    num_devices=num_devices,
                )
            )
        elif ins.opcode.endswith("-start") and ins.opcode != "async-start":
            out.append(
                _collective(
                    ins,
                    mod,
                    name=ins.name,
                    comp=ins.comp,
                    is_async=True,
                    result_shape=_start_result(ins, done_of.get(ins.name)),
                    fallback_op_name=None,
                    num_devices=num_devices,
                )
            )
        elif ins.name in wrapped and ins.opcode == "async-start":
            inner = wrapped[ins.name]
            done = done_of.get(ins.name)
            meta = _OP_NAME_RE.search(_attrs(ins.attrs).get("metadata", ""))
            out.append(
                _collective(
                    inner,
                    mod,
                    name=ins.name,
                    comp=ins.comp,
                    is_async=True,
                    result_shape=inner.shape or (done.shape if done else None),
                    fallback_op_name=_unescape(meta.group(1)) if meta else None,
                    num_devices=num_devices,
                )
            )
    return out


def parse_collectives(hlo_text: str, num_devices: int | None = None, whole: bool = False) -> list[Collective]:
    """Every collective instruction in ``hlo_text`` (one or more HLO modules), in text order.

    ``num_devices`` sizes ``replica_groups={}`` (all devices); without it the module header's
    ``replica_count * num_partitions`` is used when present. Raises HloParseError when a
    collective cannot be read (malformed groups, an operand whose shape is nowhere, ...), and
    with ``whole`` when a module is cut short (:func:`analysis.hlo.scan.truncation`).
    """
    if not isinstance(hlo_text, str):
        raise HloParseError(f"HLO text must be str, not {type(hlo_text).__name__}")
    if num_devices is not None and (
        isinstance(num_devices, bool) or not isinstance(num_devices, (int, np.integer)) or num_devices < 1
    ):
        raise HloParseError(f"num_devices must be a positive int, got {num_devices!r}")
    out: list[Collective] = []
    for mod in scan(hlo_text):
        problem = truncation(mod) if whole else None
        if problem:
            raise HloParseError(problem)
        out.extend(_module_collectives(mod, None if num_devices is None else int(num_devices)))
    return out


# ---------------------------------------------------------------- tables


def _braces(groups) -> str | None:
    if groups is None:
        return None
    if groups and isinstance(groups[0], tuple):
        return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"
    return "{" + ",".join(map(str, groups)) + "}"


def collectives_frame(collectives) -> pandas.DataFrame:  # noqa: F821
    """One row per Collective, columns named after its fields.

    Groups, pairs and dimensions are written in HLO's brace spelling (``{{0,2},{1,3}}``) so the
    table survives CSV; optional integer columns use pandas' nullable ``Int64``.
    """
    import pandas as pd  # lazy: parsing must not pay for pandas

    columns = [f.name for f in fields(Collective)]
    rows = []
    for c in collectives:
        if not isinstance(c, Collective):
            raise HloParseError(f"expected Collective, got {type(c).__name__}")
        row = {k: getattr(c, k) for k in columns}
        for k in ("replica_groups", "source_target_pairs", "dimensions"):
            row[k] = _braces(row[k])
        rows.append(row)
    df = pd.DataFrame(rows, columns=columns)
    for k in ("operand_bytes", "result_bytes"):
        df[k] = df[k].astype("int64")
    for k in ("group_size", "num_groups", "channel_id"):
        df[k] = df[k].astype("Int64")
    df["is_async"] = df["is_async"].astype(bool)
    return df
