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
