"""Protobuf written byte by byte, for the tests that build XSpaces (traces) by hand.

Written here apart from ``analysis.trace.xspace_wire`` on purpose: what the tests feed the
reader must not share code with the reader, or a bug in one would hide in the other.
"""

from __future__ import annotations


def varint(n: int) -> bytes:
    """Base 128, least significant group first; a negative int64 as ten bytes of two's complement."""
    n &= (1 << 64) - 1
    out = bytearray()
    while n > 0x7F:
        out.append(0x80 | n & 0x7F)
        n >>= 7
    out.append(n)
    return bytes(out)


def varint_field(number: int, value: int) -> bytes:
    """Field ``number`` as a varint (wire type 0)."""
    return varint(number << 3) + varint(value)


def bytes_field(number: int, payload: bytes | str) -> bytes:
    """Field ``number`` length-delimited (wire type 2); a str as its UTF-8."""
    if isinstance(payload, str):
        payload = payload.encode()
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def field(number: int, value: int | bytes | str) -> bytes:
    """Field ``number``: a varint for an int, length-delimited for str or bytes."""
    return varint_field(number, value) if isinstance(value, int) else bytes_field(number, value)


def meta_entry(key: int, name: str, stats: list[bytes] = ()) -> bytes:
    """A plane's metadata map entry {key, value: X*Metadata{id, name, stats}}."""
    meta = field(1, key) + field(2, name) + b"".join(bytes_field(5, s) for s in stats)
    return field(1, key) + bytes_field(2, meta)


def plane_field(name: str, event_metadata: list[bytes], stat_metadata: list[bytes], lines: bytes = b"") -> bytes:
    """One XPlane{name, lines, event_metadata (4), stat_metadata (5)} as an XSpace's field 1."""
    body = field(2, name) + lines + b"".join(bytes_field(4, e) for e in event_metadata)
    return bytes_field(1, body + b"".join(bytes_field(5, s) for s in stat_metadata))


def xevent(mid: int, offset_ps: int, duration_ps: int, stats=(), mid_last: bool = False) -> bytes:
    """An XEvent: metadata_id (last, with ``mid_last``, as no writer lays it out), offset,
    duration, then its XStats (each already encoded)."""
    head = varint_field(2, offset_ps) + varint_field(3, duration_ps)
    body = head + varint_field(1, mid) if mid_last else varint_field(1, mid) + head
    return body + b"".join(bytes_field(4, s) for s in stats)


def xplane(name: str, lines, events: dict, stats: dict | None = None, pid: int = 1) -> bytes:
    """One XPlane as an XSpace's field 1. ``lines``: (name, timestamp ns, [event bytes]);
    ``events``: {id: name or (name, display name)}; ``stats``: {id: name}, in this (map) order."""
    out = varint_field(1, pid) + bytes_field(2, name)
    for ln, ts, evs in lines:
        line = varint_field(1, 1) + bytes_field(2, ln) + varint_field(3, ts) + b"".join(bytes_field(4, e) for e in evs)
        out += bytes_field(3, line)
    for k, v in events.items():
        name_, display = (v, None) if isinstance(v, str) else v
        meta = varint_field(1, k) + bytes_field(2, name_) + (b"" if display is None else bytes_field(4, display))
        out += bytes_field(4, varint_field(1, k) + bytes_field(2, meta))
    for k, v in (stats or {}).items():
        out += bytes_field(5, varint_field(1, k) + bytes_field(2, varint_field(1, k) + bytes_field(2, v)))
    return bytes_field(1, out)
