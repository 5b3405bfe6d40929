"""An event's stats into the table's columns (:func:`add_stat_columns`, for :mod:`.xplane`):
the stats named like a column decoded for the kept rows only, their values typed as ProfileData
types them, a missing program id or category taken from the event's metadata as XProf does,
and the device timespan preferred where an event has one."""

from __future__ import annotations

import numpy as np

from analysis.trace import xspace_wire as wire
from analysis.trace.arrays import Lookup, objects, trunc_div

PLAIN_STATS = ("hlo_op", "hlo_module", "device_ordinal", "scope_range_id")  # columns as they are
TEXT_STATS = ("program_id", "hlo_category")  # the event's stat, else its metadata's; as text
_DEVICE_SPAN = ("device_offset_ps", "device_duration_ps")
_STATS = [*PLAIN_STATS, *TEXT_STATS, *_DEVICE_SPAN]  # the event stats decoded


def add_stat_columns(cols: dict, space: wire.Space, d: wire.Decoded, keep, cand, bounds, rows, row_plane) -> None:
    """Add :data:`PLAIN_STATS`, ``display_name`` and :data:`TEXT_STATS` to ``cols`` and move
    the rows with a device timespan to it. ``keep``: the events decoded (``d``), ``cand``: which
    of them are candidates, ``bounds``: each plane's first event, ``rows``: the positions in
    ``keep`` of the table's rows, ``row_plane``: each row's plane."""
    buf = space.buf
    row_of = np.zeros(keep.size, np.int64)  # read only at the kept rows
    row_of[rows] = np.arange(rows.size)
    parts, refs = _stats(space, d, keep, cand, bounds, row_of)
    for name in PLAIN_STATS:
        cols[name] = _stat_column(rows.size, *parts[name], buf, refs)
    _device_span(cols, parts)
    planes = space.planes
    row_mid = d.value[(1, 0)].view(np.int64)[rows]
    cols["display_name"] = _from_metadata(planes, row_plane, row_mid, lambda p: p.event_display)
    for name in TEXT_STATS:
        col = _from_metadata(planes, row_plane, row_mid, lambda p, name=name: _named(p.event_stats, name))
        _text_into(col, parts[name], buf, refs)  # the event's own stat first, as XProf's visitor
        cols[name] = col


def _last_per(owner: np.ndarray, sel: np.ndarray, n: int) -> np.ndarray:
    """Of the rows ``sel`` (in wire order), the last one of each ``owner``: of two stats with
    one name, the later wins (as in a dict built from them)."""
    if sel.size and np.bincount(owner[sel], minlength=n).max() > 1:
        rev = sel[::-1]
        _, first = np.unique(owner[rev], return_index=True)
        sel = np.sort(rev[first])
    return sel


# XStat's value oneof, (field, wire type): double, uint64, int64, str, bytes, ref
_VALUE_FIELDS = ((2, 1), (3, 0), (4, 0), (5, 2), (6, 2), (7, 0))
_STR_KINDS = (5, 6, 7)  # a str in the table (ProfileData gives bytes_value as str too)


def _named(stats: dict[int, dict], name: str) -> dict[int, str]:
    """{metadata id: the stat ``name`` as text} of the metadata that have it."""
    return {k: str(v[name]) for k, v in stats.items() if name in v}


def _from_metadata(planes, row_plane: np.ndarray, row_mid: np.ndarray, texts_of) -> np.ndarray:
    """Per row: ``texts_of(plane)[metadata id]`` (a str), None where the row's metadata has none."""
    out = np.full(row_plane.size, None)
    with_texts = [pi for pi, p in enumerate(planes) if texts_of(p)]
    if not with_texts:
        return out
    present = np.bincount(row_plane, minlength=len(planes))
    for pi in with_texts:
        if not present[pi]:
            continue
        texts = texts_of(planes[pi])
        m = np.flatnonzero(row_plane == pi)
        out[m] = objects([None, *texts.values()])[Lookup(texts, 0)(row_mid[m])]
    return out


