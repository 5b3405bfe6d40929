"""How an event's stats become the table's columns (:func:`analysis.trace.xplane.read_xplane`)
where the simplest trace would not tell right from wrong: two planes whose stat metadata ids mean
different stats, a plane whose ids are too sparse for a lookup table, the plane with the events
not the first one, references to each plane's own names, a program id as uint64 at and above
2^63 and as a negative int64 down to the minimum, two stats of one name of different kinds,
device timespans at the edge of an int64, a stat written value first, names that are not UTF-8.
Pinned in issue 30's mutation check.

Files written byte by byte (:mod:`xspace_bytes`, apart from the reader); every expected value
worked out by hand (the first file is also read by ``jax.profiler.ProfileData``, the reference).
No JAX programs run; milliseconds a test.
"""

from __future__ import annotations

import math

import pandas as pd
from xplane_reference import read_with_profiledata
from xspace_bytes import bytes_field as lf
from xspace_bytes import varint_field as vf
from xspace_bytes import xevent, xplane

from analysis.trace import EVENT_COLUMNS, TABLE_COLUMNS, read_xplane

U63 = 1 << 63  # the first uint64 an int64 cannot hold
PID = 17342868964687645945  # a program id above it, as a real v6e trace has


def _stat(mid: int, kind: str, value) -> bytes:
    """An XStat: metadata_id, then its value (uint64 3, int64 4, str 5, bytes 6, ref 7)."""
    field = {"uint64": 3, "int64": 4, "str": 5, "bytes": 6, "ref": 7}[kind]
    return vf(1, mid) + (lf(field, value) if kind in ("str", "bytes") else vf(field, value))


def _values(col) -> list:
    """A column's values, None where missing (pandas may type missing as NaN)."""
    return [None if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in col.tolist()]


# Two GPU planes with the same stat ids 1-8 naming different stats (and B's category under an id A
# lacks); the last entry (8) of each is the name a reference points to.
STATS_A = {
    1: "hlo_op",
    2: "program_id",
    3: "hlo_category",
    4: "device_offset_ps",
    5: "device_duration_ps",
    6: "device_ordinal",
    7: "scope_range_id",
    8: "fusion.9",
}
STATS_B = {
    1: "scope_range_id",
    2: "hlo_op",
    3: "program_id",
    4: "flops",
    5: "device_ordinal",
    6: "device_offset_ps",
    7: "device_duration_ps",
    9: "hlo_category",
    8: "all-reduce.5",
}


def _two_planes() -> bytes:
    a = [
        # a0: uint64 program id above 2^63, a category as text, device_ordinal exactly 2^63
        xevent(
            1,
            5_000,
            2_000,
            [
                _stat(1, "ref", 8),
                _stat(2, "uint64", PID),
                _stat(3, "str", "convolution"),
                _stat(6, "uint64", U63),
                _stat(7, "int64", -3),
            ],
        ),
        # a1: a negative int64 program id; a category that is a number; a device offset that
        # is a negative int64 (used: -5000 ps -> -5 ns) with a uint64 duration (3000 ps -> 3 ns)
        xevent(
            2,
            9_000,
            1_000,
            [
                _stat(2, "int64", -7),
                _stat(3, "uint64", 5),
                _stat(4, "int64", -5_000),
                _stat(5, "uint64", 3_000),
                _stat(6, "int64", 3),
            ],
        ),
        # a2: the minimum int64 as program id; a device offset of 2^63 as uint64 (no int64
        # holds it: the event's own timespan, 1000 ns + 20 ns, 4 ns)
        xevent(1, 20_000, 4_000, [_stat(2, "int64", -U63), _stat(4, "uint64", U63), _stat(5, "uint64", 7_000)]),
        # a3: program_id twice, a str then a uint64: the later wins; device_ordinal written value first
        xevent(2, 30_000, 1_000, [_stat(2, "str", "p"), _stat(2, "uint64", 77), vf(3, 4) + vf(1, 6)]),
    ]
    b = [
        # b0: ids 1-8 as plane B names them; the reference is B's own entry 8
        xevent(
            1,
            1_000,
            1_000,
            [
                _stat(2, "ref", 8),
                _stat(3, "uint64", 12),
                _stat(1, "int64", 99),
                _stat(5, "int64", 1),
                _stat(9, "str", "all-reduce"),
                _stat(4, "uint64", 10),  # flops: no column
            ],
        ),
        # b1: B's device timespan (ids 6 and 7): 4,000,000 ps -> 4000 ns, 1,500,000 ps -> 1500 ns;
        # a category given by reference (B's entry 8)
        xevent(
            1,
            3_000,
            500,
            [_stat(6, "int64", 4_000_000), _stat(7, "uint64", 1_500_000), _stat(3, "int64", -1), _stat(9, "ref", 8)],
        ),
    ]
    return (
        xplane("/device:GPU:0", [("Stream #1", 1_000, a)], {1: ("k1", "kd1"), 2: "k2"}, STATS_A)
        + xplane("/device:GPU:1", [("Stream #2", 2_000, b)], {1: ("r1", "rd1")}, STATS_B, pid=2)
        # no events, but display names: the last plane has no rows
        + xplane("/host:metadata", [], {1: ("m1", "md1")}, {1: "x"}, pid=3)
    )


