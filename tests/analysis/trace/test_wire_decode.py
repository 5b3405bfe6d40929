"""The vectorised decoder (:mod:`analysis.trace.wire_decode`) on message buffers written by
hand, every expected number worked out by hand: several events at once with fields in and out
of order, each wire type, fixed32/fixed64 fields flush with the end of the data, rounds of
varints only and of stats only (the short ways), empty messages, fields that run past their
message, group fields, and each message's first field. No JAX: milliseconds a test.
Pinned in issue 30's mutation check.
"""

from __future__ import annotations

import numpy as np
import pytest
from xspace_bytes import bytes_field as lf
from xspace_bytes import varint
from xspace_bytes import varint_field as vf

from analysis.trace.wire_decode import Buf, decode, first_varint_field
from analysis.trace.wire_schema import GroupField, WireError


def _group(number: int, body: bytes = b"", end: int | None = None) -> bytes:
    return varint(number << 3 | 3) + body + varint((number if end is None else end) << 3 | 4)


FIX64 = b"\x39" + b"\x01\x02\x03\x04\x05\x06\x07\x08"  # field 7, wire 1
FIX32 = b"\x45" + b"\xef\xbe\xad\xde"  # field 8, wire 5


def _buffer(*msgs: bytes, tail: bytes = b"") -> tuple[Buf, np.ndarray, np.ndarray]:
    """The messages one after another (then ``tail``), with their spans."""
    starts = np.cumsum([0, *map(len, msgs)])[:-1]
    stops = starts + np.array([len(m) for m in msgs], np.int64)
    return Buf(b"".join(msgs) + tail), starts.astype(np.int64), stops


def test_first_varint_field_of_short_long_other_and_empty_messages():
    msgs = (
        b"\x08\x05",  # 5
        b"\x08\xac\x02\x10\x01",  # 300, then another field
        b"\x08\x80\x80\x01",  # 16384: three bytes, read again
        b"\x10\x05",  # another field first
        b"",  # empty
        b"\x08\x7f",  # 127
        b"\x08\x80\x01",  # 128
        b"\x08\xff\x7f",  # 16383: the longest two-byte value
    )
    want = ([5, 300, 16384, 0, 0, 127, 128, 16383], [True, True, True, False, False, True, True, True])
    for tail in (b"\x00" * 8, b""):  # with 8 bytes of room after each start, and flush with the end
        buf, starts, stops = _buffer(*msgs, tail=tail)
        val, has = first_varint_field(buf, starts, stops, 0x08)
        assert (val.tolist(), has.tolist()) == want
        assert val.dtype == np.uint64
    # the last 7 bytes of the data, where no 8-byte word starts: one, two and three-byte values
    for enc, value in ((b"\x05", 5), (b"\xac\x02", 300), (b"\x80\x80\x01", 16384)):
        data = b"\x08\x01" * 6 + b"\x08" + enc
        buf = Buf(data)
        starts = np.array([0, 2, len(data) - 1 - len(enc)])
        val, has = first_varint_field(buf, starts, starts + np.array([2, 2, 1 + len(enc)]), 0x08)
        assert (val.tolist(), has.tolist()) == ([1, 1, value], [True, True, True])
    # an empty message at the very end of the data is not read
    data = b"\x08\x01\x08\x02"
    val, has = first_varint_field(Buf(data), np.array([0, 4]), np.array([2, 4]), 0x08)
    assert (val.tolist(), has.tolist()) == ([1, 0], [True, False])
    # other tags; no messages; no data
    buf, starts, stops = _buffer(b"\x10\x05", b"\x08\x05")
    assert [x.tolist() for x in first_varint_field(buf, starts, stops, 0x10)] == [[5, 0], [True, False]]
    assert [x.tolist() for x in first_varint_field(buf, starts[:0], stops[:0], 0x08)] == [[], []]
    assert [x.tolist() for x in first_varint_field(Buf(b""), np.array([0]), np.array([0]), 0x08)] == [[0], [False]]
    # a one-byte message of another field last in the data: nothing read past it
    val, has = first_varint_field(Buf(b"\x08\x01\x10"), np.array([0, 2]), np.array([2, 3]), 0x08)
    assert (val.tolist(), has.tolist()) == ([1, 0], [True, False])
    # a mask the reader inverts (~has), in every case
    for b, n in ((Buf(b""), 1), (buf, 0)):
        assert first_varint_field(b, np.zeros(n, np.int64), np.zeros(n, np.int64), 0x08)[1].dtype == bool


