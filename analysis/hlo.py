"""Collectives in XLA HLO text.

Reads the text of one or more HLO modules, as printed by
``jax.jit(f).lower(x).compile().as_text()`` or dumped by XLA (``--xla_dump_to``) from any
backend, and lists every collective instruction with its bytes, groups and metadata.

No library parses HLO text from Python, so this is a small, forgiving scanner rather than a
full grammar: it understands exactly what a collective needs (shapes, operands, attributes,
computations, async pairs) and skips everything else. Only stdlib and numpy; pandas is
imported lazily by :func:`collectives_frame`.

Decisions worth knowing:

* ``replica_groups={}`` or no attribute means one group of all devices: ``replica_groups`` is
  None and ``group_size`` is ``num_devices`` when given, else the module header's
  ``replica_count * num_partitions`` when the header states either, else None.
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

import functools
import math
import re
from dataclasses import dataclass, field, fields

import numpy as np

__all__ = [
    "KINDS",
    "Collective",
    "HloParseError",
    "collectives_frame",
    "expand_iota_groups",
    "group_mesh_axes",
    "parse_collectives",
    "permute_groups",
    "shape_bytes",
]


class HloParseError(ValueError):
    """The only exception the public functions raise on bad input."""


KINDS = (
    "all-gather",
    "reduce-scatter",
    "all-reduce",
    "all-to-all",
    "collective-permute",
    "collective-broadcast",
    "ragged-all-to-all",
)


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


# A string never holds a raw newline in HLO (they are escaped), so strings are matched per line:
# an unterminated quote in stray text then cannot swallow the rest of the file.
_STR = r'"(?:[^"\\\n]|\\.)*"'
_STR_RE = re.compile(_STR)
_COMMENTS_RE = re.compile(f"({_STR})" + r"|/\*[^\n]*?\*/|//[^\n]*")
_BRACKETS_RE = re.compile(_STR + r"|[()\[\]{}]")
_TOP_COMMA_RE = re.compile(_STR + r"|[()\[\]{},]")
_OPEN, _CLOSE = "([{", ")]}"

_NAME = r"[A-Za-z_][\w.\-]*"
_INSTR_HEAD_RE = re.compile(rf"\s*(?:ROOT\s+)?%?({_NAME})\s*=\s*")
# A line that starts a new instruction (not an attribute continuation like `calls=%c`).
_INSTR_START_RE = re.compile(rf"\s*(?:ROOT\s+)?%?{_NAME}\s*=\s*(?:\(|[a-z][a-z0-9]*\[|[a-z][\w\-]*\()")
_COMP_HEAD_RE = re.compile(rf"\s*(?:ENTRY\s+)?%?({_NAME})\s*")
_ARRAY_RE = re.compile(r"([a-z][a-z0-9]*)\[([^\]\[]*)\]")
_OPCODE_RE = re.compile(r"\s*([a-z][a-z0-9\-]*)\(")
_OP_NAME_RE = re.compile(r'op_name="((?:[^"\\\n]|\\.)*)"')
_IOTA_RE = re.compile(r"\[([0-9,\s]*)\]\s*<=\s*\[([0-9,\s]*)\]\s*(?:T\s*\(([0-9,\s]*)\))?")
_ANY_COLLECTIVE_RE = re.compile(
    r"(?<![\w.%\-])(?:" + "|".join(re.escape(k) for k in KINDS) + r")(?:-start)?\("
)

# Bits per element: sub-byte types count fractionally and totals round up to whole bytes.
_BITS = {
    "pred": 8, "s1": 1, "u1": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8,
    "s16": 16, "u16": 16, "f16": 16, "bf16": 16, "s32": 32, "u32": 32, "f32": 32,
    "s64": 64, "u64": 64, "f64": 64, "c64": 64, "c128": 128, "token": 0, "opaque": 0,
}
_MINIFLOAT_RE = re.compile(r"f([468])e\d+m\d+\w*")  # f8e4m3fn, f8e5m2, f8e8m0fnu, f4e2m1fn, f6e2m3fn ...
_MAX_DEVICES = 1 << 20  # device lists beyond this are junk, not a real machine


# ---------------------------------------------------------------- lexical helpers


def _int(text: str, what: str) -> int:
    text = text.strip()
    # Length cap: Python refuses to convert > 4300 digits with a ValueError of its own.
    if not text.isdigit() or not text.isascii() or len(text) > 30:
        raise HloParseError(f"bad {what}: {text[:40]!r}")
    return int(text)


def _ints(text: str, what: str) -> tuple[int, ...]:
    text = text.strip()
    return tuple(_int(t, what) for t in text.split(",")) if text else ()


def _balance(line: str) -> int:
    s = _STR_RE.sub("", line)
    return sum(s.count(c) for c in _OPEN) - sum(s.count(c) for c in _CLOSE)


def _close(s: str, i: int) -> int:
    """Index just past the bracket that closes the one at ``s[i]`` (strings skipped)."""
    depth = 0
    for m in _BRACKETS_RE.finditer(s, i):
        c = m.group()
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0:
                return m.end()
    raise HloParseError(f"unbalanced brackets in {s[i:i + 60]!r}")


def _split_top(s: str) -> list[str]:
    """Split on commas outside brackets and strings; empty text gives []."""
    parts, depth, start = [], 0, 0
    for m in _TOP_COMMA_RE.finditer(s):
        c = m.group()
        if c == "," and depth == 0:
            parts.append(s[start:m.start()])
            start = m.end()
        elif c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth < 0:
                raise HloParseError(f"unbalanced brackets in {s[:60]!r}")
    if depth:
        raise HloParseError(f"unbalanced brackets in {s[:60]!r}")
    parts.append(s[start:])
    return [p.strip() for p in parts if p.strip()]


# ---------------------------------------------------------------- shapes


def _shape_end(s: str, i: int) -> int:
    """End of the shape starting at ``s[i]`` (an array with optional layout, or a tuple)."""
    if s.startswith("(", i):
        return _close(s, i)
    m = _ARRAY_RE.match(s, i)
    if not m:
        raise HloParseError(f"expected a shape at {s[i:i + 40]!r}")
    j = m.end()
    return _close(s, j) if s.startswith("{", j) else j


def _leaves(shape: str) -> list[tuple[str, int]]:
    """(element type, element count) of every array in a shape, tuples flattened.

    Iterative rather than recursive so deeply nested junk cannot raise RecursionError.
    """
    s, i, n, out, depth = shape, 0, len(shape), [], 0
    want_element = True
    while True:
        while i < n and s[i].isspace():
            i += 1
        if want_element:
            if i < n and s[i] == "(":
                depth, i = depth + 1, i + 1
                k = i
                while k < n and s[k].isspace():
                    k += 1
                if k < n and s[k] == ")":  # empty tuple
                    depth, i, want_element = depth - 1, k + 1, False
                continue
            m = _ARRAY_RE.match(s, i)
            if not m:
                raise HloParseError(f"expected a shape at {s[i:i + 40]!r} in {shape[:80]!r}")
            out.append((m.group(1), _num_elements(m.group(2))))
            i = _close(s, m.end()) if s.startswith("{", m.end()) else m.end()
            want_element = False
        elif depth == 0:
            if i != n:
                raise HloParseError(f"trailing text {s[i:i + 40]!r} in shape {shape[:80]!r}")
            return out
        elif i < n and s[i] == ",":
            i, want_element = i + 1, True
        elif i < n and s[i] == ")":
            depth, i = depth - 1, i + 1
        else:
            raise HloParseError(f"malformed tuple shape {shape[:80]!r}")


def _num_elements(dims: str) -> int:
    count = 1
    for d in dims.split(",") if dims.strip() else ():
        d = d.strip()
        if d.startswith("<="):  # bounded dynamic dim: the buffer holds the bound
            d = d[2:]
        if d == "?":
            raise HloParseError("unbounded dynamic dimension '?' has no size")
        count *= _int(d, "dimension")
    return count


def _element_bits(dtype: str) -> int:
    if dtype in _BITS:
        return _BITS[dtype]
    m = _MINIFLOAT_RE.fullmatch(dtype)
    if m:
        return int(m.group(1))
    raise HloParseError(f"unknown element type {dtype!r}")


def shape_bytes(shape_text: str) -> int:
    """Bytes of an HLO shape such as ``f32[1024,256]{1,0}`` or ``(f32[4], bf16[2,2])``.

    Layouts (tiling ``T(8,128)``, memory space ``S(3)``) are ignored; tuples sum their
    elements; sub-byte types round each array up to whole bytes; token/opaque are 0.
    """
    if not isinstance(shape_text, str):
        raise HloParseError(f"shape must be str, not {type(shape_text).__name__}")
    return _leaves_bytes(_leaves(_COMMENTS_RE.sub(lambda m: m.group(1) or " ", shape_text).strip()))


def _leaves_bytes(leaves: list[tuple[str, int]]) -> int:
    return sum(math.ceil(_element_bits(t) * count / 8) for t, count in leaves)


def _tuple_elements(shape: str) -> list[str]:
    """Top-level elements of a tuple shape; [shape] for an array shape."""
    shape = shape.strip()
    if shape.startswith("(") and _close(shape, 0) == len(shape):
        return _split_top(shape[1:-1])
    return [shape]


# ---------------------------------------------------------------- groups


def expand_iota_groups(spec: str) -> tuple[tuple[int, ...], ...]:
    """Expand an iota replica-group list such as ``[2,4]<=[8]`` or ``[3,10]<=[6,5]T(1,0)``.

    XLA's ``IotaReplicaGroupList``: iota(prod(reshape dims)), reshaped to the dims after
    ``<=``, transposed by ``T(...)``, reshaped to ``[num_groups, group_size]``; rows are groups.
    """
    if not isinstance(spec, str):
        raise HloParseError(f"iota spec must be str, not {type(spec).__name__}")
    m = _IOTA_RE.fullmatch(spec.strip())
    if not m:
        raise HloParseError(f"not an iota replica-group list: {spec[:80]!r}")
    group_dims = _ints(m.group(1), "iota dimension")
    reshape = _ints(m.group(2), "iota dimension")
    perm = _ints(m.group(3), "iota permutation") if m.group(3) is not None else tuple(range(len(reshape)))
    if len(group_dims) != 2:
        raise HloParseError(f"iota groups need [num_groups,group_size], got {spec!r}")
    if not reshape or 0 in reshape or sorted(perm) != list(range(len(reshape))):
        raise HloParseError(f"bad iota reshape/permutation in {spec!r}")
    total = math.prod(reshape)
    if math.prod(group_dims) != total:
        raise HloParseError(f"iota group dims and reshape dims differ in size: {spec!r}")
    if total > _MAX_DEVICES:
        raise HloParseError(f"iota list of {total} devices is implausibly large: {spec!r}")
    ids = np.arange(total).reshape(reshape).transpose(perm).reshape(group_dims)
    return tuple(tuple(int(d) for d in row) for row in ids)


def _iota_flat(spec: str) -> np.ndarray:
    """Device order of a mesh's ``device_ids=(...)``: ``[4,2]T(1,0)`` (iota reshaped and
    transposed) or an explicit ``0,2,4,...`` list."""
    m = re.fullmatch(r"(?:\[[0-9,]*\]<=)?\[([0-9,]*)\](?:T\(([0-9,]*)\))?", spec)
    if not m:
        if not re.fullmatch(r"[0-9,\[\]{}]*", spec):
            raise HloParseError(f"bad mesh device_ids {spec!r}")
        return np.array([_int(d, "mesh device id") for d in re.findall(r"[0-9]+", spec)], dtype=np.int64)
    dims = _ints(m.group(1), "mesh dimension")
    perm = _ints(m.group(2), "mesh permutation") if m.group(2) is not None else tuple(range(len(dims)))
    if not dims or 0 in dims or sorted(perm) != list(range(len(dims))) or math.prod(dims) > _MAX_DEVICES:
        raise HloParseError(f"bad mesh device_ids {spec!r}")
    return np.arange(math.prod(dims)).reshape(dims).transpose(perm).reshape(-1)


def _mesh_groups(value: str) -> tuple[tuple[int, ...], ...]:
    """Expand XLA's mesh-axes replica groups, e.g. ``mesh['a'=4,'b'=2] {'a'}`` or
    ``mesh[a=1,b=2,c=4], device_ids=([4,2]T(1,0)) {b}`` or sub-axes ``{a:(1)2}``.

    Mirrors ``MeshAxesReplicaGroupList::flattened_replica_groups``: each grouped mesh axis is
    split into (pre, size, rest) for sub-axes, the grouped pieces are moved last (in mesh
    order), and rows of the resulting device array are the groups.
    """
    m = re.fullmatch(r"mesh\[([^\]]*)\](?:,device_ids=\((.*)\))?\{([^{}]*)\}", value)
    if not m:
        raise HloParseError(f"bad mesh replica groups: {value[:80]!r}")
    names, sizes = [], []
    for item in _split_top(m.group(1)):
        name, eq, size = item.rpartition("=")
        if not eq:
            raise HloParseError(f"bad mesh axis {item!r}")
        names.append(name.strip("'\""))
        sizes.append(_int(size, "mesh axis size"))
    if not sizes or 0 in sizes or math.prod(sizes) > _MAX_DEVICES:
        raise HloParseError(f"bad mesh size in {value[:80]!r}")
    ids = np.arange(math.prod(sizes)) if m.group(2) is None else _iota_flat(m.group(2))
    if ids.size != math.prod(sizes):
        raise HloParseError(f"mesh device_ids do not fill the mesh: {value[:80]!r}")

    refs: dict[int, list[tuple[int, int] | None]] = {}  # mesh dim -> its (pre, size) pieces
    for item in _split_top(m.group(3)):
        am = re.fullmatch(r"'?([^':()]+)'?(?::\(([0-9]+)\)([0-9]+))?", item)
        if not am or am.group(1) not in names:
            raise HloParseError(f"replica-group axis {item!r} is not in the mesh")
        sub = (_int(am.group(2), "pre-size"), _int(am.group(3), "sub-axis size")) if am.group(2) else None
        refs.setdefault(names.index(am.group(1)), []).append(sub)

    reshape: list[int] = []
    grouped: list[int] = []
    for dim, full in enumerate(sizes):
        pieces = refs.get(dim)
        if not pieces:
            reshape.append(full)
            continue
        if None in pieces:
            if len(pieces) > 1:
                raise HloParseError(f"mesh axis {names[dim]} grouped twice")
            grouped.append(len(reshape))
            reshape.append(full)
            continue
        # Sub-axes of one mesh axis, minor pieces last: pad the gaps, keep the listed order.
        order = sorted(range(len(pieces)), key=lambda k: pieces[k][0])
        prefix, at = 1, {}
        for k in order:
            pre, size = pieces[k]
            if pre < prefix or pre % prefix or size < 1:
                raise HloParseError(f"overlapping sub-axes of {names[dim]}")
            if pre != prefix:
                reshape.append(pre // prefix)
                prefix = pre
            at[k] = len(reshape)
            reshape.append(size)
            prefix *= size
        if full % prefix:
            raise HloParseError(f"sub-axes of {names[dim]} do not divide its size {full}")
        if prefix != full:
            reshape.append(full // prefix)
        grouped.extend(at[k] for k in range(len(pieces)))
    perm = [d for d in range(len(reshape)) if d not in grouped] + grouped
    group_size = math.prod(reshape[g] for g in grouped)
    rows = ids.reshape(reshape).transpose(perm).reshape(-1, group_size)
    return tuple(tuple(int(d) for d in row) for row in rows)


@functools.lru_cache(maxsize=512)  # big modules repeat the same few group lists thousands of times
def _parse_groups(value: str, what: str) -> tuple[tuple[int, ...], ...]:
    """``{{0,1},{2,3}}`` (or an iota / mesh-axes list) as a tuple of tuples; ``{}`` gives ()."""
    v = re.sub(r"\s+", "", value)
    if v.startswith("["):
        return expand_iota_groups(v)
    if v.startswith("mesh["):
        return _mesh_groups(v)
    if v == "{}":
        return ()
    if not re.fullmatch(r"\{\{[0-9,]*\}(?:,\{[0-9,]*\})*\}", v):
        raise HloParseError(f"bad {what}: {value[:80]!r}")
    return tuple(_ints(g, what) for g in v[2:-2].split("},{"))


def permute_groups(pairs) -> tuple[tuple[int, ...], ...]:
    """Devices linked by collective-permute ``source_target_pairs``, as sorted groups.

    Each group is a connected set (a ring or chain of sends); the result can be passed to
    :func:`group_mesh_axes` to name the mesh axes a permute runs along.
    """
    try:
        edges = [(int(a), int(b)) for a, b in pairs]
    except (TypeError, ValueError) as e:
        raise HloParseError(f"pairs must be (source, target) ints: {e}") from None
    parent: dict[int, int] = {}

    def root(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        parent[root(a)] = root(b)
    comps: dict[int, list[int]] = {}
    for x in sorted(parent):
        comps.setdefault(root(x), []).append(x)
    return tuple(sorted(tuple(c) for c in comps.values()))


def group_mesh_axes(groups, device_ids, axis_names) -> tuple[str, ...]:
    """Mesh axes a collective's groups span, in mesh order.

    ``device_ids`` lays out, as the mesh, the ids that HLO groups use; ``axis_names`` names its
    axes; ``groups=None`` means one group of all devices. The groups must partition the mesh
    into products of whole axes (every group varies over the same axes and covers them fully),
    else HloParseError. Size-1 axes never vary, so never appear.

    HLO groups hold *logical* ids: a device's position in the compiled device assignment,
    which jax fills in mesh order. So pass ``np.arange(mesh.size).reshape(mesh.devices.shape)``;
    ``Mesh.device_ids`` (physical ids) is the same only when the mesh lists devices in id
    order (as ``jax.make_mesh`` does on CPU, but not necessarily on TPU).
    """
    try:
        ids = np.asarray(device_ids)
        names = tuple(str(a) for a in axis_names)
    except (TypeError, ValueError) as e:
        raise HloParseError(f"bad mesh: {e}") from None
    if ids.ndim != len(names) or ids.size == 0 or ids.dtype.kind not in "iu":
        raise HloParseError(f"device_ids shape {ids.shape} does not fit axes {names}")
    coords = {int(d): idx for idx, d in np.ndenumerate(ids)}
    if len(coords) != ids.size:
        raise HloParseError("device_ids repeat a device")
    if groups is None:
        groups = (tuple(coords),)
    try:
        groups = [tuple(int(d) for d in g) for g in groups]
    except (TypeError, ValueError) as e:
        raise HloParseError(f"groups must be sequences of ints: {e}") from None

    seen: set[int] = set()
    spanned: set[int] = set()
    for g in groups:
        if any(d not in coords for d in g):
            raise HloParseError(f"group {g} names a device outside the mesh")
        if len(set(g)) != len(g) or seen.intersection(g):
            raise HloParseError(f"group {g} repeats a device")
        seen.update(g)
        cs = [coords[d] for d in g]
        spanned.update(ax for ax in range(ids.ndim) if len({c[ax] for c in cs}) > 1)
    if len(seen) != ids.size:
        raise HloParseError("groups do not cover every device of the mesh")
    # Distinct devices varying only over `spanned` fill the product iff there are exactly that many.
    size = math.prod(ids.shape[ax] for ax in spanned)
    bad = [g for g in groups if len(g) != size]
    if bad:
        axes = [names[a] for a in sorted(spanned)]
        raise HloParseError(f"group {bad[0]} is not a product of whole mesh axes {axes}")
    return tuple(names[ax] for ax in sorted(spanned))


# ---------------------------------------------------------------- module scanning


@dataclass
class _Instr:
    name: str
    comp: str
    opcode: str
    shape: str | None
    operands: str
    attrs: str


@dataclass
class _Module:
    num_devices: int | None = None  # from the header, for `replica_groups={}`
    defs: dict = field(default_factory=dict)  # (comp, name) -> shape text or None
    global_defs: dict = field(default_factory=dict)  # name -> shape (names are module-unique)
    params: dict = field(default_factory=dict)  # comp -> {param: shape}, from its header
    instrs: list = field(default_factory=list)  # collective/async _Instr, in text order


_RELEVANT = {k + suffix for k in KINDS for suffix in ("", "-start", "-done")} | {"async-start", "async-done"}


def _header_devices(line: str) -> int | None:
    found = {k: _int(v, k) for k, v in re.findall(r"\b(num_partitions|replica_count)=([0-9]+)", line)}
    if not found:
        return None
    return found.get("num_partitions", 1) * found.get("replica_count", 1)


def _comp_header(line: str) -> tuple[str, dict] | None:
    """(name, {param: shape}) when ``line`` opens a computation body, else None."""
    st = line.strip()
    if not st.endswith("{") or _balance(st) != 1:
        return None
    m = _COMP_HEAD_RE.match(st)
    if not m or m.group(1) == "HloModule":
        return None
    rest, params = st[m.end():], {}
    if rest.startswith("("):
        try:
            end = _close(rest, 0)
            for p in _split_top(rest[1:end - 1]):
                pname, _, pshape = p.partition(":")
                params[pname.strip().lstrip("%")] = pshape.strip()
        except HloParseError:
            return None
        rest = rest[end:].strip()
        if rest.startswith("->"):
            rest = rest[2:].strip()
            try:
                rest = rest[_shape_end(rest, 0):].strip()
            except HloParseError:
                return None
    return (m.group(1), params) if rest == "{" else None


def _parse_instr(stmt: str, comp: str, mod: _Module) -> None:
    """Record one instruction statement; lines that are not instructions are skipped,
    unless they mention a collective, which must not be silently lost."""
    try:
        m = _INSTR_HEAD_RE.match(stmt)
        if not m:
            raise HloParseError(f"not an instruction: {stmt[:80]!r}")
        name, i = m.group(1), m.end()
        shape = None
        if not _OPCODE_RE.match(stmt, i):  # shape-less instructions exist in hand-written HLO
            j = _shape_end(stmt, i)
            shape, i = stmt[i:j], j
        om = _OPCODE_RE.match(stmt, i)
        if not om:
            raise HloParseError(f"no opcode in {stmt[:80]!r}")
        opcode = om.group(1)
        mod.defs[(comp, name)] = shape
        mod.global_defs.setdefault(name, shape)
        if opcode in _RELEVANT:
            j = _close(stmt, om.end() - 1)
            mod.instrs.append(_Instr(name, comp, opcode, shape, stmt[om.end():j - 1], stmt[j:]))
    except HloParseError:
        if _ANY_COLLECTIVE_RE.search(stmt):
            raise


def _scan(text: str) -> list[_Module]:
    text = _COMMENTS_RE.sub(lambda m: m.group(1) or " ", text)
    mods = [_Module()]
    comp: str | None = None  # the computation whose body we are in
    pending: list[str] = []  # lines of an instruction that spans several lines
    pending_bal = 0
    lines = text.split("\n")
    k = 0
    while k < len(lines):
        line = lines[k]
        bal = _balance(line)
        if pending:
            # A new instruction, a new module, or a closing brace we did not open ends the
            # multi-line statement: flush it and look at this line afresh.
            if pending_bal + bal < 0 or _INSTR_START_RE.match(line) or line.lstrip().startswith("HloModule"):
                _parse_instr(" ".join(pending), comp or "", mods[-1])
                pending, pending_bal = [], 0
                continue
            pending.append(line)
            pending_bal += bal
            if pending_bal == 0 and not line.rstrip().endswith(","):
                _parse_instr(" ".join(pending), comp or "", mods[-1])
                pending = []
            k += 1
            continue
        k += 1
        st = line.strip()
        if not st:
            continue
        if st.startswith("HloModule"):
            if mods[-1].instrs or mods[-1].defs or mods[-1].num_devices is not None:
                mods.append(_Module())
            mods[-1].num_devices = _header_devices(st)
            comp = None
            continue
        if comp is None:
            head = _comp_header(st)
            if head is not None:
                comp = head[0]
                mods[-1].params[comp] = head[1]
            elif bal == 0 and _INSTR_START_RE.match(st):
                _parse_instr(st, "", mods[-1])  # a bare snippet of instructions
            elif _ANY_COLLECTIVE_RE.search(st) and _INSTR_START_RE.match(st):
                raise HloParseError(f"unbalanced collective instruction: {st[:80]!r}")
            continue
        if st.startswith("}") and bal < 0:
            comp = None  # `}` or `}, execution_thread="..."`
        elif bal == 0 and not st.endswith(","):
            _parse_instr(st, comp, mods[-1])
        else:
            pending, pending_bal = [line], bal
    if pending:
        _parse_instr(" ".join(pending), comp or "", mods[-1])
    return mods


# ---------------------------------------------------------------- collectives


def _attrs(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    key = None
    for part in _split_top(text):
        # Mesh-axes replica groups print a top-level comma: `mesh[...], device_ids=(...) {a}`.
        if part.startswith("device_ids=") and key is not None and out[key].startswith("mesh["):
            out[key] += ", " + part
            continue
        k, eq, value = part.partition("=")
        if eq:
            key = k.strip()
            out.setdefault(key, value.strip())
    return out


def _operand_shape(op: str, ins: _Instr, mod: _Module) -> str:
    op = op.strip()
    if op.startswith("(") or _ARRAY_RE.match(op):  # older printers put the shape inline
        return op[:_shape_end(op, 0)]
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


def _collective(ins: _Instr, mod: _Module, *, name: str, comp: str, is_async: bool,
                result_shape: str | None, fallback_op_name: str | None,
                num_devices: int | None) -> Collective:
    kind = ins.opcode.removesuffix("-start")
    attrs = _attrs(ins.attrs)
    if result_shape is None:
        raise HloParseError(f"{ins.name} has no result shape")
    leaves = _leaves(result_shape)
    operands = _split_top(ins.operands)
    operand_bytes = sum(_leaves_bytes(_leaves(_operand_shape(op, ins, mod))) for op in operands)

    groups = pairs = None
    group_size = num_groups = None
    if kind == "collective-permute":
        pairs = _parse_groups(attrs.get("source_target_pairs", "{}"), "source_target_pairs")
        if any(len(p) != 2 for p in pairs):
            raise HloParseError(f"source_target_pairs of {ins.name} are not pairs")
        num_groups = len(pairs)
    else:
        groups = _parse_groups(attrs.get("replica_groups", "{}"), "replica_groups") or None
        if groups is None:
            n = num_devices if num_devices is not None else mod.num_devices
            group_size, num_groups = n, (1 if n is not None else None)
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
        dtype=leaves[0][0] if leaves else "",
        operand_bytes=operand_bytes,
        result_bytes=_leaves_bytes(leaves),
        replica_groups=groups,
        group_size=group_size,
        num_groups=num_groups,
        source_target_pairs=pairs,
        dimensions=_ints(attrs["dimensions"].strip("{} "), "dimensions") if "dimensions" in attrs else None,
        channel_id=_int(attrs["channel_id"], "channel_id") if "channel_id" in attrs else None,
        op_name=_unescape(meta.group(1)) if meta else fallback_op_name,
    )


def _start_result(start: _Instr, done: _Instr | None) -> str | None:
    """Logical result of an ``X-start``: the done's shape, else read off the start's tuple."""
    if done is not None and done.shape:
        return done.shape
    if start.shape is None:
        return None
    if start.opcode == "all-reduce-start":  # its shape is the result itself
        return start.shape
    parts = _tuple_elements(start.shape)  # (operands, result[, context...])
    return parts[1] if len(parts) >= 2 else start.shape


def _module_collectives(mod: _Module, num_devices: int | None) -> list[Collective]:
    done_of: dict[str, _Instr] = {}
    by_comp: dict[str, list[_Instr]] = {}
    for ins in mod.instrs:
        if ins.opcode.endswith("-done"):
            ops = _split_top(ins.operands)
            if ops:
                done_of.setdefault(_operand_name(ops[0]), ins)
        elif ins.opcode in KINDS:
            by_comp.setdefault(ins.comp, []).append(ins)

    # async-start(...), calls=%c: the collective inside c is reported once, as the start.
    wrapped: dict[str, _Instr] = {}
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
            out.append(_collective(ins, mod, name=ins.name, comp=ins.comp, is_async=False,
                                   result_shape=ins.shape, fallback_op_name=None, num_devices=num_devices))
        elif ins.opcode.endswith("-start") and ins.opcode != "async-start":
            out.append(_collective(ins, mod, name=ins.name, comp=ins.comp, is_async=True,
                                   result_shape=_start_result(ins, done_of.get(ins.name)),
                                   fallback_op_name=None, num_devices=num_devices))
        elif ins.name in wrapped and ins.opcode == "async-start":
            inner = wrapped[ins.name]
            done = done_of.get(ins.name)
            meta = _OP_NAME_RE.search(_attrs(ins.attrs).get("metadata", ""))
            out.append(_collective(inner, mod, name=ins.name, comp=ins.comp, is_async=True,
                                   result_shape=inner.shape or (done.shape if done else None),
                                   fallback_op_name=_unescape(meta.group(1)) if meta else None,
                                   num_devices=num_devices))
    return out


def parse_collectives(hlo_text: str, num_devices: int | None = None) -> list[Collective]:
    """Every collective instruction in ``hlo_text`` (one or more HLO modules), in text order.

    ``num_devices`` sizes ``replica_groups={}`` (all devices); without it the module header's
    ``replica_count * num_partitions`` is used when present. Raises HloParseError when a
    collective cannot be read (malformed groups, an operand whose shape is nowhere, ...).
    """
    if not isinstance(hlo_text, str):
        raise HloParseError(f"HLO text must be str, not {type(hlo_text).__name__}")
    if num_devices is not None and (
        isinstance(num_devices, bool) or not isinstance(num_devices, (int, np.integer)) or num_devices < 1
    ):
        raise HloParseError(f"num_devices must be a positive int, got {num_devices!r}")
    out: list[Collective] = []
    for mod in _scan(hlo_text):
        out.extend(_module_collectives(mod, None if num_devices is None else int(num_devices)))
    return out


# ---------------------------------------------------------------- tables


def _braces(groups) -> str | None:
    if groups is None:
        return None
    if groups and isinstance(groups[0], tuple):
        return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"
    return "{" + ",".join(map(str, groups)) + "}"


def collectives_frame(collectives) -> "pandas.DataFrame":  # noqa: F821
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
