"""The trace reader's wire layer on bytes written by hand, every expected number worked out by
hand: varints of 1 to 10 bytes at odd offsets and flush with the end of the data (both sides
of the 10-byte limit), each wire type's payload, group fields taken out of events and their
stats, and the XSpace schema field by field. No JAX: each test runs in milliseconds.
(:mod:`.wire_decode` on many messages at once: ``tests/analysis/trace/test_wire_decode.py``; where events lie
in a file: ``tests/analysis/trace/test_xspace_wire.py``.)
Pinned in issue 30's mutation check.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from xspace_bytes import bytes_field as lf
from xspace_bytes import varint
from xspace_bytes import varint_field as vf

from analysis.trace import wire_schema
from analysis.trace.carried_hlo import hlo_protos
from analysis.trace.wire_decode import Buf, varints
from analysis.trace.wire_schema import (
    WireError,
    _encode_varint,
    count_events,
    parse,
    payload_at,
    varint_at,
    without_groups,
)


def _groups(*g: int) -> int:
    return sum(x << (7 * i) for i, x in enumerate(g))


# (value, its bytes) for every length 1..10: the smallest and the largest value of each length
# (2**(7(k-1)) is 0x80 * (k-1) then 0x01; 2**(7k) - 1 is 0xff * (k-1) then 0x7f; 10 bytes
# reach 2**64 - 1 with a last byte of 0x01), and one value with every kind of 7-bit group.
VARINTS = [(0, b"\x00"), (127, b"\x7f")]
for _k in range(2, 10):
    VARINTS += [(2 ** (7 * (_k - 1)), b"\x80" * (_k - 1) + b"\x01"), (2 ** (7 * _k) - 1, b"\xff" * (_k - 1) + b"\x7f")]
VARINTS += [
    (2**63, b"\x80" * 9 + b"\x01"),
    (2**64 - 1, b"\xff" * 9 + b"\x01"),
    (300, b"\xac\x02"),  # 0b10_0101100
    # 8 bytes from their 7-bit groups, least significant first, each with its top bit set but the last's
    (_groups(0x4D, 0x57, 0x62, 0x3C, 0x78, 0x2C, 0x1A, 0x01), b"\xcd\xd7\xe2\xbc\xf8\xac\x9a\x01"),
    (_groups(0x32, 0x28, 0x59, 0x43, 0x29, 0x57, 0x37, 0x3F), b"\xb2\xa8\xd9\xc3\xa9\xd7\xb7\x3f"),
]


def test_the_varint_table_is_what_the_independent_writer_writes():
    # the literal bytes above were worked out by hand; the tests' writer agrees with them
    assert [varint(v) for v, _ in VARINTS] == [b for _, b in VARINTS]


@pytest.mark.parametrize("pad", [1, 2, 3])
def test_varints_of_every_length_at_odd_offsets(pad):
    """All at once, after ``pad`` bytes, then 9 bytes of room: each one read from its 8-byte
    word (or byte by byte when longer than 8 bytes), with the position after it."""
    data = b"\x00" * pad
    pos, ends = [], []
    for _, enc in VARINTS:
        pos.append(len(data))
        data += enc
        ends.append(len(data))
    data += b"\x00" * 9
    got, after = varints(Buf(data), np.array(pos))
    assert got.dtype == np.uint64
    assert got.tolist() == [v for v, _ in VARINTS]
    assert after.tolist() == ends
    for p, (v, enc) in zip(pos, VARINTS):
        assert varint_at(data, p) == (v, p + len(enc))


@pytest.mark.parametrize(("value", "enc"), VARINTS)
def test_a_varint_flush_with_the_end_of_the_data(value, enc):
    """The last 7 bytes have no 8-byte word: those varints are read byte by byte; an 8-byte
    varint starting 8 bytes from the end reads its word to the last byte."""
    data = b"\x05\x06\x07" + enc
    got, after = varints(Buf(data), np.array([3, 0]))
    assert got.tolist() == [value, 5]
    assert after.tolist() == [len(data), 1]
    assert varint_at(data, 3) == (value, len(data))


@pytest.mark.parametrize("tail", [b"", b"\x00" * 12])
def test_an_eleventh_byte_is_refused_and_a_tenth_is_not(tail):
    ten = b"\xff" * 9 + b"\x01"
    eleven = b"\xff" * 10 + b"\x01"
    got, after = varints(Buf(b"\x00" + ten + tail), np.array([1]))
    assert (got.tolist(), after.tolist()) == ([2**64 - 1], [11])
    with pytest.raises(WireError, match="^varint longer than 10 bytes$"):
        varints(Buf(b"\x00" + eleven + tail), np.array([1]))
    with pytest.raises(WireError, match="^varint longer than 10 bytes$"):
        varint_at(b"\x00" + eleven + tail, 1)
    assert varint_at(b"\x00" + ten + tail, 1) == (2**64 - 1, 11)


def test_a_varint_cut_off_by_the_end_of_the_data_is_an_index_error():
    for data in (b"\x80", b"\x00\xff\xff", b"\xff" * 9):
        with pytest.raises(IndexError):
            varints(Buf(data), np.array([len(data) - 1]))
        with pytest.raises(IndexError):
            varint_at(data, len(data) - 1)


def test_payload_of_each_wire_type():
    data = b"\x08\x96\x01" + b"\x12\x03abc" + b"\x19" + b"\x00" * 8 + b"\x25" + b"\x00" * 4
    assert payload_at(data, 0, 1) == (1, 3)  # 150: two bytes
    assert payload_at(data, 2, 4) == (5, 8)  # "abc"
    assert payload_at(data, 1, 9) == (9, 17)
    assert payload_at(data, 5, 18) == (18, 22)
    for wire in (3, 4, 6, 7):
        with pytest.raises(WireError, match=f"^unsupported wire type {wire}$"):
            payload_at(data, wire, 0)


def test_encode_varint_by_hand():
    assert [_encode_varint(v) for v, _ in VARINTS] == [b for _, b in VARINTS]


def _group(number: int, body: bytes = b"", end: int | None = None) -> bytes:
    return varint(number << 3 | 3) + body + varint((number if end is None else end) << 3 | 4)


FIX64 = b"\x39" + b"\x01\x02\x03\x04\x05\x06\x07\x08"  # field 7, wire 1
FIX32 = b"\x45" + b"\xef\xbe\xad\xde"  # field 8, wire 5


def test_without_groups_removes_groups_and_keeps_every_other_field():
    plain = vf(1, 7) + vf(2, 2**40) + FIX64 + FIX32 + lf(6, b"abc")
    assert without_groups(plain) == plain
    assert without_groups(b"") == b""
    assert without_groups(_group(9) + plain) == plain
    # a group holding each wire type, and a group inside a group, then a later field
    body = vf(1, 300) + FIX64 + FIX32 + lf(2, b"\x0b\x0c") + _group(3, _group(5, vf(1, 1)))
    assert without_groups(vf(1, 7) + _group(9, body) + vf(3, 77)) == vf(1, 7) + vf(3, 77)
    # a group with a two-byte tag (field 20)
    assert without_groups(_group(20, vf(1, 1)) + vf(1, 2)) == vf(1, 2)


def test_without_groups_cleans_an_events_stats_and_nothing_else():
    stat = vf(1, 3) + lf(5, "x" * 140)  # 2 + 3 + 140 = 145 bytes: a two-byte length (0x91 0x01)
    dirty = stat + _group(9, vf(1, 1))
    assert len(dirty) == 149
    event = vf(1, 7) + lf(4, dirty) + lf(4, vf(1, 4) + _group(2)) + vf(3, 5)
    assert without_groups(event) == vf(1, 7) + b"\x22\x91\x01" + stat + b"\x22\x02\x08\x04" + vf(3, 5)
    # field 4 of a stat (int64_value) is not a stat: with depth 1 nothing under it is touched
    nested = lf(4, _group(9))
    assert without_groups(vf(1, 2) + nested, 1) == vf(1, 2) + nested
    # nor under an event's stat: a length-delimited field 4 there (protobuf skips it unread)
    # keeps an end-group byte that would be refused at the top
    odd = vf(1, 1) + lf(4, vf(1, 2) + lf(4, b"\x0c"))
    assert without_groups(odd) == odd
    # another length-delimited field of an event is kept as it is, group bytes and all
    assert without_groups(lf(5, _group(9)) + lf(2, _group(9))) == lf(5, _group(9)) + lf(2, _group(9))


@pytest.mark.parametrize(
    ("msg", "error"),
    [
        (vf(1, 1) + varint(9 << 3 | 3) + vf(1, 1), "^a group that does not end$"),
        (varint(9 << 3 | 3), "^a group that does not end$"),
        (_group(9, _group(3), end=8), "^a group ended by another field's end-group$"),
        (varint(9 << 3 | 3) + _group(3), "^a group that does not end$"),
        (_group(9, varint(3 << 3 | 3)), "^a group ended by another field's end-group$"),
        (vf(1, 1) + varint(9 << 3 | 4), "^an end-group without its start$"),
        (b"\x12\x05abcd", "^field runs past the end of its message$"),
        (b"\x39" + b"\x00" * 7, "^field runs past the end of its message$"),
        (b"\x0e", "^unsupported wire type 6$"),
    ],
)
def test_without_groups_refuses_what_protobuf_refuses(msg, error):
    with pytest.raises(WireError, match=error):
        without_groups(msg)


@pytest.fixture(autouse=True)
def fresh_schema(monkeypatch):
    """The schema's message classes built again for each test (the module keeps them once built),
    so that what a test reads goes through this build of them."""
    monkeypatch.setattr(wire_schema, "_CLASSES", {})


def _meta(key: int, name: bytes | str, display: str | None = None, stats: tuple = ()) -> bytes:
    value = vf(1, key) + lf(2, name) + (b"" if display is None else lf(4, display)) + b"".join(lf(5, s) for s in stats)
    return vf(1, key) + lf(2, value)


def test_every_field_of_the_schema_by_its_number_and_type(tmp_path):
    """The schema as built here (fresh classes): a Space read field by field, every oneof
    member of a stat, and the metadata view's HLO protos (an empty module is one; none is none)."""
    stats = [
        vf(1, 1) + b"\x11" + struct.pack("<d", -0.5),  # double
        vf(1, 1) + vf(3, 2**64 - 1),  # uint64
        vf(1, 1) + vf(4, 2**64 - 3),  # int64 -3
        vf(1, 1) + lf(5, "s"),
        vf(1, 1) + lf(6, b"\xff"),
        vf(1, 1) + vf(7, 2),  # a reference
        vf(1, 1) + vf(3, 1) + b"\x11" + struct.pack("<d", 4.0),  # the member set last wins
        vf(1, 1),  # none set
    ]
    meta = [vf(1, 5) + lf(2, vf(1, 5) + lf(2, "m") + lf(4, "d") + b"".join(lf(5, st) for st in stats))]
    line = vf(1, 3) + lf(2, "l") + vf(3, 2**62) + lf(4, b"e1") + lf(4, b"")
    plane = vf(1, 9) + lf(2, "p") + lf(3, line) + lf(4, meta[0]) + lf(5, vf(1, 2) + lf(2, vf(1, 2) + lf(2, "ref")))
    data = lf(1, plane) + lf(1, b"")
    space = parse(data)
    assert len(space.planes) == 2
    p = space.planes[0]
    assert (p.id, p.name, len(p.lines)) == (9, b"p", 1)
    ln = p.lines[0]
    assert (ln.id, ln.name, ln.timestamp_ns, list(ln.events)) == (3, b"l", 2**62, [b"e1", b""])
    (entry,) = p.event_metadata
    assert (entry.key, entry.value.id, entry.value.name, entry.value.display_name) == (5, 5, b"m", b"d")
    got = [(s.metadata_id, s.WhichOneof("value")) for s in entry.value.stats]
    kinds = ["double_value", "uint64_value", "int64_value", "str_value", "bytes_value", "ref_value", "double_value"]
    assert got == [(1, k) for k in kinds] + [(1, None)]
    values = [getattr(s, k) for s, k in zip(entry.value.stats, kinds)]
    assert values == [-0.5, 2**64 - 1, -3, b"s", b"\xff", 2, 4.0]
    assert [(e.key, e.value.id, e.value.name) for e in p.stat_metadata] == [(2, 2, b"ref")]
    assert count_events(data) == 2
    # the metadata view: its planes' two maps, the lines skipped
    hlo = lf(1, b"MOD") + lf(3, b"x")
    metadata = [
        _meta(1, "jit_f(3)", None, (vf(1, 7) + lf(6, hlo),)),
        _meta(2, "jit_e(4)", None, (vf(1, 7) + lf(6, lf(1, b"")),)),  # an empty module is one
        _meta(3, "jit_n(5)", None, (vf(1, 7) + lf(6, lf(3, b"x")),)),  # no module
    ]
    path = tmp_path / "m.xplane.pb"
    hplane = vf(1, 1) + lf(2, "/host:metadata") + lf(3, line) + b"".join(lf(4, m) for m in metadata)
    path.write_bytes(lf(1, hplane + lf(5, _meta(7, "Hlo Proto"))))
    assert hlo_protos(path) == [("jit_f(3)", b"MOD"), ("jit_e(4)", b"")]
    m = parse(path.read_bytes(), "MetadataSpace").planes[0]
    assert [e.key for e in m.event_metadata] == [1, 2, 3] and [e.value.name for e in m.stat_metadata] == [b"Hlo Proto"]
    assert parse(lf(1, b""), "HloProto").HasField("hlo_module")
    assert not parse(b"", "HloProto").HasField("hlo_module")
    # protobuf's own words, which the reader's error shows
    with pytest.raises(WireError, match="^Error parsing message"):
        parse(b"\x0a\x05ab")
