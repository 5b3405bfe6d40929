"""Where each event of an ``.xplane.pb`` lies (:func:`analysis.trace.xspace_wire.read_space`),
on files written by hand: event lengths on both sides of each length byte, several planes and
lines, lines copied out (events not contiguous, a walk that cannot read the file, groups taken
out), and the event metadata's names, display names and stats, every expected value worked out
by hand. No JAX: milliseconds a test.
Pinned in issue 30's mutation check.

Where events of 256 MiB and more lie (:func:`analysis.trace.xspace_wire.read_space`): an
event's length takes a fifth varint byte from 2^28 bytes on, which moves its payload one byte
further from its tag.

A real file with such an event needs protobuf to parse (and copy) it: over a gigabyte and
seconds. Here the file is an anonymous memory map whose pages stay untouched (and unallocated)
except the few tag and length bytes written by hand, and protobuf's parse is replaced by a
stand-in that gives the planes, lines and event lengths it would give: the walk to the first
event, the length check at each event and the starts and stops are the reader's own. No JAX;
well under a second and a few pages of memory.
"""

from __future__ import annotations

import mmap
import struct
from types import SimpleNamespace

import numpy as np
import pytest
from xspace_bytes import bytes_field, varint
from xspace_bytes import bytes_field as lf
from xspace_bytes import varint_field as vf

from analysis.trace import wire_schema, xspace_wire
from analysis.trace.xspace_wire import read_space


def _group(number: int, body: bytes = b"", end: int | None = None) -> bytes:
    return varint(number << 3 | 3) + body + varint((number if end is None else end) << 3 | 4)


@pytest.fixture(autouse=True)
def fresh_schema(monkeypatch):
    """The schema's message classes built again for each test (the module keeps them once built),
    so that what a test reads goes through this build of them."""
    monkeypatch.setattr(wire_schema, "_CLASSES", {})


def _meta(key: int, name: bytes | str, display: bytes | str | None = None, stats: tuple = ()) -> bytes:
    value = vf(1, key) + lf(2, name) + (b"" if display is None else lf(4, display)) + b"".join(lf(5, s) for s in stats)
    return vf(1, key) + lf(2, value)


def _xline(name, ts: int, events, tail: bytes = b"") -> bytes:
    return vf(1, 1) + lf(2, name) + vf(3, ts) + b"".join(lf(4, e) for e in events) + tail


def _xplane(name, lines, event_meta=(), stat_meta=()) -> bytes:
    out = vf(1, 1) + lf(2, name) + b"".join(lf(3, ln) for ln in lines)
    return out + b"".join(lf(4, m) for m in event_meta) + b"".join(lf(5, m) for m in stat_meta)


def _events_of(space) -> list[bytes]:
    return [bytes(space.buf.u8[a:b]) for a, b in zip(space.starts.tolist(), space.stops.tolist())]


def test_events_of_lengths_on_both_sides_of_each_length_byte_are_found_in_place():
    """Lengths 127 | 128 (a second length byte), 16383 | 16384 (a third), 2**21 - 1 | 2**21 (a
    fourth): each event's bytes where the file has them, none copied."""
    sizes = [1, 127, 128, 16383, 16384, 2**21 - 1, 2**21]
    events = [bytes([i + 1]) * n for i, n in enumerate(sizes)]
    line = _xline("XLA Ops", 5, events)
    data = lf(1, _xplane("/device:TPU:0", [_xline("empty", 1, []), line])) + lf(4, "host")
    space = read_space(data)
    assert space.buf.size == len(data)  # read where they lie
    assert _events_of(space) == events
    assert [(ln.name, ln.timestamp_ns, ln.count) for ln in space.planes[0].lines] == [
        ("empty", 1, 0),
        ("XLA Ops", 5, 7),
    ]


