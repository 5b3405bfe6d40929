"""Where events of 256 MiB and more lie (:func:`analysis.trace.xspace_wire.read_space`): an
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
from types import SimpleNamespace

import numpy as np
import pytest
from xspace_bytes import bytes_field, varint

from analysis.trace import xspace_wire

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
