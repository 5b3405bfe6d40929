"""The TensorBoard export (:mod:`analysis.report.tensorboard_export`) byte by byte and case by case:
every event of every run read back with tensorboard's own loader (wall time, step, version record,
plugin data, scalar names and descriptions), run and folder names of points and families that
are not the simplest (no number, an op outside the table, keys that vary, ``/`` and dots),
numpy and missing cells, mixed hparam types, the step rule on both sides of its test, and a
rewrite that drops the curves. Every expected value is worked out by hand; no JAX.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_file_loader import EventFileLoader  # noqa: E402
from tensorboard.plugins.hparams import api_pb2  # noqa: E402
from tensorboard.plugins.hparams import metadata as hp_metadata  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

from analysis.report import tensorboard_export as tb  # noqa: E402

WALL = 1_700_000_000.25  # the export's clock, fixed


@pytest.fixture
def clock(monkeypatch):
    monkeypatch.setattr(tb, "time", SimpleNamespace(time=lambda: WALL))


def _events(run_dir) -> list:
    return list(EventFileLoader(str(run_dir / tb.EVENTS_NAME)).Load())


def _points() -> pd.DataFrame:
    """Two ok AllGather points of one family (8 KiB in 100 us: algbw 0.08192 GB/s, busbw 7/8 of
    it 0.07168 GB/s, model 80 us: measured/model 1.25; 64 KiB in 200 us, no model time) and a
    failed one; the family's name has a slash, a leading dot and an X after it."""
    df = pd.DataFrame(
        [
            ("000_op=all_gather,8KiB", "ok", "all_gather", 8192, 100e-6, 81.92e6, 71.68e6, 1.25),
            ("001_op=all_gather,64KiB", "ok", "all_gather", 65536, 200e-6, 327.68e6, 286.72e6, None),
            ("002_op=all_gather,1MiB", "failed", "all_gather", 1 << 20, None, None, None, None),
        ],
        columns=["point", "status", "op", "size_bytes", "time_s", "algbw_Bps", "busbw_Bps", "measured_over_model"],
    )
    df["V_bytes"], df["axes"], df["dtype"], df["family"] = df["size_bytes"], "X", "float32", ".X/ag."
    return df


def _scalar_values(event) -> dict:
    """{tag: (value, display name, description)} of an event's scalars."""
    return {
        v.tag: (
            tensor_util.make_ndarray(v.tensor).item(),
            v.metadata.display_name,
            v.metadata.summary_description,
        )
        for v in event.summary.value
    }


def test_every_event_carries_the_export_time_step_0_and_the_version_record_first(tmp_path, clock):
    out = tb.write_tensorboard(tmp_path, _points())
    root = _events(out)
    assert [(e.wall_time, e.step, e.file_version) for e in root] == [(WALL, 0, "brain.Event:2"), (WALL, 0, "")]
    (exp,) = root[1].summary.value
    assert exp.tag == hp_metadata.EXPERIMENT_TAG
    experiment = hp_metadata.parse_experiment_plugin_data(exp.metadata.plugin_data.content)
    assert experiment.time_created_secs == WALL

    run = _events(out / "000 AllGather X 8KiB float32")
    assert [(e.wall_time, e.step, e.file_version) for e in run] == [(WALL, 0, "brain.Event:2")] + [(WALL, 0, "")] * 3
    (start,) = run[1].summary.value
    assert start.tag == hp_metadata.SESSION_START_INFO_TAG
    info = hp_metadata.parse_session_start_info_plugin_data(start.metadata.plugin_data.content)
    assert (info.start_time_secs, info.group_name) == (WALL, "000 AllGather X 8KiB float32")
    f32 = lambda v: float(np.float32(v))  # noqa: E731
    assert _scalar_values(run[2]) == {
        "time_us": (f32(100.0), "median time (us)", ""),
        "busbw_GBps": (f32(0.07168), "bus bandwidth (GB/s)", ""),
        "algbw_GBps": (f32(0.08192), "algorithm bandwidth (GB/s)", ""),
        "measured_over_model": (1.25, "measured / model", ""),
    }
    (end,) = run[3].summary.value
    assert end.tag == hp_metadata.SESSION_END_INFO_TAG
    ended = hp_metadata.parse_session_end_info_plugin_data(end.metadata.plugin_data.content)
    assert (ended.end_time_secs, ended.status) == (WALL, api_pb2.STATUS_SUCCESS)

    # the family ".X/ag.": the slash a dash, the leading dot dropped (not the X), the trailing one kept
    curve = _events(out / "by_size" / "X-ag.")
    assert [(e.wall_time, e.step) for e in curve] == [(WALL, 0), (WALL, 13), (WALL, 16)]
    rule = "step = log2(V in bytes): 10 = 1 KiB, 20 = 1 MiB, 30 = 1 GiB"
    assert _scalar_values(curve[2])["by_size/time_us"] == (f32(200.0), "median time (us)", rule)
    assert {d for e in curve[1:] for _, _, d in _scalar_values(e).values()} == {rule}
    assert sorted(p.name for p in (out / "by_size").iterdir()) == ["X-ag."]