def _device_span(cols: dict, parts: dict) -> None:
    """Where an event has both device-timespan stats with integer values, its start and
    duration are those (tsl ``GetEventTimespan``); whole ns, truncated toward zero."""
    n = cols["start_ns"].size
    both, ps = np.ones(n, bool), []
    for name in _DEVICE_SPAN:
        rows, kind, raw = parts[name][:3]
        ok = ((kind == 4) | (kind == 3)) & ((kind == 4) | (raw < np.uint64(2**63)))  # an int64 holds it
        has = np.zeros(n, bool)
        has[rows[ok]] = True
        both &= has
        value = np.zeros(n, np.int64)
        value[rows[ok]] = raw[ok].view(np.int64)
        ps.append(value)
    cols["start_ns"][both] = trunc_div(ps[0][both], 1000)
    cols["duration_ns"][both] = trunc_div(ps[1][both], 1000)


def _text_into(out: np.ndarray, parts: tuple, buf: wire.Buf, refs) -> None:
    """Write a stats column as text (ints in decimal) into ``out`` at the rows that have it."""
    rows, kind, raw = parts[:3]
    for signed in (False, True):  # few distinct values (program ids): the text of each once
        m = np.flatnonzero(kind == (4 if signed else 3))
        if m.size:
            uniq, inv = np.unique(raw[m], return_inverse=True)
            texts = [str(v - (1 << 64) if signed and v >= 1 << 63 else v) for v in uniq.tolist()]
            out[rows[m]] = objects(texts)[inv.ravel()]
    rest = np.flatnonzero((kind != 3) & (kind != 4))
    if rest.size:
        sub = tuple(x[rest] for x in parts)
        col = _stat_column(out.size, *sub, buf, refs)
        out[sub[0]] = [str(col[i]) for i in sub[0].tolist()]


def _stats(
    space: wire.Space,
    d: wire.Decoded,
    keep: np.ndarray,
    cand: np.ndarray,
    bounds: np.ndarray,
    row_of: np.ndarray,
) -> tuple[dict, object]:
    """The stats named in :data:`_STATS`, from the stats of the candidate events only (as
    ProfileData's reader did): a stat whose metadata is missing or that has no value is
    skipped. Per name: ``(rows, kind, raw, value start, value stop, plane)`` of the rows that
    have it (see :func:`_stat_column`), and the reference resolver."""
    planes, buf = space.planes, space.buf
    column = {name: i for i, name in enumerate(_STATS)}
    stat_lookup = [Lookup(p.stat_names, -1, lambda s: column.get(s, -1)) for p in planes]
    cuts = np.searchsorted(keep, bounds)
    used = [pi for pi in range(len(planes)) if cuts[pi] < cuts[pi + 1]]
    take = np.flatnonzero(cand[d.rep_msg])
    owner, s_start, s_stop = d.rep_msg[take], d.rep_start[take], d.rep_stop[take]
    first, has_first = d.rep_first[take], d.rep_has_first[take]
    # each stat's plane (the stats are not in plane order: the decoder yields them field by
    # field); not needed where one plane holds every kept event, as on CPU
    plane_of = np.repeat(np.arange(len(planes)), np.diff(cuts))[owner] if len(used) > 1 else None

    # Only the stats named like a column are decoded; their metadata id (the first field, as
    # writers lay them out) was read with the events.
    take = np.flatnonzero((_per_plane(stat_lookup, used, plane_of, first.view(np.int64)) >= 0) | ~has_first)
    owner, s_start, s_stop = owner[take], s_start[take], s_stop[take]
    if plane_of is not None:
        plane_of = plane_of[take]
    g = wire.decode(buf, s_start, s_stop, ((1, 0), *_VALUE_FIELDS))
    col = _per_plane(stat_lookup, used, plane_of, g.value[(1, 0)].view(np.int64))
    # the value oneof: the member seen last is the one set; kind is its field number, 0 for none
    kind = np.zeros_like(g.seen[(1, 0)])
    raw = np.zeros(kind.size, np.uint64)
    last_seen = np.zeros_like(kind)
    for key in _VALUE_FIELDS:
        if key not in g.hit:
            continue
        later = np.flatnonzero(g.seen[key] > last_seen)
        last_seen[later] = g.seen[key][later]
        kind[later] = key[0]
        raw[later] = g.value[key][later]
    valued = kind.astype(bool)
    v_start = np.where(kind == 5, g.start[(5, 2)], g.start[(6, 2)])
    v_stop = np.where(kind == 5, g.stop[(5, 2)], g.stop[(6, 2)])
    ref_lookups: dict[int, tuple] = {}

    def refs(pi: int, ids: np.ndarray) -> np.ndarray:
        """The names of stat metadata ``ids`` of plane ``pi``, "" where there is none."""
        if pi not in ref_lookups:
            names = planes[pi].stat_names
            ref_lookups[pi] = Lookup(names, 0), objects(["", *names.values()])
        lookup, texts = ref_lookups[pi]
        return texts[lookup(ids)]

    out = {}
    named = {n for pi in used for n in planes[pi].stat_names.values()}  # a name no plane has: no pass
    nothing = np.zeros(0, np.int64)
    for c, name in enumerate(_STATS):
        sel = _last_per(owner, np.flatnonzero((col == c) & valued), keep.size) if name in named else nothing
        where = plane_of[sel] if plane_of is not None else np.full(sel.size, used[0])
        out[name] = (row_of[owner[sel]], kind[sel], raw[sel], v_start[sel], v_stop[sel], where)
    return out, refs