def test_each_plane_reads_its_stats_by_its_own_ids_and_names(tmp_path):
    path = tmp_path / "two.xplane.pb"
    path.write_bytes(_two_planes())
    t = read_xplane(path)
    assert list(t.columns) == TABLE_COLUMNS
    assert t["plane"].tolist() == ["/device:GPU:0"] * 4 + ["/device:GPU:1"] * 2
    assert t["name"].tolist() == ["k1", "k2", "k1", "k2", "r1", "r1"]
    assert t["start_ns"].tolist() == [1_005, -5, 1_020, 1_030, 2_001, 4_000]
    assert t["duration_ns"].tolist() == [2, 3, 4, 1, 1, 1_500]
    assert _values(t["hlo_op"]) == ["fusion.9", None, None, None, "all-reduce.5", None]
    assert _values(t["device_ordinal"]) == [U63, 3, None, 4, 1, None]
    assert _values(t["scope_range_id"]) == [-3, None, None, None, 99, None]
    assert _values(t["program_id"]) == [str(PID), "-7", "-9223372036854775808", "77", "12", "-1"]
    assert _values(t["hlo_category"]) == ["convolution", "5", None, None, "all-reduce", "all-reduce.5"]
    assert _values(t["display_name"]) == ["kd1", None, "kd1", None, "rd1", "rd1"]
    pd.testing.assert_frame_equal(t[EVENT_COLUMNS], read_with_profiledata(path)[EVENT_COLUMNS], check_exact=True)


def test_the_plane_of_the_events_after_one_without_with_sparse_ids_and_names_not_utf8(tmp_path):
    # plane 0: only runtime bookkeeping (no candidate, a display name no row shows), its id
    # 7,777,777 unnamed; plane 1's stat ids are too sparse for a lookup table (a binary search),
    # and its events reference its own
    host = xplane(
        "/host:CPU", [("t", 0, [xevent(1, 0, 1, [_stat(1, "ref", 2)])])], {1: ("Wait: x", "w")}, {1: "hlo_op"}
    )
    stats = {1_000_000: "hlo_op", 5_000_000_000: "program_id", 2: "scope_range_id", 7_777_777: "fusion.3"}
    events = [
        xevent(
            5,
            1_000,
            1_000,
            [_stat(1_000_000, "ref", 7_777_777), _stat(5_000_000_000, "int64", -7), _stat(2, "uint64", 8)],
        ),
        xevent(5, 2_000, 1_000, [_stat(1_000_000, "str", b"\xfe\xffx"), _stat(5_000_000_000, "uint64", 5)]),
    ]
    path = tmp_path / "sparse.xplane.pb"
    path.write_bytes(host + xplane("/device:TPU:0", [("XLA Ops", 0, events)], {5: ("fusion.3", "f3")}, stats, pid=2))
    t = read_xplane(path)
    assert t["plane"].tolist() == ["/device:TPU:0"] * 2
    assert t["start_ns"].tolist() == [1, 2]
    assert _values(t["hlo_op"]) == ["fusion.3", "\udcfe\udcffx"]  # surrogateescape, not refused
    assert _values(t["program_id"]) == ["-7", "5"]
    assert _values(t["scope_range_id"]) == [8, None]
    assert _values(t["display_name"]) == ["f3", "f3"]


def test_a_device_offset_past_2_to_the_60_ps_is_exact_to_the_ns(tmp_path):
    # a TPU up for two weeks: its device clock passes 2**60 ps. X - 1 ps is X / 1000 - 1 ns; as a
    # double it would round up to X (doubles there are 256 apart) and read one ns late
    x = (2**60 // 256_000 + 1) * 256_000
    assert float(x - 1) == x  # what a double would make of it
    events = [xevent(1, 5_000, 1_000, [_stat(4, "int64", x - 1), _stat(5, "uint64", x - 1)])]
    path = tmp_path / "late.xplane.pb"
    path.write_bytes(xplane("/device:TPU:0", [("XLA Ops", 0, events)], {1: "fusion.1"}, STATS_A))
    t = read_xplane(path)
    assert t["start_ns"].tolist() == [x // 1000 - 1]
    assert t["duration_ns"].tolist() == [x // 1000 - 1]


def test_a_line_stamped_by_the_epoch_clock_adds_offsets_in_whole_ns_then_rounds_once(tmp_path):
    # a host line's timestamp in ns since 1970 is past 2**53, where doubles are 256 ns apart:
    # timestamp + 2 ns rounds up to the next double; rounding the timestamp first loses the 2 ns
    ts = 1_700_000_000_000_000_000 // 256 * 256 + 127
    assert float(ts) + 2 == float(ts) != float(ts + 2)  # the two orders differ here
    events = [xevent(1, 2_000, 1_000), xevent(1, 2_999, 1_000)]
    path = tmp_path / "epoch.xplane.pb"
    path.write_bytes(xplane("/host:CPU", [("tf_pjrt", ts, events)], {1: "fusion.1"}, {}))
    t = read_xplane(path)
    assert t["start_ns"].tolist() == [float(ts + 2), float(ts + 2)]
    pd.testing.assert_frame_equal(t[EVENT_COLUMNS], read_with_profiledata(path)[EVENT_COLUMNS], check_exact=True)


def test_display_names_by_sparse_metadata_ids(tmp_path):
    # ids too sparse for a lookup table (10**9): the display name is found by a search too
    events = [xevent(10**9, 0, 1_000), xevent(7, 1_000, 1_000), xevent(8, 2_000, 1_000)]
    meta = {10**9: ("all-gather.1", "ag1"), 7: ("fusion.7", "f7")}
    path = tmp_path / "sparse_names.xplane.pb"
    path.write_bytes(xplane("/device:TPU:0", [("XLA Ops", 0, events)], meta, {}))
    t = read_xplane(path)
    assert t["name"].tolist() == ["all-gather.1", "fusion.7", ""]
    assert _values(t["display_name"]) == ["ag1", "f7", None]
