"""A fast reader of the serialized ``tensorflow.profiler.XSpace`` protobuf (an ``.xplane.pb``):
its planes, lines and metadata, and where each event's bytes lie.

Used by :mod:`.xplane` only, which also reads the decoder's names through this module. How, in
three steps:

1. ``google.protobuf`` (its C parser, upb) parses the file against a *view* of the schema
   (:mod:`.wire_schema`) in which ``XLine.events`` is ``repeated bytes``: the C parser
   validates the structure and finds every event, and gives the planes, lines and metadata
   maps (a few thousand objects at most).
2. Where each event lies in the file (here): the lengths of a line's events (one ``len`` per
   event, the only per-event Python step) and where the line's first event starts (a
   walk over the few outer fields) give them all, checked against the tag and length bytes
   there; a line that fails the check (events not contiguous) is copied out instead.
3. The events' fields, then their stats' fields, are decoded with numpy for all events at
   once (:func:`.wire_decode.decode`): one vectorised round per field position.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis.trace.wire_decode import Buf, Decoded, decode, first_varint_field, varints
from analysis.trace.wire_schema import GroupField, WireError, count_events, parse, payload_at, varint_at, without_groups

# the names xplane reads as wire.*: this module's, and the decoder's and schema's it hands on
__all__ = [
    "Buf",
    "Decoded",
    "GroupField",
    "Line",
    "Plane",
    "Space",
    "WireError",
    "count_events",
    "decode",
    "first_varint_field",
    "read_space",
]


def _text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


@dataclass
class Line:
    name: str
    timestamp_ns: int
    count: int  # how many events


@dataclass
class Plane:
    name: str
    lines: list[Line]
    event_names: dict[int, str]  # event metadata id -> name
    stat_names: dict[int, str]  # stat metadata id -> name
    event_display: dict[int, str] = field(default_factory=dict)  # event metadata id -> display_name, where set
    event_stats: dict[int, dict] = field(default_factory=dict)  # event metadata id -> {stat name: value}


@dataclass
class Space:
    planes: list[Plane]
    buf: Buf  # the file's bytes (and any copied-out lines)
    starts: np.ndarray  # per event, in plane, line, event order: where its bytes begin in buf
    stops: np.ndarray  # ... and end


def _stat_value(stat, stat_names: dict[int, str]):
    """An XStat's value as ProfileData gives one: float, int, str (bytes decoded), a reference
    as the referenced stat metadata's name ("" if none); None when no value is set."""
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(stat, kind)
    if kind == "ref_value":
        return stat_names.get(value, "")
    return _text(value) if isinstance(value, bytes) else value


def _event_metadata(entries, stat_names: dict[int, str], wanted: frozenset) -> tuple[dict, dict, dict]:
    """Of a plane's event metadata: {id: name}, {id: display name} where set, and
    {id: {stat name: value}} of the stats named in ``wanted`` (of two with one name the later
    wins; a stat without metadata or value is skipped, as on events). Map semantics: a later
    entry of an id replaces the earlier one whole."""
    ids = {k for k, v in stat_names.items() if v in wanted}
    keys = [e.key for e in entries]
    metas = [e.value for e in entries]
    # dict(zip(...)): a later entry of a key wins, whole; list comprehensions: the per-entry
    # Python is the reader's cost on a file of many names
    raw = dict(zip(keys, [m.name for m in metas]))
    names = dict(zip(raw, [b.decode("utf-8", "surrogateescape") for b in raw.values()]))
    shown = dict(zip(keys, [m.display_name for m in metas]))
    display = {k: b.decode("utf-8", "surrogateescape") for k, b in shown.items() if b}
    stats: dict[int, dict] = {}
    if ids:
        last = dict(zip(keys, metas))
        for key, meta in last.items():
            got = {}
            for st in meta.stats:
                if st.metadata_id in ids:
                    value = _stat_value(st, stat_names)
                    if value is not None:
                        got[stat_names[st.metadata_id]] = value
            if got:
                stats[key] = got
    return names, display, stats