def _per_plane(lookups: list, used: list[int], plane_of: np.ndarray | None, ids: np.ndarray) -> np.ndarray:
    """``lookups[pi]`` applied to the ids of plane pi (``plane_of`` gives each id's plane; None:
    all are of the one plane in ``used``)."""
    if plane_of is None:
        return lookups[used[0]](ids)
    out = np.empty_like(ids)
    for pi in used:
        m = plane_of == pi
        out[m] = lookups[pi](ids[m])
    return out


def _stat_column(
    n: int,
    rows: np.ndarray,
    kind: np.ndarray,
    raw: np.ndarray,
    start: np.ndarray,
    stop: np.ndarray,
    plane_of: np.ndarray,
    buf: wire.Buf,
    refs,
):
    """One stats column: the values ProfileData gives (float, int, str), None where a row has
    no such stat, typed as pandas types a list of them."""
    if not rows.size:
        return np.full(n, None)
    if np.isin(kind, (3, 4)).all():
        fits = (kind == 4) | (raw < np.uint64(2**63))  # an int64 holds it
        if fits.all():
            vals = raw.view(np.int64)
            if rows.size == n:
                out = np.empty(n, np.int64)
            else:
                out = np.full(n, np.nan)  # ints and None: pandas makes floats and NaN
            out[rows] = vals
            return out
    values = np.empty(rows.size, object)
    for k in np.unique(kind).tolist():
        m = np.flatnonzero(kind == k)
        if k == 2:
            values[m] = raw[m].view(np.float64).tolist()
        elif k == 3:
            values[m] = raw[m].tolist()
        elif k == 4:
            values[m] = raw[m].view(np.int64).tolist()
        elif k == 7:  # a reference: the referenced stat metadata's name, "" if none
            for pi in np.unique(plane_of[m]).tolist():
                mm = m[plane_of[m] == pi]
                values[mm] = refs(pi, raw[mm].view(np.int64))
        else:  # str_value, bytes_value
            cache: dict[bytes, str] = {}
            texts = []
            for s, e in zip(start[m].tolist(), stop[m].tolist()):
                b = buf.u8[s:e].tobytes()
                t = cache.get(b)
                if t is None:
                    t = cache[b] = b.decode("utf-8", "surrogateescape")
                texts.append(t)
            values[m] = texts
    col = np.full(n, None)
    col[rows] = values
    if np.isin(kind, _STR_KINDS).all():
        return col  # pandas types an object array of str and None as it types such a list
    return col.tolist()
