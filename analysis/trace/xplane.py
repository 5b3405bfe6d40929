"""The xplane reader: an ``.xplane.pb`` file -> a table of events.

The seam: :func:`read_xplane` is the only code that touches the profiler's format (with its
decoder, :mod:`.xspace_wire`); it yields one row per event. Everything after it (:mod:`.ops`,
:mod:`.overlap`) works on that table and is tested with hand-built tables in the shapes CPU, TPU
and GPU profiles have:

* CPU: plane ``/host:CPU``, lines ``tf_XLAPjRtCpuClient/<thread>``, op events named after
  the HLO instruction with stats ``hlo_op``, ``hlo_module``, ``program_id``, ``device_ordinal``.
* TPU (seen in a real v6e trace): planes ``/device:TPU:N``, lines ``XLA Modules`` (one event
  per module execution, named ``jit_f(<program_id>)``), ``XLA Ops`` and ``Async XLA Ops``. An
  op event's metadata ``name`` is the whole HLO instruction text (``%fusion.3 = bf16[...]
  fusion(...), kind=kOutput, ...``), its metadata ``display_name`` the instruction name
  (``fusion.3``); per-op facts (``hlo_category``, ``program_id``, ``tf_op``, ``flops``) are
  stats on the *metadata*, and the events carry ``device_offset_ps``/``device_duration_ps``.
  No ``hlo_op``/``hlo_module`` stat.
* GPU: planes ``/device:GPU:N``, one line per stream, kernel events (``nccl...``, cuBLAS,
  ROCm ``*.kd``) carrying ``hlo_op`` / ``hlo_module`` / ``program_id`` stats. One HLO op may
  launch several kernels (seen on an H100: a cuBLAS matmul is a ``Memset`` then the GEMM
  kernel); they share a ``scope_range_id``, which groups them into one execution.

The columns (:data:`TABLE_COLUMNS`: :data:`EVENT_COLUMNS`, then :data:`XPROF_COLUMNS`):

* ``plane``, ``line``, ``name`` (the event metadata's name), as ProfileData gives them.
* ``start_ns``, ``duration_ns``: the event's timespan as XProf reads it (tsl
  ``GetEventTimespan``): where the event has both ``device_offset_ps`` and
  ``device_duration_ps`` stats with integer values, those (the offset is absolute, not from the
  line's timestamp); else the line's timestamp plus the event's offset, and its duration. Whole
  ns, truncated toward zero as ProfileData truncates.
* ``hlo_op``, ``hlo_module``, ``device_ordinal``, ``scope_range_id``: the event's stats of
  those names (None where absent), as ProfileData gives them.
* ``display_name``: the event metadata's ``display_name`` (None where unset): on TPU the HLO
  instruction name. XProf names the op by it where set (``SetOpMetadataFromHloEventMetadata``).
* ``program_id``: the module's program id as decimal text (a uint64 that may not fit an
  int64), from the event's stat, else its metadata's; None where neither has one.
* ``hlo_category``: XProf's op category (``all-gather``, ``all-reduce fusion``,
  ``convolution``, ...), from the event's stat, else its metadata's; None where neither has one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.trace import xspace_wire as wire

EVENT_COLUMNS = [
    "plane",
    "line",
    "name",
    "start_ns",
    "duration_ns",
    "hlo_op",
    "hlo_module",
    "device_ordinal",
    "scope_range_id",
]
# What XProf reads and ProfileData does not show; the table's last columns. Apart from
# EVENT_COLUMNS so that tables built by hand in the older shape stay valid input to .ops.
XPROF_COLUMNS = ["display_name", "program_id", "hlo_category"]
TABLE_COLUMNS = EVENT_COLUMNS + XPROF_COLUMNS
_PLAIN_STATS = EVENT_COLUMNS[5:9]  # event stats that are columns as they are
_TEXT_STATS = ("program_id", "hlo_category")  # event stat, else metadata stat; as text
_DEVICE_SPAN = ("device_offset_ps", "device_duration_ps")
_STATS = [*_PLAIN_STATS, *_TEXT_STATS, *_DEVICE_SPAN]  # the event stats decoded
_METADATA_STATS = frozenset(_TEXT_STATS)


class TraceError(ValueError):
    """A trace file that cannot be read (missing, truncated, not an xplane)."""


def read_xplane(path: str | Path, candidates_only: bool = True) -> pd.DataFrame:
    """The events of an xplane file as a DataFrame with :data:`TABLE_COLUMNS` (module doc).

    With ``candidates_only`` (the default) it keeps just the events that can be device ops:
    everything on ``/device:*`` planes, and on host planes the events named like an HLO
    instruction (no spaces, colons or parentheses, unlike runtime bookkeeping such as
    ``Wait: ...`` or ``ThunkExecutor::Execute``); the stats columns are filled for those
    only. Pass ``candidates_only=False`` for every event of the file.

    The file is the serialized ``XSpace`` protobuf; :mod:`.xspace_wire` decodes it (the C
    protobuf parser for planes, lines and metadata, numpy for the events' fields, all events
    at once). An event's name lives in its plane's metadata, so which events are candidates
    is decided per metadata entry, and only those events' stats are decoded. Its
    :data:`EVENT_COLUMNS` are exactly what ``jax.profiler.ProfileData`` gives
    (``tests/xplane_reference.py`` reads through it: the reference the tests compare with), with
    the device timespan preferred as XProf does: ``start_ns`` is the line's timestamp plus
    the event's offset in whole ns, ``duration_ns`` whole ns, a stat whose metadata is
    missing or that has no value is skipped, a reference stat is the referenced metadata's
    name, and of two stats with one name the later wins. :data:`XPROF_COLUMNS` come from the
    event metadata, which ProfileData does not show.

    Where it is laxer than ProfileData: bytes inside an event that is not read (a host event
    that is no candidate) are not checked, and a name that is not UTF-8 is decoded with
    ``surrogateescape`` rather than refused. It needs ``google.protobuf`` (a dependency of
    xprof, which tensorboard-plugin-profile installs).
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{path}: not a readable xplane trace ({exc})") from exc
    try:
        try:
            return _table(wire.read_space(data, _METADATA_STATS), candidates_only)
        except wire.GroupField:  # rare: read again, the groups taken out as protobuf skips them
            return _table(wire.read_space(data, _METADATA_STATS, strip_groups=True), candidates_only)
    except (wire.WireError, IndexError) as exc:  # IndexError: a field running off the end
        raise TraceError(f"{path}: not a readable xplane trace ({exc})") from exc


