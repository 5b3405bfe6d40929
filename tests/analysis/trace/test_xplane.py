"""The xplane reader (analysis.trace.xplane.read_xplane, its own decoder of the XSpace protobuf)
gives exactly the table of the reference reader built on ``jax.profiler.ProfileData``.

On real traces of the 8 CPU devices (a collective, and a sharded MLP forward and backward), and
on XSpaces written here byte by byte in the shapes TPU and GPU profiles have, with the corners
of the format: every kind of stat value, missing metadata, repeated fields, oneofs, fields out
of order, unknown fields, events that are not contiguous in their line.
"""

from __future__ import annotations

import struct

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xplane_reference import read_with_profiledata
from xspace_bytes import bytes_field as _lf
from xspace_bytes import varint as _varint
from xspace_bytes import varint_field as _vf

from analysis.trace import (
    EVENT_COLUMNS,
    TABLE_COLUMNS,
    TraceError,
    count_events,
    device_ops,
    read_xplane,
)


def _same(path, candidates_only=True) -> pd.DataFrame:
    ours = read_xplane(path, candidates_only)
    ref = read_with_profiledata(path, candidates_only)
    pd.testing.assert_frame_equal(ours, ref, check_exact=True)
    assert list(ours.columns) == TABLE_COLUMNS
    return ours


# --- real CPU traces ---------------------------------------------------------------------


def _trace(out, fn, args, steps):
    import jax

    opts = jax.profiler.ProfileOptions()
    opts.python_tracer_level, opts.host_tracer_level = 0, 1
    jax.block_until_ready(fn(*args))  # compiled before the trace
    jax.profiler.start_trace(str(out), profiler_options=opts)
    try:
        for _ in range(steps):
            jax.block_until_ready(fn(*args))
    finally:
        jax.profiler.stop_trace()
    return next(out.glob("plugins/profile/*/*.xplane.pb"))


@pytest.fixture(scope="module")
def cpu_traces(tmp_path_factory) -> dict:
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from runner.worker.programs import collectives as programs

    mesh = jax.make_mesh((8,), ("X",))
    prog = programs.build("all_gather", ["X"], mesh, 1024, "float32")
    x = prog.make_input()
    traces = {"all_gather": _trace(tmp_path_factory.mktemp("ag"), prog.fn.lower(x).compile(), (x,), 40)}

    mesh2 = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    rng = np.random.default_rng(0)

    def put(a, spec):
        return jax.device_put(jnp.asarray(a, jnp.float32), NamedSharding(mesh2, spec))

    xs = put(rng.standard_normal((64, 32)), P("data", None))
    w1 = put(rng.standard_normal((32, 64)), P(None, "model"))
    w2 = put(rng.standard_normal((64, 16)), P("model", None))

    def loss(w1, w2, x):
        return jnp.mean(jnp.square(jax.nn.relu(x @ w1) @ w2))

    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    traces["mlp"] = _trace(tmp_path_factory.mktemp("mlp"), step, (w1, w2, xs), 20)
    return traces


@pytest.mark.parametrize("candidates_only", [True, False])
@pytest.mark.parametrize("which", ["all_gather", "mlp"])
def test_same_table_as_profiledata_on_cpu_traces(cpu_traces, which, candidates_only):
    path = cpu_traces[which]
    table = _same(path, candidates_only)
    if candidates_only:
        ops = device_ops(table)
        assert sorted(ops["device"].unique()) == list(range(8))
        assert ops["hlo_module"].str.len().gt(0).all()
    else:
        from jax.profiler import ProfileData

        data = ProfileData.from_serialized_xspace(path.read_bytes())
        n = sum(1 for p in data.planes for ln in p.lines for _ in ln.events)
        assert len(table) == n == count_events(path)