def test_an_hparam_of_mixed_types_has_no_domain_and_one_of_one_type_a_sorted_one(tmp_path, clock):
    pts = _points()
    pts["dims"] = pd.Series([3, "3x4", None], dtype=object)  # an int and a str: no discrete domain
    pts["mesh"] = ["b", "a", "c"]
    out = tb.write_tensorboard(tmp_path, pts)
    (exp,) = _events(out)[1].summary.value
    infos = hp_metadata.parse_experiment_plugin_data(exp.metadata.plugin_data.content).hparam_infos
    got = {h.name: [getattr(v, v.WhichOneof("kind")) for v in h.domain_discrete.values] for h in infos}
    assert got == {"op": ["all_gather"], "size_bytes": [8192.0, 65536.0], "mesh": ["a", "b"], "dims": []}
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [
        "000 AllGather X 8KiB float32 mesh=b dims=3",
        "001 AllGather X 64KiB float32 mesh=a dims=3x4",
        "by_size",
    ]


def test_run_names_of_points_without_a_number_outside_the_table_and_with_odd_cells():
    keys = ["op", "size_bytes", "axes", "mesh", "placement", "mesh_axes"]
    row = {"op": "matmul", "axes": "X", "size_bytes": np.int64(2048), "dtype": None, "mesh": "2/4", "placement": pd.NA}
    row["mesh_axes"] = "X=2,Y=4."
    # no "NNN_" point: the index; an op the table lacks: its own name; numpy size: KiB; a None
    # dtype and an NA placement: left out; mesh_axes bare; "/" a dash; the trailing dot kept
    assert tb.run_name(row, keys, 7) == "007 matmul X 2KiB mesh=2-4 X=2,Y=4."
    assert tb.run_name({"point": "12_x", "op": "my/op", "dtype": math.nan}, [], 3) == "12 my-op"
    assert tb.run_name({"op": "all_reduce", "axes": pd.NA, "size_bytes": np.float64(1.0)}, [], 0) == "000 AllReduce 1B"


def test_metrics_of_numpy_cells_in_tensorboard_units():
    # numpy scalars are numbers (a float32 is no Python float, an int64 no int); a bool is none
    row = {"time_s": np.float32(0.5), "busbw_Bps": np.int64(3_000_000_000), "algbw_Bps": np.bool_(True)}
    assert tb.metrics_of(row) == {"time_us": 500000.0, "busbw_GBps": 3.0}
    assert tb.metrics_of({"time_s": math.inf, "busbw_Bps": None, "measured_over_model": pd.NA}) == {}


def test_sessions_number_the_points_that_have_no_number_in_order():
    pts = pd.DataFrame(
        {"point": ["a", "b"], "op": ["all_gather", "all_reduce"], "size_bytes": [1024, 1024], "time_s": [1e-6, 2e-6]}
    )
    assert tb.sessions(pts) == [
        ("000 AllGather 1KiB", {"op": "all_gather", "size_bytes": 1024}, {"time_us": 1.0}),
        ("001 AllReduce 1KiB", {"op": "all_reduce", "size_bytes": 1024}, {"time_us": 2.0}),
    ]


def test_ok_points_without_a_status_column_are_all_ok_and_one_row_per_point():
    pts = pd.DataFrame({"point": ["000_a", "000_a", "001_b"], "is_target": [True, False, True]})
    assert tb.ok_points(pts)["point"].tolist() == ["000_a", "001_b"]


def test_hparam_keys_skip_a_missing_key_and_go_on_to_the_next():
    ok = pd.DataFrame({"op": ["all_gather"] * 2, "size_bytes": [1, 2], "axes": ["X", "Y"], "grad": [True, True]})
    assert tb.hparam_keys(ok) == ["op", "size_bytes", "axes"]  # no dtype column; grad does not vary


@pytest.mark.parametrize(
    "sizes, steps, rule",
    [
        ([1, 1024], [0, 10], "step = log2(V in bytes): 10 = 1 KiB, 20 = 1 MiB, 30 = 1 GiB"),  # 2^0 is a power of two
        ([0, 1024], [0, 1024], "step = V in bytes"),  # 0 is none
        ([2, 3], [2, 3], "step = V in bytes"),
    ],
)
def test_size_steps_on_both_sides_of_a_power_of_two(sizes, steps, rule):
    assert tb.size_steps(sizes) == (steps, rule)


def test_curves_need_a_family_and_a_v_and_leave_out_a_v_that_is_no_number():
    pts = _points()
    assert tb.curves(pts.drop(columns="V_bytes")) == []
    assert tb.curves(pts.drop(columns="family")) == []
    pts["V_bytes"] = pd.Series([8192, "n/a", None], dtype=object)
    assert tb.curves(pts) == [
        (".X/ag.", "step = log2(V in bytes): 10 = 1 KiB, 20 = 1 MiB, 30 = 1 GiB", [(13, tb.metrics_of(pts.iloc[0]))])
    ]


def test_a_rewrite_without_curves_removes_the_curves_folder(tmp_path, clock):
    out = tb.write_tensorboard(tmp_path, _points())
    assert (out / "by_size" / "X-ag." / tb.EVENTS_NAME).is_file()
    tb.write_tensorboard(tmp_path, _points().drop(columns="V_bytes"))
    assert sorted(p.name for p in out.iterdir()) == [
        "000 AllGather X 8KiB float32",
        "001 AllGather X 64KiB float32",
        tb.EVENTS_NAME,
    ]