def count_events(path: str | Path) -> int:
    """How many events the file holds (for throughput figures)."""
    path = Path(path)
    try:
        return wire.count_events(path.read_bytes())
    except (OSError, wire.WireError) as exc:
        raise TraceError(f"{path}: not a readable xplane trace ({exc})") from exc


def _is_candidate_name(name: str) -> bool:
    return not (" " in name or ":" in name or "(" in name)


class _Lookup:
    """A metadata map (id -> name) as arrays, to look up many ids at once: ``code_of`` turns a
    name into the integer the lookup gives (default: the name's position in the map, from
    1), ``missing`` is what an id without an entry gives. Ids are small counters in practice:
    then a table indexed by id, else a binary search."""

    def __init__(self, names: dict[int, str], missing: int, code_of=None):
        keys = np.fromiter(names, np.int64)
        if code_of is None:
            codes = np.arange(1, len(names) + 1)
        else:
            codes = np.fromiter(map(code_of, names.values()), np.int64)
        self.missing = missing
        self.table = None
        # a table only while its size stays within a few times the number of ids: a file may
        # hold an id near 2**63, for which a table would not fit in memory
        if keys.size and 0 <= keys.min() and keys.max() < 4 * keys.size + 4096:
            self.table = np.full(int(keys.max()) + 2, missing)  # the last entry: not a key
            self.table[keys] = codes
        order = np.argsort(keys)
        self.keys, self.codes = keys[order], codes[order]

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        if self.table is not None:  # ids past the table (negative ones too, as uint64) read its last entry
            return self.table[np.minimum(ids.view(np.uint64), np.uint64(self.table.size - 1))]
        if not self.keys.size:
            return np.full(ids.shape, self.missing)
        pos = np.minimum(np.searchsorted(self.keys, ids), self.keys.size - 1)
        return np.where(self.keys[pos] == ids, self.codes[pos], self.missing)