def test_truncated_garbage_and_missing_files_raise_trace_error(cpu_traces, tmp_path):
    data = cpu_traces["all_gather"].read_bytes()
    bad = {
        "half": data[: len(data) // 2],
        "third": data[: len(data) // 3 + 7],
        "less_one": data[:-1],
        "garbage": b"not an xplane at all",
        "noise": bytes(range(256)) * 8,
    }
    for name, blob in bad.items():
        path = tmp_path / f"{name}.xplane.pb"
        path.write_bytes(blob)
        with pytest.raises(TraceError):
            read_xplane(path)
        with pytest.raises(TraceError):
            read_with_profiledata(path)
        with pytest.raises(TraceError):
            count_events(path)
    with pytest.raises(TraceError):
        read_xplane(tmp_path / "missing.xplane.pb")
    empty = tmp_path / "empty.xplane.pb"
    empty.write_bytes(b"")  # a valid, empty XSpace
    for candidates_only in (True, False):
        assert len(_same(empty, candidates_only)) == 0


# --- XSpaces written byte by byte -------------------------------------------------------


def _stat(mid: int | None, kind: str | None = None, value=None) -> bytes:
    out = b"" if mid is None else _vf(1, mid)
    if kind == "double":
        out += _varint(2 << 3 | 1) + struct.pack("<d", value)
    elif kind in ("uint64", "int64", "ref"):
        out += _vf({"uint64": 3, "int64": 4, "ref": 7}[kind], value)
    elif kind in ("str", "bytes"):
        out += _lf(5 if kind == "str" else 6, value)
    return out


def _event(mid=None, offset=None, duration=None, stats=(), occurrences=None, extra=b"") -> bytes:
    out = b"" if mid is None else _vf(1, mid)
    out += b"" if offset is None else _vf(2, offset)
    out += b"" if duration is None else _vf(3, duration)
    out += b"".join(_lf(4, s) for s in stats)
    out += b"" if occurrences is None else _vf(5, occurrences)
    return out + extra


def _line(name: str, timestamp_ns: int, events: list[bytes], tail: bytes = b"") -> bytes:
    return _vf(1, 7) + _lf(2, name) + _vf(3, timestamp_ns) + b"".join(_lf(4, e) for e in events) + tail


def _plane(name: str, lines: list[bytes], event_names: dict, stat_names: dict, pid: int = 1) -> bytes:
    out = _vf(1, pid) + _lf(2, name) + b"".join(_lf(3, ln) for ln in lines)
    out += b"".join(_lf(4, _vf(1, k) + _lf(2, _vf(1, k) + _lf(2, v))) for k, v in event_names.items())
    out += b"".join(_lf(5, _vf(1, k) + _lf(2, _vf(1, k) + _lf(2, v))) for k, v in stat_names.items())
    return out


def _space(planes: list[bytes]) -> bytes:
    return b"".join(_lf(1, p) for p in planes) + _lf(4, "host")


STATS = {
    1: "hlo_op",
    2: "hlo_module",
    3: "device_ordinal",
    4: "scope_range_id",
    5: "flops",
    6: "fusion.7",
    7: "jit_f",
    8: "hlo_op",
}  # 8: a second metadata entry with the name hlo_op


def _corners() -> bytes:
    ev = {
        1: "fusion.7",
        2: "all-gather-start.1",
        3: "all-gather-done.1",
        4: "Wait: x",
        5: "ThunkExecutor::Execute",
        6: "MemcpyH2D",
        7: "ncclDevKernel_AllGather(x)",
        0: "zero",
    }
    tpu = _plane(
        "/device:TPU:0",
        [
            _line(
                "XLA Ops",
                1000,
                [
                    _event(1, 5_000, 12_345, [_stat(1, "ref", 6), _stat(2, "ref", 7), _stat(5, "double", 2.5e9)]),
                    _event(2, 20_000, 999, [_stat(1, "str", "all-gather-start.1"), _stat(3, "uint64", 2**63 + 5)]),
                    _event(3, -1_500, 2_000),  # a negative offset: C++ division rounds toward zero
                    _event(None, 7, 7),  # metadata_id 0, which has metadata here
                    _event(99, 1, 1, [_stat(99, "int64", 1)]),  # no metadata at all: named ""
                ],
            ),
            _line("Steps", 0, [_event(4, 0, 10), _event(5, occurrences=3, duration=4)]),
            _line("empty", 5, []),
        ],
        ev,
        STATS,
    )
    gpu_stats = {**STATS, 9: "process_id"}
    gpu = _plane(
        "/device:GPU:1",
        [
            _line(
                "Stream #13(Compute)",
                2_000_000,
                [
                    _event(
                        7,
                        100,
                        400_000,
                        [
                            _stat(1, "str", "all-gather-start.1"),
                            _stat(2, "str", "jit_f"),
                            _stat(4, "int64", -3),
                            _stat(4, "int64", 42),
                        ],
                    ),  # the later wins
                    _event(6, 200, 1_000, [_stat(1, "ref", 12345), _stat(3, "bytes", b"\x00raw")]),  # dangling ref: ""
                    _event(
                        1,
                        300,
                        50,
                        [
                            _stat(1, "ref", 6),
                            _stat(8, "str", "fusion.8"),
                            _stat(77, "int64", 5),
                            _stat(2),
                            _stat(None, "int64", 3),
                        ],
                    ),  # hlo_op twice under two ids
                    # fields out of order, an unknown field, and the oneof set twice (offset wins, then occurrences)
                    _vf(3, 7_000)
                    + _vf(2, 11_000)
                    + _vf(1, 1)
                    + _vf(15, 3)
                    + _lf(14, b"??")
                    + _lf(4, _stat(4, "uint64", 9)),
                    _vf(1, 1) + _vf(2, 11_000) + _vf(5, 4) + _vf(3, 1),
                    _vf(1, 1) + _vf(5, 4) + _vf(2, 12_000) + _vf(1, 2) + _vf(3, 1),  # metadata_id twice: 2 wins
                    _event(1, 2**40 + 123_456, 2**33, [_stat(3, "int64", -(2**62)), _stat(9, "double", -0.0)]),
                ],
            ),
        ],
        ev,
        gpu_stats,
        pid=2,
    )
    host = _plane(
        "/host:CPU",
        [
            _line(
                "tf_XLAPjRtCpuClient/1",
                10**15,
                [
                    _event(1, 10, 20, [_stat(1, "ref", 6), _stat(2, "ref", 7), _stat(3, "int64", 0)]),
                    _event(4, 10, 20, [_stat(1, "ref", 6)]),  # not a candidate: its stats are not read
                    _event(5, 30, 40),
                    _event(1, 50, 60, [_stat(3, "double", 1.5)]),
                ],
            ),
            # two serialized XLines one after the other are one XLine whose events are not
            # contiguous in the file: the reader copies them out
            _line("python", 0, [_event(1, 1, 1, [_stat(3, "int64", 1)])])
            + _line("python2", 5, [_event(2, 2, 2, [_stat(3, "int64", 2)]), _event(4, 3, 3)]),
        ],
        ev,
        STATS,
        pid=3,
    )
    return _space([tpu, gpu, host, _plane("/host:metadata", [], {}, {1: "x"}, pid=4)])


@pytest.mark.parametrize("candidates_only", [True, False])
def test_same_table_on_tpu_gpu_shapes_and_format_corners(tmp_path, candidates_only):
    path = tmp_path / "corners.xplane.pb"
    path.write_bytes(_corners())
    table = _same(path, candidates_only)
    assert {"/device:TPU:0", "/device:GPU:1", "/host:CPU"} <= set(table["plane"])
    assert count_events(path) == 21


def _stat_strategy():
    kinds = st.sampled_from(["double", "uint64", "int64", "ref", "str", "bytes", None])
    value = {
        "double": st.floats(allow_nan=False),
        "uint64": st.integers(0, 2**64 - 1),
        "int64": st.integers(-(2**63), 2**63 - 1),
        "ref": st.integers(0, 12),
        "str": st.text(max_size=6),
        "bytes": st.text(max_size=4),
    }
    return kinds.flatmap(
        lambda k: st.tuples(st.one_of(st.none(), st.integers(0, 11)), st.just(k), value[k] if k else st.none())
    )


_events = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(0, 9)),
        st.one_of(st.none(), st.integers(-(2**40), 2**45)),
        st.one_of(st.none(), st.integers(0, 2**40)),
        st.lists(_stat_strategy(), max_size=5),
        st.one_of(st.none(), st.integers(0, 5)),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    planes=st.lists(
        st.tuples(
            st.sampled_from(["/host:CPU", "/device:GPU:0", "/device:TPU:3", "/host:x"]),
            st.lists(st.tuples(st.integers(0, 2**50), _events), max_size=3),
        ),
        min_size=1,
        max_size=3,
    ),
    candidates_only=st.booleans(),
)
def test_same_table_on_random_xspaces(tmp_path, planes, candidates_only):
    ev = {0: "fusion.1", 1: "Wait: y", 2: "all-reduce.3", 3: "f(x)", 4: "a::b", 5: "psum.7", 6: "", 7: "x y"}
    names = {
        0: "hlo_op",
        1: "hlo_module",
        2: "device_ordinal",
        3: "scope_range_id",
        4: "device_offset_ps",
        5: "fusion.1",
        6: "jit_g",
        7: "hlo_op",
        8: "device_ordinal",
        9: "device_duration_ps",
        10: "program_id",
        11: "hlo_category",
    }
    blob = _space(
        [
            _plane(
                pname,
                [
                    _line(
                        f"line{i}",
                        ts,
                        [_event(m, o, d, [_stat(*s) for s in stats], occ) for m, o, d, stats, occ in events],
                    )
                    for i, (ts, events) in enumerate(lines)
                ],
                ev,
                names,
            )
            for pname, lines in planes
        ]
    )
    path = tmp_path / "random.xplane.pb"
    path.write_bytes(blob)
    _same(path, candidates_only)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.one_of(st.integers(0, 2**14), st.integers(0, 2**64 - 1)), min_size=1, max_size=40))