@pytest.mark.parametrize("tail", [b"\x00" * 8, b""])
@pytest.mark.parametrize(("msg", "cut"), [(b"\x08\x05", 1), (b"\x08\xac\x02", 2), (b"\x08\x80\x80\x01", 3)])
def test_first_varint_field_running_past_its_message(tail, msg, cut):
    buf = Buf(b"\x08\x01" + msg + tail)
    starts, stops = np.array([0, 2]), np.array([2, 2 + cut])
    with pytest.raises(WireError, match="^field runs past the end of its message$"):
        first_varint_field(buf, starts, stops, 0x08)
    val, has = first_varint_field(buf, starts, np.array([2, 2 + len(msg)]), 0x08)
    assert has.tolist() == [True, True] and val.tolist()[0] == 1


WANTED = ((1, 0), (2, 0), (3, 0), (5, 0), (6, 2), (7, 1), (8, 5))


def _events() -> tuple:
    """Six events in one buffer, fields in and out of order (see the rounds worked out below)."""
    return (
        vf(1, 7) + vf(3, 300) + lf(4, b"\x08\x05") + lf(4, b"\x08\x06\x10\x01"),  # two stats
        vf(2, 2**40) + vf(1, 9) + vf(1, 11),  # metadata id twice: the last wins
        b"",  # empty
        FIX64 + FIX32 + lf(6, b"abc"),  # fixed64, fixed32, length-delimited
        vf(20, 5) + vf(1, 3),  # an unknown field with a two-byte tag
        lf(1, b"xy") + vf(1, 4),  # field 1 with another wire type: skipped
    )


def test_decode_several_events_with_every_wire_type():
    """Round 1 (tags 08 10 39 a0 0a: general): m0 1=7; m1 2=2**40; m3 7=fixed64; m4 skips 20;
    m5 skips 1 as bytes. Round 2 (18 08 45 08 08: general, a fixed32): m0 3=300; m1 1=9; m3
    8=fixed32; m4 1=3, m5 1=4 (both end). Round 3 (22 08 32): m0's first stat; m1 1=11 (ends);
    m3 6=bytes 16..19 of it (ends). Round 4 (22 alone: the short way): m0's second stat."""
    msgs = _events()
    buf, starts, stops = _buffer(*msgs)
    d = decode(buf, starts, stops, WANTED, repeated=(4, 2), peek=0x08)
    assert d.value[(1, 0)].tolist() == [7, 11, 0, 0, 3, 4]
    assert d.seen[(1, 0)].tolist() == [1, 3, 0, 0, 2, 2]
    assert d.value[(2, 0)].tolist() == [0, 2**40, 0, 0, 0, 0]
    assert d.seen[(2, 0)].tolist() == [0, 1, 0, 0, 0, 0]
    assert d.value[(3, 0)].tolist() == [300, 0, 0, 0, 0, 0]
    assert d.seen[(3, 0)].tolist() == [2, 0, 0, 0, 0, 0]
    assert d.value[(5, 0)].tolist() == [0] * 6 and d.seen[(5, 0)].tolist() == [0] * 6
    assert d.value[(7, 1)].tolist() == [0, 0, 0, 0x0807060504030201, 0, 0]
    assert d.seen[(7, 1)].tolist() == [0, 0, 0, 1, 0, 0]
    assert d.value[(8, 5)].tolist() == [0, 0, 0, 0xDEADBEEF, 0, 0]
    assert d.seen[(8, 5)].tolist() == [0, 0, 0, 2, 0, 0]
    s3 = int(starts[3])
    assert d.start[(6, 2)].tolist() == [0, 0, 0, s3 + 16, 0, 0]
    assert d.stop[(6, 2)].tolist() == [0, 0, 0, s3 + 19, 0, 0]
    assert d.seen[(6, 2)].tolist() == [0, 0, 0, 3, 0, 0]
    assert bytes(buf.u8[s3 + 16 : s3 + 19]) == b"abc"
    assert set(d.start) == set(d.stop) == {(6, 2)}
    assert d.hit == {(1, 0), (2, 0), (3, 0), (6, 2), (7, 1), (8, 5)}
    # m0: 2 bytes (1=7), 3 bytes (3=300), then the stats' tag and length bytes
    assert d.rep_msg.tolist() == [0, 0]
    assert d.rep_start.tolist() == [7, 11] and d.rep_stop.tolist() == [9, 15]
    assert d.rep_first.tolist() == [5, 6] and d.rep_has_first.tolist() == [True, True]
    # without peek: no first fields
    d = decode(buf, starts, stops, WANTED, repeated=(4, 2))
    assert d.rep_first is None and d.rep_has_first is None
    assert d.rep_start.tolist() == [7, 11]