def test_several_planes_and_lines_each_event_in_order():
    e = [vf(1, k) + vf(3, 10 * k) for k in range(1, 7)]
    p0 = _xplane("/device:GPU:0", [_xline("s1", 1, e[:2]), _xline("s2", 2, [e[2]])], [_meta(1, "a")], [_meta(1, "x")])
    p1 = _xplane("/host:CPU", [])
    p2 = _xplane("/device:GPU:1", [_xline("s3", 3, e[3:])])
    data = lf(1, p0) + lf(1, p1) + lf(1, p2)
    space = read_space(data)
    assert space.buf.size == len(data)
    assert _events_of(space) == e
    assert [p.name for p in space.planes] == ["/device:GPU:0", "/host:CPU", "/device:GPU:1"]
    assert [[ln.count for ln in p.lines] for p in space.planes] == [[2, 1], [], [3]]


def test_events_not_contiguous_in_their_line_are_copied_out_after_the_data():
    """Two serialized XLines back to back are one XLine (protobuf merges them) whose events have
    another line's fields between them: those events are copied after the file's bytes."""
    e = [vf(1, 1), vf(1, 2) + vf(3, 7), vf(1, 3)]
    merged = _xline("a", 1, e[:1]) + _xline("b", 2, e[1:])
    kept = [vf(1, 9)]
    data = lf(1, _xplane("/host:CPU", [_xline("first", 0, kept), merged]))
    space = read_space(data)
    assert _events_of(space) == kept + e
    assert space.buf.size == len(data) + sum(map(len, e))  # only the merged line's
    assert space.starts[0] < len(data) <= space.starts[1]
    assert [(ln.name, ln.timestamp_ns, ln.count) for ln in space.planes[0].lines] == [("first", 0, 1), ("b", 2, 3)]


def test_a_space_the_walk_cannot_read_copies_every_line_out():
    """A group-typed field in the XSpace (protobuf skips it) stops the walk that finds the first
    events: every event is then copied out, with the same bytes."""
    e = [vf(1, 1), vf(1, 2)]
    data = _group(9, vf(1, 1)) + lf(1, _xplane("/host:CPU", [_xline("l", 0, e)]))
    space = read_space(data)
    assert _events_of(space) == e
    assert space.buf.size == len(data) + 4


def test_strip_groups_copies_every_event_out_without_its_groups():
    e = [vf(1, 1) + _group(9, vf(1, 5)) + vf(3, 2), vf(1, 2) + lf(4, vf(1, 1) + _group(3)), vf(1, 3)]
    data = lf(1, _xplane("/host:CPU", [_xline("l", 0, e)]))
    space = read_space(data, strip_groups=True)
    want = [vf(1, 1) + vf(3, 2), vf(1, 2) + lf(4, vf(1, 1)), vf(1, 3)]
    assert _events_of(space) == want
    assert space.buf.size == len(data) + sum(map(len, want))
    assert space.planes[0].lines[0].count == 3


def test_a_space_without_events():
    for data in (b"", lf(1, _xplane("/host:CPU", [_xline("l", 0, [])])), lf(4, "host")):
        space = read_space(data)
        assert space.buf.size == 0 and space.starts.tolist() == [] and space.stops.tolist() == []
    assert [ln.count for ln in read_space(lf(1, _xplane("p", [_xline("l", 0, [])]))).planes[0].lines] == [0]


