"""How :func:`analysis.trace.xplane.read_xplane` turns events into rows, where the simplest trace
would not tell right from wrong: metadata ids dense, sparse, missing, past the last one and
negative (the two ways of looking them up); events written with their metadata id not first;
``num_occurrences`` set instead of the offset (a oneof); negative offsets truncated toward zero;
host events kept or left out by name; files without events; unreadable files.
Pinned in issue 30's mutation check.

Files written byte by byte (:mod:`xspace_bytes`, apart from the reader); every expected value
worked out by hand. No JAX programs run; milliseconds a test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from xspace_bytes import bytes_field as lf
from xspace_bytes import varint, xevent, xplane
from xspace_bytes import varint_field as vf

from analysis.trace import TABLE_COLUMNS, read_xplane
from analysis.trace.arrays import Lookup
from analysis.trace.xplane import TraceError, count_events


def _write(tmp_path, *planes: bytes):
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(b"".join(planes))
    return path


def _values(col) -> list:
    return [None if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in col.tolist()]


def test_event_names_by_dense_and_sparse_metadata_ids_missing_ones_named_empty(tmp_path):
    # plane A: ids 1 and 3 (a lookup table); plane B: ids 5000 and 10^9 (too sparse: a search)
    a = [xevent(m, 0, 1000) for m in (1, 2, 3, 4, 5, 2**64 - 1)]  # 2: a gap; 4, 5: past; last: -1
    b = [xevent(m, 0, 1000) for m in (5000, 10**9, 7, 6000, 10**9 + 1, 2**64 - 1, 2**62, 2**62 + 1)]
    path = _write(
        tmp_path,
        xplane("/device:TPU:0", [("XLA Ops", 0, a)], {1: "a.1", 3: "b.3"}),
        xplane("/device:TPU:1", [("XLA Ops", 0, b)], {5000: "x.1", 10**9: "y.2", 2**62: "z.3"}),  # no 2^62-entry table
    )
    t = read_xplane(path)
    assert t["name"].tolist() == ["a.1", "", "b.3", "", "", ""] + ["x.1", "y.2", "", "", "", "", "z.3", ""]
    assert t["plane"].tolist() == ["/device:TPU:0"] * 6 + ["/device:TPU:1"] * 8


def test_one_sparse_id_and_one_just_dense_enough(tmp_path):
    # a single key: a table up to id 4099 (4 * 1 + 4096 - 1), a search from 4100; ids around each
    for key in (4099, 4100, 0):
        evs = [xevent(m, 0, 1000) for m in (key, key + 1, max(key - 1, 0) if key else 9, 2**63)]
        path = _write(tmp_path, xplane("/device:GPU:0", [("Stream #1", 0, evs)], {key: "op.1"}))
        assert read_xplane(path)["name"].tolist() == ["op.1", "", "", ""], key


TEN = {i: f"op.{i}" for i in range(1, 10)}  # nine small ids; a tenth is added


@pytest.mark.parametrize(
    "names, table",
    [
        ({0: "a"}, True),  # the smallest id
        ({-1: "a"}, False),  # a negative one: a search
        ({4099: "a"}, True),  # one id: a table up to 4 * 1 + 4096 - 1
        ({4100: "a"}, False),
        ({**TEN, 4 * 10 + 4095: "b"}, True),  # ten ids: up to 4 * 10 + 4096 - 1
        ({**TEN, 4 * 10 + 4096: "b"}, False),
    ],
)
def test_a_lookup_table_only_while_it_stays_within_4n_plus_4096_entries(names, table):
    # memory: a file may name an id near 2**63; a table for it would not fit. Either way the
    # answers are the same: each id its code (its place in the map, from 1), others the missing one
    look = Lookup(names, -9)
    assert (look.table is None, None if look.table is None else look.table.size) == (
        (False, max(names) + 2) if table else (True, None)
    )
    ids = np.array([*names, max(names) + 1, -5, 2**62], np.int64)
    assert look(ids).tolist() == [*range(1, len(names) + 1), -9, -9, -9]


def test_host_events_kept_by_name_and_the_metadata_id_need_not_come_first(tmp_path):
    # id 0 is what an event whose first field is not its metadata id seems to have at first sight
    names = {0: "Wait: 0", 1: "fusion.2", 2: "Wait: x", 3: "ThunkExecutor::Execute", 4: "f (x)", 5: "call(1)"}
    names |= {6: "add.7", 7: "my op", 8: ""}
    evs = [xevent(m, 1000 * m, 2000, mid_last=m % 2 == 0) for m in (0, 1, 2, 3, 4, 5, 6, 7, 8)]
    path = _write(tmp_path, xplane("/host:CPU", [("tf_XLAPjRtCpuClient/1", 100, evs)], names))
    kept = read_xplane(path)
    assert kept["name"].tolist() == ["fusion.2", "add.7", ""]  # "": a name, not the missing one's
    assert kept["start_ns"].tolist() == [101.0, 106.0, 108.0]
    everything = read_xplane(path, candidates_only=False)
    assert everything["name"].tolist() == list(names.values())
    assert everything["start_ns"].tolist() == [100.0 + m for m in range(9)]
    assert everything["duration_ns"].tolist() == [2.0] * 9


def test_num_occurrences_set_last_makes_the_offset_zero(tmp_path):
    evs = [
        vf(1, 1) + vf(2, 7000) + vf(5, 3) + vf(3, 1000),  # offset, then num_occurrences: 0
        vf(1, 1) + vf(5, 3) + vf(2, 7000) + vf(3, 1000),  # num_occurrences, then offset: 7 ns
        vf(1, 1) + vf(5, 3) + vf(3, 1000),  # num_occurrences only: 0
    ]
    path = _write(tmp_path, xplane("/device:TPU:0", [("XLA Ops", 50, evs)], {1: "op.1"}))
    assert read_xplane(path)["start_ns"].tolist() == [50.0, 57.0, 50.0]


def test_negative_offsets_and_durations_truncate_toward_zero(tmp_path):
    offs = [-1500, -1000, -999, 999, 1999, -(2**63)]
    evs = [xevent(1, o, -o if o > -(2**63) else 2500) for o in offs]
    path = _write(tmp_path, xplane("/device:TPU:0", [("XLA Ops", 10**12, evs)], {1: "op.1"}))
    t = read_xplane(path)
    assert t["start_ns"].tolist() == [
        10**12 - 1,
        10**12 - 1,
        10**12,
        10**12,
        10**12 + 1,
        float(10**12 - 9223372036854775),
    ]  # no overflow at the minimum
    assert t["duration_ns"].tolist() == [1.0, 1.0, 0.0, 0.0, -1.0, 2.0]
    assert t["start_ns"].dtype == "float64" and t["duration_ns"].dtype == "float64"


def test_events_on_several_lines_and_planes_take_their_own_line_and_timestamp(tmp_path):
    p0 = xplane(
        "/device:GPU:0",
        [("Stream #1", 1000, [xevent(1, 0, 0)]), ("Stream #2", 2000, [xevent(1, 3000, 0)] * 2)],
        {1: "k.1"},
    )
    p1 = xplane("/device:GPU:1", [("Stream #9", 5, [xevent(2, 1000, 0)])], {2: "k.2"})
    empty = xplane("/host:CPU", [("idle", 7, [])], {})
    t = read_xplane(_write(tmp_path, empty, p0, empty, p1))
    assert t["line"].tolist() == ["Stream #1", "Stream #2", "Stream #2", "Stream #9"]
    assert t["plane"].tolist() == ["/device:GPU:0"] * 3 + ["/device:GPU:1"]
    assert t["name"].tolist() == ["k.1", "k.1", "k.1", "k.2"]
    assert t["start_ns"].tolist() == [1000.0, 2003.0, 2003.0, 6.0]


def test_files_without_events_give_the_empty_table(tmp_path):
    for planes in ((), (xplane("/device:TPU:0", [("XLA Ops", 5, [])], {1: "op.1"}),)):
        for candidates_only in (True, False):
            t = read_xplane(_write(tmp_path, *planes), candidates_only)
            assert list(t.columns) == TABLE_COLUMNS and len(t) == 0
            assert t["start_ns"].dtype == "float64" and t["duration_ns"].dtype == "float64"
    assert count_events(_write(tmp_path)) == 0


def test_stats_of_left_out_events_do_not_fill_a_kept_row(tmp_path):
    stats = {1: "hlo_op", 2: "hlo_module"}
    evs = [
        xevent(1, 0, 1000, [vf(1, 1) + lf(5, "skip")]),  # "Wait: x": left out
        xevent(2, 0, 1000, [vf(1, 2) + lf(5, "jit_f")]),
        xevent(3, 0, 1000),
    ]
    path = _write(tmp_path, xplane("/host:CPU", [("t", 0, evs)], {1: "Wait: x", 2: "dot.1", 3: "add.2"}, stats))
    t = read_xplane(path)
    assert t["name"].tolist() == ["dot.1", "add.2"]
    assert _values(t["hlo_module"]) == ["jit_f", None] and _values(t["hlo_op"]) == [None, None]
    everything = read_xplane(path, candidates_only=False)
    assert _values(everything["hlo_module"]) == [None, "jit_f", None]
    assert _values(everything["hlo_op"]) == [None, None, None]  # a left-out name's stats unread


def test_count_events_and_unreadable_files(tmp_path):
    evs = [xevent(1, 0, 0)] * 3
    path = _write(tmp_path, xplane("/host:CPU", [("a", 0, evs), ("b", 0, evs[:1])], {1: "Wait: x"}))
    assert count_events(path) == 4
    missing = tmp_path / "none.xplane.pb"
    for reader in (read_xplane, count_events):
        with pytest.raises(TraceError, match=r"none\.xplane\.pb: not a readable xplane trace"):
            reader(missing)
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(b"\x0a\x05ab")  # a plane 5 bytes long with 2 left
    for reader in (read_xplane, count_events):
        with pytest.raises(TraceError, match=r"bad\.xplane\.pb: not a readable xplane trace"):
            reader(bad)


def test_a_file_with_a_group_is_read_again_the_same_way(tmp_path):
    # protobuf skips a group-typed field; the reader reads the file again without it and must
    # keep the same selection of events and the metadata's stats (a TPU program id)
    group = varint(9 << 3 | 3) + vf(1, 1) + varint(9 << 3 | 4)
    meta_pid = lf(5, vf(1, 1) + vf(3, 42))  # XEventMetadata.stats: program_id = 42
    tpu = vf(1, 1) + lf(2, "/device:TPU:0")
    tpu += lf(3, vf(1, 1) + lf(2, "XLA Ops") + vf(3, 0) + lf(4, xevent(1, 2000, 1000) + group))
    tpu += lf(4, vf(1, 1) + lf(2, vf(1, 1) + lf(2, "fusion.1") + meta_pid))
    tpu += lf(5, vf(1, 1) + lf(2, vf(1, 1) + lf(2, "program_id")))
    host = xplane("/host:CPU", [("t", 0, [xevent(1, 0, 1000), xevent(2, 0, 1000)])], {1: "Wait: x", 2: "dot.1"})
    path = _write(tmp_path, lf(1, tpu), host)
    t = read_xplane(path)
    assert t["name"].tolist() == ["fusion.1", "dot.1"]
    assert t["start_ns"].tolist() == [2.0, 0.0]
    assert _values(t["program_id"]) == ["42", None]
    assert read_xplane(path, candidates_only=False)["name"].tolist() == ["fusion.1", "Wait: x", "dot.1"]


def test_a_plane_without_metadata_names_its_events_empty_and_reads_no_stats(tmp_path):
    evs = [xevent(3, 1000, 2000, [vf(1, 1) + lf(5, "x")]), xevent(4, 0, 1000)]
    t = read_xplane(_write(tmp_path, xplane("/device:GPU:0", [("Stream #1", 0, evs)], {})))
    assert t["name"].tolist() == ["", ""] and t["start_ns"].tolist() == [1.0, 0.0]
    assert _values(t["hlo_op"]) == [None, None] and _values(t["program_id"]) == [None, None]