@pytest.mark.parametrize("tail", [b"", b"\x00" * 8])
def test_fixed_fields_flush_with_the_end_of_the_data(tail):
    """A fixed64 whose 8 bytes end the data has no 8-byte word: read byte by byte, same value."""
    msgs = (FIX32 + FIX64, FIX64)
    buf, starts, stops = _buffer(*msgs, tail=tail)
    d = decode(buf, starts, stops, WANTED)
    assert d.value[(7, 1)].tolist() == [0x0807060504030201] * 2
    assert d.value[(8, 5)].tolist() == [0xDEADBEEF, 0]
    assert d.seen[(7, 1)].tolist() == [2, 1] and d.seen[(8, 5)].tolist() == [1, 0]
    big = b"\x39" + b"\xff" * 8 + b"\x45" + b"\x00\x00\x00\x80"
    d = decode(Buf(big + tail), np.array([0]), np.array([len(big)]), WANTED)
    assert d.value[(7, 1)].tolist() == [2**64 - 1] and d.value[(8, 5)].tolist() == [2**31]


def test_decode_rounds_of_varints_only():
    """Round 1: tags 08 08 08 48 (varints only, not all one tag); round 2: 18 10 18 08; round 3:
    n2's 18 alone (all one tag, not a wanted one's). The 10-byte 2**63 and an unknown 9."""
    msgs = (
        vf(1, 1) + vf(3, 5),
        vf(1, 2) + vf(2, 6),
        vf(1, 300) + vf(3, 2**63) + vf(9, 1),
        vf(9, 4) + vf(1, 8),
    )
    buf, starts, stops = _buffer(*msgs)
    d = decode(buf, starts, stops, WANTED)
    assert d.value[(1, 0)].tolist() == [1, 2, 300, 8] and d.seen[(1, 0)].tolist() == [1, 1, 1, 2]
    assert d.value[(2, 0)].tolist() == [0, 6, 0, 0] and d.seen[(2, 0)].tolist() == [0, 2, 0, 0]
    assert d.value[(3, 0)].tolist() == [5, 0, 2**63, 0] and d.seen[(3, 0)].tolist() == [2, 0, 2, 0]
    # (5, 0) may be in hit too (a round of varints adds every varint key it looks for)
    assert {(1, 0), (2, 0), (3, 0)} <= d.hit <= {(1, 0), (2, 0), (3, 0), (5, 0)}
    # every message's first field the same wanted tag: all set at once
    buf, starts, stops = _buffer(vf(2, 1), vf(2, 128), vf(2, 3) + vf(2, 4))
    d = decode(buf, starts, stops, WANTED)
    assert d.value[(2, 0)].tolist() == [1, 128, 4] and d.seen[(2, 0)].tolist() == [1, 1, 2]
    assert d.value[(1, 0)].tolist() == [0, 0, 0] and d.hit == {(2, 0)}