def test_varint_decoding_at_any_length_and_at_the_end_of_the_data(values):
    from analysis.trace import wire_decode as wire

    data, pos, msgs = b"", [], []
    for v in values:  # each as a message {1: v}, the last one flush with the end of the data
        pos.append(len(data) + 1)
        msgs.append((len(data), len(data) + 1 + len(_varint(v))))
        data += _vf(1, v)
    buf = wire.Buf(data)
    got, after = wire.varints(buf, np.array(pos))
    assert got.tolist() == values
    assert after.tolist() == [stop for _, stop in msgs]
    starts, stops = (np.array(x) for x in zip(*msgs))
    first, has = wire.first_varint_field(buf, starts, stops, 0x08)
    assert has.all() and first.tolist() == values
    with pytest.raises(wire.WireError):  # each message cut one byte short
        wire.first_varint_field(buf, starts, stops - 1, 0x08)


def test_a_trace_whose_events_are_all_runtime_bookkeeping_gives_the_empty_table(tmp_path):
    # found by hypothesis in CI: one "Wait: y" event on a host plane, nothing kept
    blob = _space([_plane("/host:CPU", [_line("line0", 0, [_event(1)])], {0: "fusion.1", 1: "Wait: y"}, {})])
    path = tmp_path / "wait.xplane.pb"
    path.write_bytes(blob)
    assert _same(path, True).empty


