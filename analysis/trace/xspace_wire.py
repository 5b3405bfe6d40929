"""A fast reader of the serialized ``tensorflow.profiler.XSpace`` protobuf (an ``.xplane.pb``).

Used by :mod:`.xplane` only. The layout (xplane.proto)::

    XSpace   { repeated XPlane planes = 1; ... }
    XPlane   { int64 id = 1; string name = 2; repeated XLine lines = 3;
               map<int64, XEventMetadata> event_metadata = 4; map<int64, XStatMetadata> stat_metadata = 5; ... }
    XLine    { int64 id = 1; string name = 2; int64 timestamp_ns = 3; repeated XEvent events = 4; ... }
    XEvent   { int64 metadata_id = 1; oneof { int64 offset_ps = 2; int64 num_occurrences = 5; }
               int64 duration_ps = 3; repeated XStat stats = 4; }
    XStat    { int64 metadata_id = 1; oneof value { double double_value = 2; uint64 uint64_value = 3;
               int64 int64_value = 4; string str_value = 5; bytes bytes_value = 6; uint64 ref_value = 7; } }
    X*Metadata { int64 id = 1; string name = 2; ... }

How, in three steps:

1. ``google.protobuf`` (its C parser, upb) parses the file against a *view* of that schema
   built here in code (the wheels ship no ``xplane_pb2``) in which ``XLine.events`` is
   ``repeated bytes``: the C parser validates the structure and finds every event, and
   gives the planes, lines and metadata maps (a few thousand objects at most).
2. Where each event lies in the file: the lengths of a line's events (one ``len`` per
   event, the only per-event Python step) and where the line's first event starts (a
   walk over the few outer fields) give them all, checked against the tag and length bytes
   there; a line that fails the check (events not contiguous) is copied out instead.
3. The events' fields, then their stats' fields, are decoded with numpy for all events at
   once (:func:`decode`): one vectorised round per field position.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_HIGH_BITS = np.uint64(0x8080808080808080)
_LOW_BITS = np.uint64(0x7F7F7F7F7F7F7F7F)


class WireError(ValueError):
    """Bytes that are not a well-formed XSpace."""


class GroupField(WireError):
    """An event or stat holds a group-typed field: protobuf skips it as an unknown field, so
    the events are read again with their groups taken out (:func:`without_groups`)."""


def without_groups(msg: bytes, depth: int = 0) -> bytes:
    """``msg`` (an XEvent, or with ``depth`` 1 an XStat) with every group-typed field removed,
    as protobuf skips them; an event's stats (field 4) are cleaned too. WireError on a group
    that does not end, or an end without a start."""
    out, i, end = bytearray(), 0, len(msg)
    while i < end:
        tag, j = _varint(msg, i)
        wire = tag & 7
        if wire == 3:  # skip to the matching end-group, groups nested inside included
            open_, k = [tag >> 3], j  # the field numbers of the groups not yet ended
            while open_:
                if k >= end:
                    raise WireError("a group that does not end")
                t, k = _varint(msg, k)
                w = t & 7
                if w == 0:
                    _, k = _varint(msg, k)
                elif w == 2:
                    n, k = _varint(msg, k)
                    k += n
                elif w in (1, 5):
                    k += 8 if w == 1 else 4
                elif w == 3:
                    open_.append(t >> 3)
                elif w == 4:
                    if open_.pop() != t >> 3:  # protobuf refuses an end of another group
                        raise WireError("a group ended by another field's end-group")
                else:
                    raise WireError("unsupported wire type in a group")
            i = k
            continue
        if wire == 4:
            raise WireError("an end-group without its start")
        if wire == 0:
            _, k = _varint(msg, j)
        elif wire == 2:
            n, k = _varint(msg, j)
            k += n
        elif wire in (1, 5):
            k = j + (8 if wire == 1 else 4)
        else:
            raise WireError("unsupported wire type")
        if k > end:
            raise WireError("field runs past the end of its message")
        if wire == 2 and tag >> 3 == 4 and depth == 0:  # a stat: its groups go too
            stat = without_groups(msg[k - n : k], 1)
            out += _encode_varint(tag) + _encode_varint(len(stat)) + stat
        else:
            out += msg[i:k]
        i = k
    return bytes(out)


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _message_classes():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(
        name="shardlab/xspace_view.proto", package="shardlab.xspace_view", syntax="proto3"
    )

    def message(name, *fields):
        m = fdp.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = f".shardlab.xspace_view.{type_name}"

    one, many = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    message("Space", ("planes", 1, F.TYPE_MESSAGE, many, "Plane"))
    message(
        "Plane",
        ("id", 1, F.TYPE_INT64, one, None),
        ("name", 2, F.TYPE_BYTES, one, None),
        ("lines", 3, F.TYPE_MESSAGE, many, "Line"),
        ("event_metadata", 4, F.TYPE_MESSAGE, many, "MetadataEntry"),
        ("stat_metadata", 5, F.TYPE_MESSAGE, many, "MetadataEntry"),
    )
    # The two metadata maps as their wire form: repeated {key, value} entries (last one wins).
    message("MetadataEntry", ("key", 1, F.TYPE_INT64, one, None), ("value", 2, F.TYPE_MESSAGE, one, "Metadata"))
    # XEventMetadata's display_name (4) and stats (5) too (XStatMetadata has neither: both empty there)
    message(
        "Metadata",
        ("id", 1, F.TYPE_INT64, one, None),
        ("name", 2, F.TYPE_BYTES, one, None),
        ("display_name", 4, F.TYPE_BYTES, one, None),
        ("stats", 5, F.TYPE_MESSAGE, many, "Stat"),
    )
    message(
        "Stat",
        ("metadata_id", 1, F.TYPE_INT64, one, None),
        ("double_value", 2, F.TYPE_DOUBLE, one, None),
        ("uint64_value", 3, F.TYPE_UINT64, one, None),
        ("int64_value", 4, F.TYPE_INT64, one, None),
        ("str_value", 5, F.TYPE_BYTES, one, None),
        ("bytes_value", 6, F.TYPE_BYTES, one, None),
        ("ref_value", 7, F.TYPE_UINT64, one, None),
    )
    stat = fdp.message_type[-1]
    stat.oneof_decl.add(name="value")
    for f in stat.field[1:]:
        f.oneof_index = 0
    message(
        "Line",
        ("id", 1, F.TYPE_INT64, one, None),
        ("name", 2, F.TYPE_BYTES, one, None),
        ("timestamp_ns", 3, F.TYPE_INT64, one, None),
        ("events", 4, F.TYPE_BYTES, many, None),
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shardlab.xspace_view.Space"))


_SPACE = None


def _space_class():
    global _SPACE
    if _SPACE is None:
        _SPACE = _message_classes()
    return _SPACE


def _text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


class Buf:
    """Bytes to decode, as uint8 and as the (unaligned) little-endian uint64 at every offset,
    which holds up to 8 bytes of a varint in one read."""

    def __init__(self, data: bytes):
        self.size = len(data)
        self.u8 = np.frombuffer(data, np.uint8)
        self.u64 = np.ndarray((max(self.size - 7, 0),), "<u8", buffer=data, strides=(1,))


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


def _parse(data: bytes):
    from google.protobuf.message import DecodeError

    space = _space_class()()
    try:
        space.ParseFromString(data)
    except DecodeError as exc:
        raise WireError(str(exc)) from exc
    return space


def count_events(data: bytes) -> int:
    """How many events a serialized XSpace holds."""
    return sum(len(ln.events) for p in _parse(data).planes for ln in p.lines)


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
    space = _parse(data)
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


def _varint(data: bytes, i: int) -> tuple[int, int]:
    b = data[i]
    if b < 0x80:
        return b, i + 1
    value, shift = b & 0x7F, 7
    while True:
        i += 1
        b = data[i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i + 1
        shift += 7
        if shift > 63:
            raise WireError("varint longer than 10 bytes")


def _walk(data: bytes, i: int, end: int):
    """(field number, wire type, tag position, payload start, payload end) of each field."""
    while i < end:
        tag, j = _varint(data, i)
        wire_type = tag & 7
        if wire_type == 0:
            _, k = _varint(data, j)
            yield tag >> 3, 0, i, j, k
        elif wire_type == 2:
            n, j = _varint(data, j)
            k = j + n
            yield tag >> 3, 2, i, j, k
        elif wire_type in (1, 5):
            k = j + (8 if wire_type == 1 else 4)
            yield tag >> 3, wire_type, i, j, k
        else:
            raise WireError("group wire type")
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


def varints(buf: Buf, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The base-128 varints starting at ``pos``: (values as uint64, the positions after
    them). One byte: one gather; up to 8 bytes: one 8-byte read, then bit arithmetic; longer
    (negative int64s): byte by byte. Reading past the data raises IndexError."""
    b = buf.u8[pos]
    val = (b & 0x7F).astype(np.uint64)
    end = pos + 1
    idx = np.flatnonzero(b & 0x80)
    if not idx.size:
        return val, end
    p = pos[idx]
    word = idx[p < buf.u64.size]
    w = buf.u64[pos[word]]
    stop = ~w & _HIGH_BITS  # the top bit of each byte that ends the varint
    short = stop != 0
    word, w, stop = word[short], w[short], stop[short]
    low = stop & (~stop + np.uint64(1))  # the first such byte's top bit
    x = w & ((low << np.uint64(1)) - np.uint64(1)) & _LOW_BITS  # its 7-bit groups, then pack them:
    x = (x & np.uint64(0x007F007F007F007F)) | ((x & np.uint64(0x7F007F007F007F00)) >> np.uint64(1))
    x = (x & np.uint64(0x00003FFF00003FFF)) | ((x & np.uint64(0x3FFF00003FFF0000)) >> np.uint64(2))
    x = (x & np.uint64(0x000000000FFFFFFF)) | ((x & np.uint64(0x0FFFFFFF00000000)) >> np.uint64(4))
    val[word] = x
    end[word] = pos[word] + (np.log2(low.astype(np.float64)).astype(np.int64) + 1) // 8
    if word.size < idx.size:
        rest = np.setdiff1d(idx, word, assume_unique=True)
        val[rest], end[rest] = _varints_bytewise(buf.u8, pos[rest])
    return val, end


