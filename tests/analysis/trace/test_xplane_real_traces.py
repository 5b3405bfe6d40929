"""The trace reader and the device-op table on real TPU and GPU traces (``../shared/traces/``,
see its README): a TPU v6e, MI300X and MI355X traces from JAX on ROCm, and a TensorFlow trace
on V100s that is not XLA.

Every event agrees with ``jax.profiler.ProfileData`` (the columns it shows); what it does not
show (an event metadata's ``display_name`` and stats, the events' device timespans) agrees
with an independent walk of the protobuf written here: the whole ``xplane.proto`` schema
declared in this file and parsed by ``google.protobuf``, one Python step per event.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from xplane_reference import read_with_profiledata

from analysis.trace import EVENT_COLUMNS, XPROF_COLUMNS, device_ops, read_xplane

TRACES = Path(__file__).resolve().parents[4] / "shared" / "traces"
FILES = sorted(TRACES.glob("*.xplane.pb")) if TRACES.is_dir() else []

pytestmark = pytest.mark.skipif(
    not FILES, reason=f"no real traces at {TRACES} (the shared/traces folder beside the repo)"
)


def _ids(p: Path) -> str:
    return p.name.removesuffix(".xplane.pb")


# --- the independent walk ------------------------------------------------------------------


def _xspace_class():
    """``XSpace`` of tsl's xplane.proto, declared field by field (the wheels ship no xplane_pb2)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="test/xplane_full.proto", package="xt", syntax="proto3")
    one, many = F.LABEL_OPTIONAL, F.LABEL_REPEATED

    def message(name, fields, parent=None, oneof=None):
        m = (parent.nested_type if parent else fdp.message_type).add(name=name)
        if oneof:
            m.oneof_decl.add(name=oneof[0])
        for fname, number, ftype, label, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = type_name
            if oneof and fname in oneof[1]:
                f.oneof_index = 0
        return m

    I64, U64, STR, BYTES, MSG, DBL = (
        F.TYPE_INT64,
        F.TYPE_UINT64,
        F.TYPE_STRING,
        F.TYPE_BYTES,
        F.TYPE_MESSAGE,
        F.TYPE_DOUBLE,
    )
    message("XSpace", [("planes", 1, MSG, many, ".xt.XPlane")])
    plane = message(
        "XPlane",
        [
            ("id", 1, I64, one, None),
            ("name", 2, STR, one, None),
            ("lines", 3, MSG, many, ".xt.XLine"),
            ("event_metadata", 4, MSG, many, ".xt.XPlane.EventMetadataEntry"),
            ("stat_metadata", 5, MSG, many, ".xt.XPlane.StatMetadataEntry"),
            ("stats", 6, MSG, many, ".xt.XStat"),
        ],
    )
    for entry, value in (("EventMetadataEntry", ".xt.XEventMetadata"), ("StatMetadataEntry", ".xt.XStatMetadata")):
        m = message(entry, [("key", 1, I64, one, None), ("value", 2, MSG, one, value)], parent=plane)
        m.options.map_entry = True
    message(
        "XLine",
        [
            ("id", 1, I64, one, None),
            ("display_id", 10, I64, one, None),
            ("name", 2, STR, one, None),
            ("display_name", 11, STR, one, None),
            ("timestamp_ns", 3, I64, one, None),
            ("duration_ps", 9, I64, one, None),
            ("events", 4, MSG, many, ".xt.XEvent"),
        ],
    )
    message(
        "XEvent",
        [
            ("metadata_id", 1, I64, one, None),
            ("offset_ps", 2, I64, one, None),
            ("num_occurrences", 5, I64, one, None),
            ("duration_ps", 3, I64, one, None),
            ("stats", 4, MSG, many, ".xt.XStat"),
        ],
        oneof=("data", {"offset_ps", "num_occurrences"}),
    )
    values = ("double_value", "uint64_value", "int64_value", "str_value", "bytes_value", "ref_value")
    message(
        "XStat",
        [
            ("metadata_id", 1, I64, one, None),
            ("double_value", 2, DBL, one, None),
            ("uint64_value", 3, U64, one, None),
            ("int64_value", 4, I64, one, None),
            ("str_value", 5, STR, one, None),
            ("bytes_value", 6, BYTES, one, None),
            ("ref_value", 7, U64, one, None),
        ],
        oneof=("value", set(values)),
    )
    message(
        "XEventMetadata",
        [
            ("id", 1, I64, one, None),
            ("name", 2, STR, one, None),
            ("display_name", 4, STR, one, None),
            ("metadata", 3, BYTES, one, None),
            ("stats", 5, MSG, many, ".xt.XStat"),
            ("child_id", 6, I64, many, None),
        ],
    )
    message(
        "XStatMetadata", [("id", 1, I64, one, None), ("name", 2, STR, one, None), ("description", 3, STR, one, None)]
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("xt.XSpace"))