# --- what XProf reads beyond ProfileData: display names, metadata stats, device timespans ----


def _metadata_entry(key: int, name: str, display: str | None = None, stats=()) -> bytes:
    meta = _vf(1, key) + _lf(2, name) + (b"" if display is None else _lf(4, display))
    return _lf(4, _vf(1, key) + _lf(2, meta + b"".join(_lf(5, s) for s in stats)))


def _texts(col) -> list:
    """A text column's values, None where missing (pandas may type missing text as NaN)."""
    return [v if isinstance(v, str) else None for v in col.tolist()]


def test_tpu_encoding_display_name_metadata_stats_and_device_timespan(tmp_path):
    """A TPU plane as a real v6e trace has it: the metadata name is the instruction text,
    ``display_name`` the instruction name, ``program_id`` / ``hlo_category`` stats on the
    metadata, ``device_offset_ps`` / ``device_duration_ps`` on the events."""
    stat_names = {
        1: "device_offset_ps",
        2: "device_duration_ps",
        3: "program_id",
        4: "hlo_category",
        5: "all-reduce fusion",  # a category given by reference
        6: "flops",
    }
    pid = 17342868964687645945  # a uint64 an int64 cannot hold
    text = "%all-reduce.3 = f32[8]{0} all-reduce(f32[8]{0} %p), replica_groups={}, to_apply=%add"
    fusion, copy = "%fusion.1 = f32[8]{0} fusion(...)", "%copy.2 = f32[8]{0} copy(f32[8]{0} %x)"
    metadata = (
        _metadata_entry(1, text, "all-reduce.3", [_stat(3, "uint64", pid), _stat(4, "str", "all-reduce")])
        + _metadata_entry(2, fusion, "fusion.1", [_stat(4, "ref", 5), _stat(3, "int64", -7)])
        + _metadata_entry(3, "jit_f(17342868964687645945)")
        # the same id twice: the later entry replaces the earlier one whole (map semantics)
        + _metadata_entry(4, "old", "old.1", [_stat(4, "str", "old")])
        + _metadata_entry(4, copy)
    )
    events = [
        # device timespan wins over offset/duration: 81311052500 ps -> 81311052 ns; 75566250 ps -> 75566 ns
        _event(1, 81_311_052_656, 75_566_172, [_stat(1, "int64", 81_311_052_500), _stat(2, "uint64", 75_566_250)]),
        # only the offset: the event's own timespan (line 1000 ns + 5,000,999 ps -> 6000 ns)
        _event(2, 5_000_999, 2_000, [_stat(1, "int64", 9_999_000), _stat(6, "int64", 10)]),
        # a duration that is not an integer: the event's own timespan; the event's own program_id wins
        _event(2, 7_000, 3_000, [_stat(1, "int64", 1_000), _stat(2, "double", 5.0), _stat(3, "int64", 42)]),
        _event(3, 0, 9_000),
        _event(4, 10_000, 1_000),
    ]
    plane = (
        _vf(1, 1)
        + _lf(2, "/device:TPU:0")
        + _lf(3, _line("XLA Ops", 1000, events))
        + metadata
        + b"".join(_lf(5, _vf(1, k) + _lf(2, _vf(1, k) + _lf(2, v))) for k, v in stat_names.items())
    )
    path = tmp_path / "tpu.xplane.pb"
    path.write_bytes(_space([plane]))
    t = read_xplane(path)
    assert t["name"].tolist() == [text, fusion, fusion, "jit_f(17342868964687645945)", copy]
    assert t["start_ns"].tolist() == [81_311_052, 1000 + 5_000, 1000 + 7, 1000, 1000 + 10]
    assert t["duration_ns"].tolist() == [75_566, 2, 3, 9, 1]
    assert _texts(t["display_name"]) == ["all-reduce.3", "fusion.1", "fusion.1", None, None]
    assert _texts(t["program_id"]) == [str(pid), "-7", "42", None, None]
    assert _texts(t["hlo_category"]) == ["all-reduce", "all-reduce fusion", "all-reduce fusion", None, None]
    # the columns ProfileData shows are still its own
    ref = read_with_profiledata(path)
    pd.testing.assert_frame_equal(t[EVENT_COLUMNS], ref[EVENT_COLUMNS], check_exact=True)