def test_decode_stats_the_short_way_and_the_long_way():
    """Rounds where every next field is a stat: with one-byte lengths only their tag and
    length bytes are read; a stat of 128 bytes (a two-byte length) sends the round the long way."""
    s0, s1, s2 = b"\x08\x01", b"\x08\x02\x18\x05", b"\x08\x03" + lf(5, "y" * 124)  # 2, 4 and 128 bytes
    assert len(s2) == 128
    msgs = (lf(4, s0) + lf(4, s1), lf(4, s1), lf(4, s2) + lf(4, s0))
    buf, starts, stops = _buffer(*msgs)
    d = decode(buf, starts, stops, WANTED, repeated=(4, 2), peek=0x08)
    # m0 at 0: stats at 2..4, 6..10; m1 at 10: 12..16; m2 at 16: 19..147 (3 header bytes), 149..151
    assert d.rep_msg.tolist() == [0, 1, 2, 0, 2]
    assert d.rep_start.tolist() == [2, 12, 19, 6, 149]
    assert d.rep_stop.tolist() == [4, 16, 147, 10, 151]
    assert d.rep_first.tolist() == [1, 2, 3, 2, 1]
    assert d.rep_has_first.tolist() == [True] * 5
    assert d.hit == set() and d.seen[(1, 0)].tolist() == [0, 0, 0]
    # all short, messages of 1, 2 and 3 stats
    buf, starts, stops = _buffer(lf(4, s0), lf(4, s0) * 2, lf(4, s1) * 3)
    d = decode(buf, starts, stops, WANTED, repeated=(4, 2))
    # m0 at 0: 2..4; m1 at 4: 6..8, 10..12; m2 at 12: 14..18, 20..24, 26..30; round by round
    assert d.rep_msg.tolist() == [0, 1, 2, 1, 2, 2]
    assert d.rep_start.tolist() == [2, 6, 14, 10, 20, 26]
    assert d.rep_stop.tolist() == [4, 8, 18, 12, 24, 30]


def test_decode_of_no_messages_and_of_empty_ones():
    d = decode(Buf(b"\x08\x01"), np.zeros(0, np.int64), np.zeros(0, np.int64), WANTED, repeated=(4, 2), peek=0x08)
    assert d.value[(1, 0)].tolist() == [] and d.hit == set()
    assert [x.tolist() for x in (d.rep_msg, d.rep_start, d.rep_stop, d.rep_first, d.rep_has_first)] == [[]] * 5
    assert d.rep_first.dtype == np.uint64 and d.rep_has_first.dtype == bool
    d = decode(Buf(b"\x08\x01"), np.array([0, 2]), np.array([0, 2]), WANTED, repeated=(4, 2))
    assert d.value[(1, 0)].tolist() == [0, 0] and d.seen[(1, 0)].tolist() == [0, 0]
    assert d.rep_first is None and d.rep_msg.tolist() == []


@pytest.mark.parametrize(
    ("msg", "stop", "error"),
    [
        (b"\x08\x96\x01", 2, "^field runs past the end of its message$"),  # varints only
        (b"\x22\x05\x08\x01\x08\x01", 4, "^field runs past the end of its message$"),  # the short way
        (FIX64, 5, "^field runs past the end of its message$"),
        (FIX32, 4, "^field runs past the end of its message$"),
        (b"\x32\x03ab\x00", 4, "^field runs past the end of its message$"),
        (b"\x32" + varint(2**63) + b"ab", 12, "^length past the end of the data$"),
        (b"\x32\x02", 2, "^field runs past the end of its message$"),
        (b"\x08\x01", 3, "^message runs past the end of the data$"),
        (b"\x0e\x08\x01", 3, "^unsupported wire type or field number 0$"),  # wire 6, then a good field
        (b"\x0f\x08\x01", 3, "^unsupported wire type or field number 0$"),  # wire 7
        (b"\x00\x01", 2, "^unsupported wire type or field number 0$"),
    ],
)
def test_decode_refuses_broken_messages(msg, stop, error):
    with pytest.raises(WireError, match=error) as exc:
        decode(Buf(msg), np.array([0]), np.array([stop]), WANTED, repeated=(4, 2))
    assert type(exc.value) is WireError