def _walk(path: Path) -> list[dict]:
    """Per event, in file order: what XProf reads (``GetEventTimespan``,
    ``SetOpMetadataFromHloEventMetadata``), the event's own stat before its metadata's."""
    space = _xspace_class()()
    space.ParseFromString(path.read_bytes())
    rows = []
    for plane in space.planes:
        stat_name = {k: v.name for k, v in plane.stat_metadata.items()}

        def stats(owner, stat_name=stat_name):
            out = {}
            for st in owner.stats:
                kind = st.WhichOneof("value")
                if st.metadata_id in stat_name and kind is not None:
                    v = getattr(st, kind)
                    out[stat_name[st.metadata_id]] = stat_name.get(v, "") if kind == "ref_value" else v
            return out

        for line in plane.lines:
            for ev in line.events:
                own = stats(ev)
                meta = plane.event_metadata[ev.metadata_id] if ev.metadata_id in plane.event_metadata else None
                from_meta = stats(meta) if meta is not None else {}
                off, dur = own.get("device_offset_ps"), own.get("device_duration_ps")
                if isinstance(off, int) and isinstance(dur, int):
                    start, duration = off // 1000, dur // 1000  # non-negative here: floor is truncation
                else:
                    start = line.timestamp_ns + (ev.offset_ps if ev.WhichOneof("data") == "offset_ps" else 0) // 1000
                    duration = ev.duration_ps // 1000
                row = {"start_ns": float(start), "duration_ns": float(duration)}
                row["display_name"] = meta.display_name if meta is not None and meta.display_name else None
                for key in ("program_id", "hlo_category"):
                    v = own.get(key, from_meta.get(key))
                    row[key] = None if v is None else str(v)
                rows.append(row)
    return rows


# --- the tests --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", FILES, ids=_ids)
def test_every_event_agrees_with_profiledata(path):
    for candidates_only in (False, True):
        ours = read_xplane(path, candidates_only)
        ref = read_with_profiledata(path, candidates_only)
        pd.testing.assert_frame_equal(ours[EVENT_COLUMNS], ref[EVENT_COLUMNS], check_exact=True)


@pytest.mark.parametrize("path", FILES, ids=_ids)
def test_display_names_metadata_stats_and_device_timespans_agree_with_a_protobuf_walk(path):
    ours = read_xplane(path, candidates_only=False)
    walk = _walk(path)
    assert len(ours) == len(walk)
    for col in ("start_ns", "duration_ns"):
        assert ours[col].tolist() == [r[col] for r in walk], col
    for col in XPROF_COLUMNS:
        got = [v if isinstance(v, str) else None for v in ours[col].tolist()]
        assert got == [r[col] for r in walk], col


def test_the_tpu_trace_reads_as_xprof_reads_it():
    """The v6e trace, by hand: three executions of one Pallas custom call, named by their
    metadata; times from the device timespans (ps), preferred to the events' own."""
    path = TRACES / "tpu_v6e1_pallas_matmul.xplane.pb"
    ev = read_xplane(path)
    ops = ev[ev["line"] == "XLA Ops"]
    assert ops["display_name"].tolist() == ["matmul_optimized.1"] * 3
    assert ops["program_id"].tolist() == ["17342868964687645945"] * 3
    assert ops["hlo_category"].tolist() == ["custom-call"] * 3
    assert ops["start_ns"].tolist() == [81_311_052.0, 81_629_481.0, 81_842_152.0]  # device_offset_ps // 1000
    assert ops["duration_ns"].tolist() == [75_566.0, 75_785.0, 75_911.0]  # 75566250, 75785000, 75911250 ps
    modules = ev[ev["line"] == "XLA Modules"]
    # device_duration_ps 75571250, 75790000, 75916250 (the events' own: 75571172, 75789922, 75916250)
    assert modules["duration_ns"].tolist() == [75_571.0, 75_790.0, 75_916.0]


@pytest.mark.parametrize("path", FILES, ids=_ids)
def test_every_device_op_gets_an_instruction_name_and_a_module(path):
    from analysis.profiling.profile_load import hlo_from_xplane

    ops = device_ops(read_xplane(path))
    carried = {k.rsplit("(", 1)[0] for k in hlo_from_xplane(path)}  # "jit_f(17)": the modules the trace carries
    if not carried:  # TensorFlow, not XLA: no HLO ops on its GPU planes
        assert ops.empty
        return
    assert len(ops) > 0
    assert ops["hlo_op"].str.len().gt(0).all()
    assert not ops["hlo_op"].str.contains(" = ", regex=False).any()  # a name, not the instruction text
    assert set(ops["hlo_module"]) <= carried


def test_device_ops_of_the_real_traces_by_hand():
    tpu = device_ops(read_xplane(TRACES / "tpu_v6e1_pallas_matmul.xplane.pb"))
    assert tpu[["device", "hlo_module", "hlo_op", "iteration"]].values.tolist() == [
        [0, "jit_matmul_optimized", "matmul_optimized.1", i] for i in range(3)
    ]
    mi300 = device_ops(read_xplane(TRACES / "gpu_mi300x8_conv3d.xplane.pb"))
    assert sorted(mi300["device"].unique()) == list(range(8))
    assert set(mi300["hlo_module"]) == {"jit_forward_3d_conv"}