def test_metadata_names_display_names_and_the_stats_asked_for():
    stat_meta = [_meta(1, "program_id"), _meta(2, "hlo_category"), _meta(3, "flops"), _meta(4, "all-reduce")]
    event_meta = [
        _meta(1, "%all-reduce.3 = ...", "all-reduce.3", (vf(1, 1) + vf(3, 2**64 - 1), vf(1, 2) + lf(5, "all-reduce"))),
        _meta(2, "fusion", "", (vf(1, 2) + vf(7, 4), vf(1, 3) + vf(4, 9), vf(1, 1) + vf(4, 5), vf(1, 1) + vf(4, 6))),
        _meta(3, b"bad \xff name", None, (vf(1, 1),)),  # a stat with no value: skipped
        _meta(4, "old", "old.1", (vf(1, 1) + vf(4, 1),)),
        _meta(4, "new"),  # the same id again: replaces the earlier entry whole
        _meta(5, "double", None, (vf(1, 2) + b"\x11" + struct.pack("<d", 2.5), vf(1, 9) + vf(4, 3))),
        _meta(6, "dangling", None, (vf(1, 2) + vf(7, 99), vf(1, 1) + lf(6, b"\x00b"))),  # a reference to no stat: ""
    ]
    event_meta.append(_meta(7, "shown", b"d\xff"))  # a display name that is not UTF-8
    data = lf(1, _xplane(b"/device:\xff", [_xline(b"l\xfe", 0, [])], event_meta, stat_meta))
    plane = read_space(data, frozenset({"program_id", "hlo_category"})).planes[0]
    assert plane.stat_names == {1: "program_id", 2: "hlo_category", 3: "flops", 4: "all-reduce"}
    assert plane.event_names == {
        1: "%all-reduce.3 = ...",
        2: "fusion",
        3: "bad \udcff name",
        4: "new",
        5: "double",
        6: "dangling",
        7: "shown",
    }
    assert plane.event_display == {1: "all-reduce.3", 7: "d\udcff"}
    assert (plane.name, plane.lines[0].name) == ("/device:\udcff", "l\udcfe")
    assert plane.event_stats == {
        1: {"program_id": 2**64 - 1, "hlo_category": "all-reduce"},
        2: {"hlo_category": "all-reduce", "program_id": 6},  # a reference by name; the later of two wins
        5: {"hlo_category": 2.5},
        6: {"hlo_category": "", "program_id": "\x00b"},
    }
    assert read_space(data).planes[0].event_stats == {}  # none asked for


def test_fields_the_parse_skips_do_not_move_the_events():
    """A varint where the XSpace has planes, the plane its lines and the line its events
    (protobuf skips a known number of another wire type): every event still found in place.
    A line whose event length is written in two bytes where one would do (protobuf reads it) is
    not where the lengths say: its events are copied out, with the same bytes."""
    e = [vf(1, 1), vf(1, 2) + vf(3, 4), vf(1, 3)]
    line = vf(4, 1) + _xline("l", 0, e[:2])
    overlong = vf(1, 1) + b"\x22\x82\x00" + e[2]  # a length of 2 in two bytes
    plane = vf(1, 1) + vf(3, 1) + lf(2, "p") + lf(3, line) + lf(3, overlong)
    data = vf(1, 5) + lf(4, "host") + lf(1, plane)
    space = read_space(data)
    assert _events_of(space) == e
    assert space.buf.size == len(data) + 2  # only the overlong line's event copied
    # 10 bytes before the plane, 9 of it before the line, 9 of the line before its first event's tag
    assert space.starts.tolist()[:2] == [30, 34]
    assert [ln.count for ln in space.planes[0].lines] == [2, 1]


def test_two_lines_copied_out_one_after_the_other():
    e1 = [vf(1, 1) + _group(9), vf(1, 2)]
    e2 = [vf(1, 3) + _group(9, vf(1, 1)), vf(1, 4) + vf(3, 5)]
    data = lf(1, _xplane("/host:CPU", [_xline("a", 0, e1), _xline("b", 0, e2)]))
    space = read_space(data, strip_groups=True)
    want = [vf(1, 1), vf(1, 2), vf(1, 3), vf(1, 4) + vf(3, 5)]
    assert _events_of(space) == want
    assert space.starts.tolist() == [len(data) + k for k in (0, 2, 4, 6)]  # each after the last


@pytest.mark.parametrize(
    ("head", "tail", "event"),
    [
        # from byte 1 on, the bytes look like an event of 2 bytes ("ab")
        (_group(9, lf(4, b"ab")), lf(4, b"x"), b"cd"),
        # the last byte a tag of field 4 and the first byte (0x4b, the group's tag) a length of 75
        (_group(9, lf(4, b"ab")), lf(4, b"x\x22"), bytes(range(75))),
    ],
    ids=["at_1", "at_end_minus_1"],
)
def test_when_the_walk_fails_no_position_is_guessed(head, tail, event):
    """The walk stops at the group (protobuf skips it); bytes elsewhere that look like a line's
    events are not taken for them: the events are copied out."""
    data = head + lf(1, _xplane("/host:CPU", [_xline("l", 0, [event])])) + tail
    assert data[0] == 0x4B
    space = read_space(data)
    assert _events_of(space) == [event]
    assert space.starts.tolist() == [len(data)]