def test_decode_refuses_a_message_that_ends_before_it_starts():
    with pytest.raises(WireError, match="^message runs past the end of the data$"):
        decode(Buf(b"\x08\x01\x08\x02"), np.array([0, 3]), np.array([2, 2]), WANTED)


@pytest.mark.parametrize("msg", [b"\x0b\x0c", b"\x08\x01\x0c", vf(1, 1) + _group(20, vf(1, 2))])
def test_a_group_field_is_a_group_field_error(msg):
    with pytest.raises(GroupField, match="^a group-typed field"):
        decode(Buf(msg), np.array([0]), np.array([len(msg)]), WANTED, repeated=(4, 2))


def test_a_round_whose_tags_all_start_with_0x80():
    """Field 16 as a varint has the two-byte tag 0x80 0x01: a round in which it comes first in
    every message is not a round of one-byte tags, and its value is skipped whole."""
    msgs = (vf(16, 5) + vf(1, 7), vf(16, 300) + vf(3, 9))
    assert msgs[0][:2] == b"\x80\x01"
    buf, starts, stops = _buffer(*msgs)
    d = decode(buf, starts, stops, WANTED)
    assert d.value[(1, 0)].tolist() == [7, 0] and d.seen[(1, 0)].tolist() == [2, 0]
    assert d.value[(3, 0)].tolist() == [0, 9] and d.seen[(3, 0)].tolist() == [0, 2]


def test_fixed32_fields_of_several_messages_in_one_round():
    msgs = (b"\x45\x01\x00\x00\x00", b"\x45\x00\x01\x00\x00" + vf(1, 1), b"\x45\xff\xff\xff\xff")
    buf, starts, stops = _buffer(*msgs, tail=b"\x00" * 8)
    d = decode(buf, starts, stops, WANTED)
    assert d.value[(8, 5)].tolist() == [1, 256, 2**32 - 1] and d.seen[(8, 5)].tolist() == [1, 1, 1]
    assert d.value[(1, 0)].tolist() == [0, 1, 0]


STAT_FIELDS = ((1, 0), (2, 1), (3, 0), (4, 0), (5, 2), (6, 2), (7, 0))  # the stats' as the reader asks


def test_stats_that_are_all_integers_with_a_fixed64_asked_for_first():
    """The reader asks for a stat's double (a fixed64) before its integers: rounds of varints
    only still set every integer. Round 2: all int64 (one tag); then uint64, int64, ref."""
    buf, starts, stops = _buffer(vf(1, 1) + vf(4, 5), vf(1, 2) + vf(4, 2**64 - 1))
    d = decode(buf, starts, stops, STAT_FIELDS)
    assert d.value[(4, 0)].tolist() == [5, 2**64 - 1] and d.seen[(4, 0)].tolist() == [2, 2]
    buf, starts, stops = _buffer(vf(1, 1) + vf(3, 7), vf(1, 2) + vf(4, 8), vf(1, 3) + vf(7, 9))
    d = decode(buf, starts, stops, STAT_FIELDS)
    assert [d.value[k].tolist() for k in ((3, 0), (4, 0), (7, 0))] == [[7, 0, 0], [0, 8, 0], [0, 0, 9]]
    assert [d.seen[k].tolist() for k in ((3, 0), (4, 0), (7, 0))] == [[2, 0, 0], [0, 2, 0], [0, 0, 2]]
    assert d.seen[(2, 1)].tolist() == [0, 0, 0]