# --- agreement with ProfileData on the corners: signed offsets, group-typed fields ------

_EV = {10: "fusion.1", 11: "copy.2", 12: "other"}
_OP, _MOD = _stat(1, "str", "fusion.1"), _stat(2, "str", "jit_f")


def _group(number: int, body: bytes = b"", end: int | None = None) -> bytes:
    return _varint(number << 3 | 3) + body + _varint((number if end is None else end) << 3 | 4)


@pytest.mark.parametrize(
    "event",
    [
        _event(10, -(1 << 63), 10, [_OP, _MOD]),  # the minimum int64 offset: abs() overflowed to +9.2e18
        _event(10, -1999, 10, [_OP, _MOD]),  # toward zero: -1 ns, not -2
        _event(10, 5, 10, [_OP, _MOD]) + _group(9, _vf(1, 1)),  # a group in an event (was a TraceError)
        _event(10, 5, 10, [_OP + _group(9), _MOD]),  # a group in a stat
        _event(10, 5, 10, [_OP, _MOD]) + _group(9, _group(3, _lf(1, "x"))) + _vf(3, 77),  # nested; a later field
        _event(12, 5, 10, [_MOD]) + _vf(1, 10),  # a repeated metadata id: the last wins
        _event(10, 5, 10, [_stat(1, "str", "x.1") + _vf(1, 2), _OP]),  # a repeated stat id: the last wins
    ],
    ids=["min_int64", "negative_offset", "group_event", "group_stat", "group_nested", "dup_mid", "dup_stat_mid"],
)
@pytest.mark.parametrize("candidates_only", [True, False])
def test_same_table_as_profiledata_on_signed_offsets_groups_and_repeated_fields(tmp_path, event, candidates_only):
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(_space([_plane("/device:GPU:0", [_line("XLA Ops", 1000, [event])], _EV, STATS)]))
    table = _same(path, candidates_only)
    assert len(table) == 1


@pytest.mark.parametrize(
    "tail",
    [_group(9, _vf(1, 1), end=8), _varint(9 << 3 | 3) + _vf(1, 1), _varint(9 << 3 | 4)],
    ids=["ended_by_another", "never_ended", "end_without_start"],
)
def test_groups_protobuf_refuses_are_refused(tmp_path, tail):
    path = tmp_path / "t.xplane.pb"
    event = _event(10, 5, 10, [_OP, _MOD]) + tail
    path.write_bytes(_space([_plane("/device:GPU:0", [_line("XLA Ops", 1000, [event])], _EV, STATS)]))
    with pytest.raises(TraceError):
        read_with_profiledata(path)
    with pytest.raises(TraceError):
        read_xplane(path)