def read_space(data: bytes, metadata_stats: frozenset = frozenset(), strip_groups: bool = False) -> Space:
    """The planes of a serialized XSpace and where each event's bytes are (module doc). Each
    plane's event metadata give their names, display names (where set) and the stats named in
    ``metadata_stats`` (the metadata are few: a plain loop over them). ``strip_groups``: every
    event copied out without its group-typed fields (the slow path for a file that has them)."""
    space = parse(data)
    try:
        firsts = _first_events(data, [len(p.lines) for p in space.planes])
    except (IndexError, WireError):
        firsts = None
    planes, lens, tags, extra = [], [], [], []
    extra_at = len(data)
    for pi, p in enumerate(space.planes):
        lines = []
        for li, ln in enumerate(p.lines):
            events = [without_groups(e) for e in ln.events] if strip_groups else ln.events
            lines.append(Line(_text(ln.name), ln.timestamp_ns, len(events)))
            if not events:
                continue
            n = np.fromiter(map(len, events), np.int64, len(events))
            first = firsts[pi][li] if firsts is not None and pi < len(firsts) and li < len(firsts[pi]) else -1
            hdr = 2 + (n >= 0x80) + (n >= 0x4000) + (n >= 0x200000) + (n >= 0x10000000)  # tag, length varint
            if n.max() < 0x800000000 and not strip_groups:
                at = first + np.cumsum(hdr + n) - (hdr + n) if first >= 0 else None
                if at is not None and _events_at(data, at, n, hdr):
                    lens.append(n)
                    tags.append(at)
                    continue
            # not where the walk says (or events interleaved with other fields): copy them out
            blob = b"".join(events)
            lens.append(n)
            tags.append(extra_at + np.cumsum(n) - n - hdr)
            extra.append(blob)
            extra_at += len(blob)
        stat_names = {e.key: _text(e.value.name) for e in p.stat_metadata}
        names, display, stats = _event_metadata(p.event_metadata, stat_names, metadata_stats)
        planes.append(Plane(_text(p.name), lines, names, stat_names, display, stats))
    if not lens:
        empty = np.zeros(0, np.int64)
        return Space(planes, Buf(b""), empty, empty)
    n = np.concatenate(lens)
    at = np.concatenate(tags)
    starts = at + 2 + (n >= 0x80) + (n >= 0x4000) + (n >= 0x200000) + (n >= 0x10000000)
    return Space(planes, Buf(b"".join([data, *extra]) if extra else data), starts, starts + n)


def _events_at(data: bytes, at: np.ndarray, n: np.ndarray, hdr: np.ndarray) -> bool:
    """Whether events of lengths ``n`` lie at ``at`` (tag, length, payload each) in data."""
    if int(at[-1] + hdr[-1] + n[-1]) > len(data):
        return False
    buf = Buf(data)
    if not (buf.u8[at] == 0x22).all():  # field 4, length-delimited
        return False
    try:
        length, after = varints(buf, at + 1)
    except IndexError:  # a length byte that runs to the end of the data
        return False
    return bool((length.astype(np.int64) == n).all() and (after == at + hdr).all())


def _walk(data: bytes, i: int, end: int):
    """(field number, wire type, tag position, payload start, payload end) of each field."""
    while i < end:
        tag, j = varint_at(data, i)
        j, k = payload_at(data, tag & 7, j)  # a group: WireError
        yield tag >> 3, tag & 7, i, j, k
        i = k
    if i != end:
        raise WireError("field runs past the end of its message")


def _first_events(data: bytes, line_counts: list[int]) -> list[list[int]]:
    """Per plane, per line: where (the tag of) the line's first event is, -1 if none. A
    plane's walk ends at its last line (``line_counts``, from the parse): the metadata maps
    after the lines can be long."""
    out = []
    planes = (f for f in _walk(data, 0, len(data)) if f[:2] == (1, 2))
    for count, (_, _, _, s, e) in zip(line_counts, planes):
        lines = []
        if count:
            for n2, w2, _, s2, e2 in _walk(data, s, e):
                if (n2, w2) != (3, 2):
                    continue
                first = -1
                for n3, w3, tag3, _, _ in _walk(data, s2, e2):
                    if (n3, w3) == (4, 2):
                        first = tag3
                        break
                lines.append(first)
                if len(lines) == count:
                    break
        out.append(lines)
    return out