def _last_per(owner: np.ndarray, sel: np.ndarray, n: int) -> np.ndarray:
    """Of the rows ``sel`` (in wire order), the last one of each ``owner``: of two stats with
    one name, the later wins (as in a dict built from them)."""
    if sel.size and np.bincount(owner[sel], minlength=n).max() > 1:
        rev = sel[::-1]
        _, first = np.unique(owner[rev], return_index=True)
        sel = np.sort(rev[first])
    return sel


def _objects(items: list) -> np.ndarray:
    """``items`` as an object array: a str stays a Python str (``np.array`` of strs would make
    fixed-width numpy text)."""
    out = np.empty(len(items), object)
    out[:] = items
    return out


def _by_plane(lookups: list, cuts: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``lookups[pi]`` applied to the ids of plane pi, ``ids[cuts[pi]:cuts[pi + 1]]`` (the
    items are in plane order)."""
    return np.concatenate([look(ids[lo:hi]) for look, lo, hi in zip(lookups, cuts[:-1], cuts[1:])])


def _trunc_div(v: np.ndarray, d: int) -> np.ndarray:
    """C++ integer division (toward zero) of int64s. Floor division, then one up where a
    negative value left a remainder: ``abs`` first overflowed at the minimum int64."""
    q = v // d
    return q + ((v < 0) & (q * d != v))


# XStat's value oneof, (field, wire type): double, uint64, int64, str, bytes, ref
_VALUE_FIELDS = ((2, 1), (3, 0), (4, 0), (5, 2), (6, 2), (7, 0))
_STR_KINDS = (5, 6, 7)  # a str in the table (ProfileData gives bytes_value as str too)


def _table(space: wire.Space, candidates_only: bool) -> pd.DataFrame:
    planes, buf = space.planes, space.buf
    lines = [(pi, ln) for pi, p in enumerate(planes) for ln in p.lines]
    counts = np.fromiter((ln.count for _, ln in lines), np.int64)
    n = int(counts.sum())
    if n == 0:
        return _frame({c: [] for c in TABLE_COLUMNS})
    line_plane = np.fromiter((pi for pi, _ in lines), np.int64)
    ev_line = np.repeat(np.arange(len(lines)), counts)
    bounds = np.cumsum([0, *(sum(ln.count for ln in p.lines) for p in planes)])  # plane pi: bounds[pi]:bounds[pi + 1]

    # Event names, as codes into `names` (0: "", the name ProfileData gives an event whose
    # metadata is missing), from each plane's metadata; candidacy per name and plane.
    code_of: dict[str, int] = {"": 0}
    event_lookup = [_Lookup(p.event_names, 0, lambda name: code_of.setdefault(name, len(code_of))) for p in planes]
    names = list(code_of)
    candidate_name = np.fromiter(map(_is_candidate_name, names), bool)
    on_device = np.fromiter((p.name.startswith("/device:") for p in planes), bool)

    def resolve(ev: np.ndarray, mids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(name code, candidate?) of the events ``ev`` (ascending) with metadata ids ``mids``."""
        cuts = np.searchsorted(ev, bounds)
        codes = _by_plane(event_lookup, cuts, mids)
        return codes, candidate_name[codes] | np.repeat(on_device, np.diff(cuts))

    if candidates_only:
        # Most events are not candidates: tell them by their metadata id alone, which is the
        # first field of an event as every writer lays it out; the rest are decoded.
        first, has_first = wire.first_varint_field(buf, space.starts, space.stops, 0x08)
        _, cand = resolve(np.arange(n), first.view(np.int64))
        keep = np.flatnonzero(cand | ~has_first)
    else:
        keep = np.arange(n)
    d = wire.decode(
        buf, space.starts[keep], space.stops[keep], ((1, 0), (2, 0), (3, 0), (5, 0)), repeated=(4, 2), peek=0x08
    )
    codes, cand = resolve(keep, d.value[(1, 0)].view(np.int64))
    # offset_ps and num_occurrences are a oneof: with the latter set, the offset reads as 0
    offset = np.where(d.seen[(2, 0)] > d.seen[(5, 0)], d.value[(2, 0)].view(np.int64), 0)
    duration = d.value[(3, 0)].view(np.int64)
    rows = np.flatnonzero(cand) if candidates_only else np.arange(keep.size)
    if rows.size == 0:  # no event kept: the same empty table as a file without events
        return _frame({c: [] for c in TABLE_COLUMNS})
    ev = keep[rows]
    kept_line = ev_line[ev]
    line_ts = np.fromiter((ln.timestamp_ns for _, ln in lines), np.int64)
    cols = {  # whole ns as int64 here; _frame makes the times float64, as ProfileData gives them
        "plane": _objects([p.name for p in planes])[line_plane[kept_line]],
        "line": _objects([ln.name for _, ln in lines])[kept_line],
        "name": _objects(names)[codes[rows]],
        "start_ns": _trunc_div(offset[rows], 1000) + line_ts[kept_line],
        "duration_ns": _trunc_div(duration[rows], 1000),
    }
    row_of = np.zeros(keep.size, np.int64)  # read only at the kept rows
    row_of[rows] = np.arange(rows.size)
    parts, refs = _stats(space, d, keep, cand, bounds, row_of)
    for name in _PLAIN_STATS:
        cols[name] = _stat_column(rows.size, *parts[name], buf, refs)
    _device_span(cols, parts)
    row_plane = line_plane[kept_line]
    row_mid = d.value[(1, 0)].view(np.int64)[rows]
    cols["display_name"] = _from_metadata(planes, row_plane, row_mid, lambda p: p.event_display)
    for name in _TEXT_STATS:
        col = _from_metadata(planes, row_plane, row_mid, lambda p, name=name: _named(p.event_stats, name))
        _text_into(col, parts[name], buf, refs)  # the event's own stat first, as XProf's visitor
        cols[name] = col
    return _frame(cols)


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
        out[m] = _objects([None, *texts.values()])[_Lookup(texts, 0)(row_mid[m])]
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
    cols["start_ns"][both] = _trunc_div(ps[0][both], 1000)
    cols["duration_ns"][both] = _trunc_div(ps[1][both], 1000)


def _text_into(out: np.ndarray, parts: tuple, buf: wire.Buf, refs) -> None:
    """Write a stats column as text (ints in decimal) into ``out`` at the rows that have it."""
    rows, kind, raw = parts[:3]
    for signed in (False, True):  # few distinct values (program ids): the text of each once
        m = np.flatnonzero(kind == (4 if signed else 3))
        if m.size:
            uniq, inv = np.unique(raw[m], return_inverse=True)
            texts = [str(v - (1 << 64) if signed and v >= 1 << 63 else v) for v in uniq.tolist()]
            out[rows[m]] = _objects(texts)[inv.ravel()]
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
    stat_lookup = [_Lookup(p.stat_names, -1, lambda s: column.get(s, -1)) for p in planes]
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
            ref_lookups[pi] = _Lookup(names, 0), _objects(["", *names.values()])
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


def _frame(cols: dict) -> pd.DataFrame:
    df = pd.DataFrame(cols)
    df["start_ns"] = df["start_ns"].astype("float64")
    df["duration_ns"] = df["duration_ns"].astype("float64")
    return df