FIVE = 0x10000000  # 2^28: the shortest length written in five varint bytes
FOUR = 0x0FFFFFFF  # the longest in four


class _Sized:
    """An event as the stand-in parse gives it: only its length is read on the fast path."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


def _file(lengths: list[int]) -> mmap.mmap:
    """XSpace{planes: XPlane{lines: XLine{name "big", events of ``lengths`` (zeros)}}}, with
    only the headers written."""
    name = bytes_field(2, b"big")  # XLine.name, before the events
    line_len = len(name) + sum(1 + len(varint(n)) + n for n in lengths)
    line_head = varint(3 << 3 | 2) + varint(line_len)  # XPlane.lines
    plane_len = len(line_head) + line_len
    space_head = varint(1 << 3 | 2) + varint(plane_len)  # XSpace.planes
    size = len(space_head) + plane_len
    data = mmap.mmap(-1, size)
    at = 0
    for chunk in (space_head, line_head, name):
        data[at : at + len(chunk)] = chunk
        at += len(chunk)
    for n in lengths:
        head = varint(4 << 3 | 2) + varint(n)  # XLine.events
        data[at : at + len(head)] = head
        at += len(head) + n
    assert at == size
    return data


@pytest.fixture
def stand_in_parse(monkeypatch):
    """``parse`` giving one plane with one line of events of the lengths set on it."""

    def set_lengths(lengths: list[int]) -> None:
        line = SimpleNamespace(name=b"big", timestamp_ns=5, events=[_Sized(n) for n in lengths])
        plane = SimpleNamespace(name=b"/device:TPU:0", lines=[line], stat_metadata=[], event_metadata=[])
        monkeypatch.setattr(xspace_wire, "parse", lambda data: SimpleNamespace(planes=[plane]))

    return set_lengths


def test_an_event_of_256_mib_has_a_five_byte_length_and_the_next_a_four_byte_one(stand_in_parse):
    # space tag 0, its length 1-5 (0x20000015: five bytes); line tag 6, length 7-11; the line's
    # name 12-16; event 0: tag 17, length 18-22 (2^28: five bytes), payload from 23 for 2^28;
    # event 1: tag 23 + 2^28 = 0x10000017, length four bytes, payload from 0x1000001C for
    # 2^28 - 1, to 0x2000001B, the file's end
    data = _file([FIVE, FOUR])
    assert len(data) == 0x2000001B
    stand_in_parse([FIVE, FOUR])
    space = xspace_wire.read_space(data)
    assert space.starts.tolist() == [23, 0x1000001C]
    assert space.stops.tolist() == [23 + FIVE, 0x2000001B]
    assert space.buf.size == len(data)  # found in place: nothing copied out
    assert [(ln.name, ln.count) for ln in space.planes[0].lines] == [("big", 2)]


def test_four_byte_lengths_then_a_five_byte_one_after_them(stand_in_parse):
    # tags 17 and 17 + 5 + (2^28 - 1) = 0x10000015; the second length 0x10000016-0x1000001A,
    # its payload from 0x1000001B; a 3-byte event after it: tag 0x2000001B, length 1 byte,
    # payload 0x2000001D to 0x20000020
    data = _file([FOUR, FIVE, 3])
    stand_in_parse([FOUR, FIVE, 3])
    space = xspace_wire.read_space(data)
    assert space.starts.tolist() == [22, 0x1000001B, 0x2000001D]
    assert space.stops.tolist() == [22 + FOUR, 0x2000001B, 0x20000020]
    assert space.buf.size == len(data) == 0x20000020
    assert np.diff(space.starts).tolist() == [FOUR + 6, FIVE + 2]
