"""Replica groups in XLA HLO text: which devices each collective runs among.

HLO spells groups three ways: explicit lists ``{{0,1},{2,3}}``, iota lists ``[2,4]<=[8]`` or
``[3,10]<=[6,5]T(1,0)``, and mesh axes ``mesh[a=4,b=2] {a}`` (with ``device_ids=(...)`` and
sub-axes ``{a:(1)2}``); :func:`parse_groups` reads any of them as a tuple of device tuples.
collective-permute has ``source_target_pairs`` instead, which :func:`permute_groups` turns
into groups; :func:`group_mesh_axes` names the mesh axes a list of groups spans.
"""

from __future__ import annotations

import functools
import math
import re

import numpy as np

from analysis.hlo.lex import HloParseError, parse_int, parse_ints, split_top

__all__ = ["expand_iota_groups", "group_mesh_axes", "parse_groups", "permute_groups"]

_IOTA_RE = re.compile(r"\[([0-9,\s]*)\]\s*<=\s*\[([0-9,\s]*)\]\s*(?:T\s*\(([0-9,\s]*)\))?")
_MAX_DEVICES = 1 << 20  # device lists beyond this are junk, not a real machine


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
    group_dims = parse_ints(m.group(1), "iota dimension")
    reshape = parse_ints(m.group(2), "iota dimension")
    perm = parse_ints(m.group(3), "iota permutation") if m.group(3) is not None else tuple(range(len(reshape)))
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
        return np.array([parse_int(d, "mesh device id") for d in re.findall(r"[0-9]+", spec)], dtype=np.int64)
    dims = parse_ints(m.group(1), "mesh dimension")
    perm = parse_ints(m.group(2), "mesh permutation") if m.group(2) is not None else tuple(range(len(dims)))
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
    for item in split_top(m.group(1)):
        name, eq, size = item.rpartition("=")
        if not eq:
            raise HloParseError(f"bad mesh axis {item!r}")
        names.append(name.strip("'\""))
        sizes.append(parse_int(size, "mesh axis size"))
    if not sizes or 0 in sizes or math.prod(sizes) > _MAX_DEVICES:
        raise HloParseError(f"bad mesh size in {value[:80]!r}")
    ids = np.arange(math.prod(sizes)) if m.group(2) is None else _iota_flat(m.group(2))
    if ids.size != math.prod(sizes):
        raise HloParseError(f"mesh device_ids do not fill the mesh: {value[:80]!r}")

    refs: dict[int, list[tuple[int, int] | None]] = {}  # mesh dim -> its (pre, size) pieces
    for item in split_top(m.group(3)):
        am = re.fullmatch(r"'?([^':()]+)'?(?::\(([0-9]+)\)([0-9]+))?", item)
        if not am or am.group(1) not in names:
            raise HloParseError(f"replica-group axis {item!r} is not in the mesh")
        sub = (parse_int(am.group(2), "pre-size"), parse_int(am.group(3), "sub-axis size")) if am.group(2) else None
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
def parse_groups(value: str, what: str) -> tuple[tuple[int, ...], ...]:
    """``{{0,1},{2,3}}`` (or an iota / mesh-axes list) as a tuple of tuples; ``{}`` gives ();
    an empty group (``{{}}``, ``{{0,1},{}}``) is an HloParseError, as in XLA."""
    v = re.sub(r"\s+", "", value)
    if v.startswith("["):
        return expand_iota_groups(v)
    if v.startswith("mesh["):
        return _mesh_groups(v)
    if v == "{}":
        return ()
    if not re.fullmatch(r"\{\{[0-9,]*\}(?:,\{[0-9,]*\})*\}", v):
        raise HloParseError(f"bad {what}: {value[:80]!r}")
    groups = tuple(parse_ints(g, what) for g in v[2:-2].split("},{"))
    if () in groups:
        # `{}` is one group of every device, but `{{}}` is a group of none: XLA's HLO verifier
        # refuses it ("Instruction cannot have an empty replica group"), so no program runs it
        raise HloParseError(f"bad {what}: {value[:80]!r} has an empty group, which XLA refuses")
    return groups


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