def _varints_bytewise(u8: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    b = u8[pos]
    val = (b & 0x7F).astype(np.uint64)
    end = pos + 1
    idx = np.flatnonzero(b & 0x80)
    shift = 7
    while idx.size:
        if shift > 63:
            raise WireError("varint longer than 10 bytes")
        b = u8[end[idx]]
        val[idx] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        end[idx] += 1
        idx = idx[(b & 0x80) != 0]
        shift += 7
    return val, end


@dataclass
class Decoded:
    """Fields of many messages (see :func:`decode`). Per message, for each wanted field
    ``(number, wire type)``: ``value`` (the varint, or the fixed64's bits, as uint64; for a
    length-delimited field ``start``/``stop`` of its payload), and ``seen``: 0 if absent,
    else 1 + the position of its last occurrence among the message's fields (so the member of
    a oneof that is set is the one seen last). The repeated field: ``rep_msg``, ``rep_start``,
    ``rep_stop``, one row per occurrence, each message's in wire order, and with ``peek``,
    :func:`first_varint_field` of each: ``rep_first``, ``rep_has_first``."""

    value: dict
    start: dict
    stop: dict
    seen: dict
    rep_msg: np.ndarray
    rep_start: np.ndarray
    rep_stop: np.ndarray
    rep_first: np.ndarray | None = None
    rep_has_first: np.ndarray | None = None
    hit: set = field(default_factory=set)  # the wanted fields that occur at all


def decode(
    buf: Buf,
    starts: np.ndarray,
    stops: np.ndarray,
    wanted: tuple,
    repeated: tuple | None = None,
    peek: int | None = None,
) -> Decoded:
    """The fields ``wanted`` and the occurrences of field ``repeated`` (``(number, wire
    type)`` pairs) of the messages ``buf[starts[i]:stops[i]]``, all at once: one round per
    field position, each vectorised over the messages that have one more field. Other fields
    (unknown ones, or a known number with another wire type, as protobuf treats them) are
    skipped. Protobuf's rule that the last occurrence of a field wins holds because each
    round overwrites the earlier ones.

    A round in which every message's next field is the repeated one, with a one-byte length
    (an event's stats, after its few scalars), takes a short way: tag and length bytes only.
    ``peek``: also read the first field of each occurrence of the repeated field (a stat's
    metadata id, tag 0x08), while its bytes are at hand."""
    m = starts.size
    value = {k: np.zeros(m, np.uint64) for k in wanted}
    fstart = {k: np.zeros(m, np.int64) for k in wanted if k[1] == 2}
    fstop = {k: np.zeros(m, np.int64) for k in wanted if k[1] == 2}
    seen = {k: np.zeros(m, np.int32) for k in wanted}
    tags = [(k, np.uint64(k[0] << 3 | k[1])) for k in wanted]
    rep_tag = np.uint64(repeated[0] << 3 | repeated[1]) if repeated is not None else None
    reps: list[tuple] = []
    hit_keys: set = set()
    limit = buf.size
    if m and (int(stops.max()) > limit or bool((starts > stops).any())):
        raise WireError("message runs past the end of the data")
    live = np.flatnonzero(starts < stops)
    cur = starts[live].astype(np.int64)
    end = stops[live].astype(np.int64)
    rnd = 0
    short_tag = int(rep_tag) if rep_tag is not None and rep_tag < 0x80 else None

    def record(msgs, ps, pe):
        if peek is None:
            reps.append((msgs, ps, pe))
        else:
            reps.append((msgs, ps, pe, *first_varint_field(buf, ps, pe, peek)))

    while live.size:
        rnd += 1
        b = buf.u8[cur]
        if b.max() < 0x80:  # one-byte tags (field numbers up to 15): the short ways
            uniform = bool((b == b[0]).all())
            if uniform and b[0] == short_tag:
                n = buf.u8[cur + 1]
                if not (n & 0x80).any():  # stats of up to 127 bytes: tag and length bytes only
                    ps = cur + 2
                    cur = ps + n
                    if (cur > end).any():
                        raise WireError("field runs past the end of its message")
                    record(live, ps, cur)
                    more = cur < end
                    if not more.all():
                        live, cur, end = live[more], cur[more], end[more]
                    continue
            elif b.min() >= 8 and not (b & 7).any():  # varints only
                val, cur = varints(buf, cur + 1)
                if (cur > end).any():
                    raise WireError("field runs past the end of its message")
                for key, t in tags:
                    if key[1] != 0:
                        continue
                    if uniform:
                        if t != b[0]:
                            continue
                        msgs, v = live, val
                    else:
                        hit = np.flatnonzero(b == t)
                        msgs, v = live[hit], val[hit]
                    value[key][msgs] = v
                    seen[key][msgs] = rnd
                    hit_keys.add(key)
                more = cur < end
                if not more.all():
                    live, cur, end = live[more], cur[more], end[more]
                continue
        tag, cur = varints(buf, cur)
        wire = (tag & np.uint64(7)).astype(np.intp)
        count = np.bincount(wire, minlength=8)
        if count[3] or count[4]:
            raise GroupField("a group-typed field (wire type 3/4)")
        if count[6] or count[7] or bool((tag < np.uint64(8)).any()):
            raise WireError("unsupported wire type or field number 0")
        val = np.zeros(live.size, np.uint64)
        pstart = cur.copy() if count[2] else cur
        if count[0] == live.size:
            val, cur = varints(buf, cur)
        elif count[0]:
            w0 = np.flatnonzero(wire == 0)
            val[w0], cur[w0] = varints(buf, cur[w0])
        if count[2]:
            w2 = slice(None) if count[2] == live.size else np.flatnonzero(wire == 2)
            n, p = varints(buf, cur[w2])
            if (n > np.uint64(limit)).any():
                raise WireError("length past the end of the data")
            pstart[w2] = p
            cur[w2] = p + n.astype(np.int64)
        for wt, width in ((1, 8), (5, 4)):
            if count[wt]:
                w = np.flatnonzero(wire == wt)
                p = cur[w]
                if width == 8 and int(p.max()) < buf.u64.size:
                    val[w] = buf.u64[p]
                else:
                    raw = buf.u8[p[:, None] + np.arange(width)].astype(np.uint64)
                    val[w] = (raw << (np.arange(width, dtype=np.uint64) * np.uint64(8))).sum(axis=1, dtype=np.uint64)
                cur[w] = p + width
        if (cur > end).any():
            raise WireError("field runs past the end of its message")
        for key, t in tags:
            hit = np.flatnonzero(tag == t)
            if not hit.size:
                continue
            msgs = live[hit]
            value[key][msgs] = val[hit]
            seen[key][msgs] = rnd
            hit_keys.add(key)
            if key[1] == 2:
                fstart[key][msgs] = pstart[hit]
                fstop[key][msgs] = cur[hit]
        if rep_tag is not None:
            hit = np.flatnonzero(tag == rep_tag)
            if hit.size:
                record(live[hit], pstart[hit], cur[hit])
        more = cur < end
        if not more.all():
            live, cur, end = live[more], cur[more], end[more]
    if reps:
        cols = [np.concatenate(x) for x in zip(*reps)]
    else:
        empty = np.zeros(0, np.int64)
        cols = [empty, empty, empty] + ([empty.astype(np.uint64), empty.astype(bool)] if peek is not None else [])
    return Decoded(value, fstart, fstop, seen, *cols, hit=hit_keys)


def first_varint_field(buf: Buf, starts: np.ndarray, stops: np.ndarray, tag: int) -> tuple[np.ndarray, np.ndarray]:
    """The value of a message's first field where that field is the varint with wire tag
    ``tag`` (the usual layout: writers put fields in number order), and a mask of the messages
    where it is (the others need :func:`decode`). One 8-byte read per message gives the tag
    and a varint of up to two bytes; longer ones are read again."""
    n = starts.size
    if not n or not buf.size:
        return np.zeros(n, np.uint64), np.zeros(n, bool)
    room = int(starts.max()) < buf.u64.size  # 8 bytes to read at every start
    if room:
        lo = buf.u64[starts].astype(np.uint32)  # the first 4 bytes
    else:
        lo = np.zeros(n, np.uint32)
        r = np.flatnonzero(starts < buf.u64.size)
        lo[r] = buf.u64[starts[r]].astype(np.uint32)
    nonempty = stops > starts
    has = (lo & 0xFF) == tag
    has &= nonempty
    b1 = (lo >> 8) & 0xFF
    one = b1 < 0x80
    val = np.where(one, b1, (b1 & 0x7F) | ((lo >> 9) & 0x7F80)).astype(np.uint64)
    size = 2 - one
    longer = ~one & ((lo & 0x800000) != 0)  # the second byte has a continuation bit too
    if not room:  # the last 7 bytes of the data: byte by byte
        tail = np.flatnonzero((starts >= buf.u64.size) & nonempty)
        has[tail] = buf.u8[starts[tail]] == tag
        longer[tail] = True
    idx = np.flatnonzero(longer & has)
    if idx.size:
        val[idx], after = varints(buf, starts[idx] + 1)
        size[idx] = after - starts[idx] - 1
    if (has & (starts + 1 + size > stops)).any():
        raise WireError("field runs past the end of its message")
    val[~has] = 0
    return val, has
