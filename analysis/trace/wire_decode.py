"""The vectorised field decoder: the fields of many protobuf messages (an XSpace's events, then
their stats) decoded with numpy for all of them at once, one round per field position
(:func:`decode`), from the messages' spans in one buffer (:class:`Buf`).

Used by :mod:`.xspace_wire` (where the events lie) and :mod:`.xplane` (which fields make the
table). It follows protobuf's wire rules (the last occurrence of a field wins, a known number
with another wire type is skipped); a group-typed field, which it does not walk, raises
:class:`~.wire_schema.GroupField` so the caller reads the events again without them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis.trace.wire_schema import GroupField, WireError

_HIGH_BITS = np.uint64(0x8080808080808080)
_LOW_BITS = np.uint64(0x7F7F7F7F7F7F7F7F)


class Buf:
    """Bytes to decode, as uint8 and as the (unaligned) little-endian uint64 at every offset,
    which holds up to 8 bytes of a varint in one read."""

    def __init__(self, data: bytes):
        self.size = len(data)
        self.u8 = np.frombuffer(data, np.uint8)
        self.u64 = np.ndarray((max(self.size - 7, 0),), "<u8", buffer=data, strides=(1,))


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


# Long on purpose (a table-driven decoder): one loop over field positions, whose two short
# ways and general round all narrow the same per-message state (live, cur, end) and fill the
# same per-field tables in place. Split into functions, each round would pass all of it in
# and out, and this loop is where reading an XSpace spends its time.
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
