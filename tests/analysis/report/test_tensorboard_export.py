"""A sweep in TensorBoard (analysis/report/tensorboard_export.py): written, then read back as
TensorBoard's own HParams plugin serves it to the HParams tab (its ``/experiment`` and
``/session_groups`` routes over the event multiplexer) and as its event accumulator reads the
Scalars tab's curves. Without tensorboard installed nothing is written and the report says the
install line.

The TensorBoard export (:mod:`analysis.report.tensorboard_export`) byte by byte and case by case:
every event of every run read back with tensorboard's own loader (wall time, step, version record,
plugin data, scalar names and descriptions), run and folder names of points and families that
are not the simplest (no number, an op outside the table, keys that vary, ``/`` and dots),
numpy and missing cells, mixed hparam types, the step rule on both sides of its test, and a
rewrite that drops the curves. Every expected value is worked out by hand; no JAX.
Pinned in issue 30's mutation check.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("tensorboard")

from analysis.report import tensorboard_export  # noqa: E402
from analysis.report.tensorboard_export import (  # noqa: E402
    EVENTS_NAME,
    INSTALL,
    report_line,
    write_tensorboard,
)


def _points() -> pd.DataFrame:
    """Three ok points and a failed one, worked by hand: AllGather over X=8 float32 at V = 8 KiB in
    100 us (algbw 8192 B / 100 us = 0.08192 GB/s, busbw 7/8 of it = 0.07168 GB/s, model 80 us:
    measured/model 1.25) and at 64 KiB in 200 us (0.32768 and 0.28672 GB/s, no model time); AllReduce
    bfloat16 at 8 KiB in 50 us (algbw 0.16384 GB/s, busbw 2 x 7/8 of it = 0.28672 GB/s, model 40 us:
    1.25). dtype differs between points, axes and mesh do not."""
    rows = [
        ("000_op=all_gather,8KiB", "ok", "all_gather", 8192, "float32", 100e-6, 81.92e6, 71.68e6, 80e-6),
        ("001_op=all_gather,64KiB", "ok", "all_gather", 65536, "float32", 200e-6, 327.68e6, 286.72e6, None),
        ("002_op=all_reduce,8KiB", "ok", "all_reduce", 8192, "bfloat16", 50e-6, 163.84e6, 286.72e6, 40e-6),
        ("003_op=all_gather,512KiB", "failed", "all_gather", 524288, "float32", None, None, None, None),
    ]
    df = pd.DataFrame(
        rows,
        columns=["point", "status", "op", "size_bytes", "dtype", "time_s", "algbw_Bps", "busbw_Bps", "model_time_s"],
    )
    df["V_bytes"] = df["size_bytes"]
    df["axes"], df["mesh"], df["group_size"] = "X", "auto", 8
    df["family"] = [f"{op} over X (8), {dt}" for op, dt in zip(df["op"], df["dtype"])]
    df["measured_over_model"] = df["time_s"] / df["model_time_s"]
    return df


def _hparams_tab(logdir) -> tuple[dict, dict]:
    """What TensorBoard's HParams tab gets for ``logdir``: its experiment and its session groups by
    name, from the plugin's own routes."""
    from tensorboard.backend import application
    from tensorboard.backend.event_processing import data_provider
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import hparams_plugin
    from werkzeug.test import Client

    mux = pem.EventMultiplexer()
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    provider = data_provider.MultiplexerDataProvider(mux, str(logdir))
    ctx = base_plugin.TBContext(logdir=str(logdir), multiplexer=mux, data_provider=provider)
    client = Client(application.TensorBoardWSGI([hparams_plugin.HParamsPlugin(ctx)]))

    def post(route, body):
        r = client.post(f"/data/plugin/hparams/{route}", data=json.dumps(body), content_type="application/json")
        assert r.status_code == 200, r.get_data(as_text=True)
        return json.loads(r.get_data(as_text=True))

    experiment = post("experiment", {"experimentName": ""})
    groups = post("session_groups", {"startIndex": 0, "sliceSize": 100, "allowedStatuses": ["STATUS_SUCCESS"]})
    return experiment, {g["name"]: g for g in groups["sessionGroups"]}


def _metrics(group: dict) -> dict[str, float]:
    return {m["name"]["tag"]: m["value"] for m in group["metricValues"] if not math.isnan(m["value"])}


def f32(values):
    """The values as TensorBoard stores them: float32 (its fast loader drops float64 scalars)."""
    if isinstance(values, dict):
        return {k: float(np.float32(v)) for k, v in values.items()}
    return [float(np.float32(v)) for v in values]


def _curve(run_dir, tag: str) -> tuple[list[int], list[float]]:
    """A Scalars run's tag as (steps, values)."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    acc = ea.EventAccumulator(str(run_dir), size_guidance={ea.TENSORS: 0})
    acc.Reload()
    events = acc.Tensors(tag)
    return [e.step for e in events], [tensor_util.make_ndarray(e.tensor_proto).item() for e in events]


def test_each_ok_point_is_a_row_of_the_hparams_tab_with_its_keys_and_metrics(tmp_path):
    out = write_tensorboard(tmp_path, _points())
    assert out == tmp_path / "tensorboard" and (out / EVENTS_NAME).is_file()
    experiment, groups = _hparams_tab(out)
    # op and size always; dtype because the points differ in it; axes and mesh do not
    assert {h["name"]: h["domainDiscrete"] for h in experiment["hparamInfos"]} == {
        "op": ["all_gather", "all_reduce"],
        "size_bytes": [8192.0, 65536.0],
        "dtype": ["bfloat16", "float32"],
    }
    assert [(m["name"]["tag"], m["displayName"]) for m in experiment["metricInfos"]] == [
        ("time_us", "median time (us)"),
        ("busbw_GBps", "bus bandwidth (GB/s)"),
        ("algbw_GBps", "algorithm bandwidth (GB/s)"),
        ("measured_over_model", "measured / model"),
    ]
    # the failed point is no row; each row's name is its folder's number, op, axes, size, dtype
    assert sorted(groups) == [
        "000 AllGather X 8KiB float32",
        "001 AllGather X 64KiB float32",
        "002 AllReduce X 8KiB bfloat16",
    ]
    a, b, c = (groups[n] for n in sorted(groups))
    assert a["hparams"] == {"op": "all_gather", "size_bytes": 8192.0, "dtype": "float32"}
    assert c["hparams"] == {"op": "all_reduce", "size_bytes": 8192.0, "dtype": "bfloat16"}
    assert _metrics(a) == f32(
        {"time_us": 100.0, "busbw_GBps": 0.07168, "algbw_GBps": 0.08192, "measured_over_model": 1.25}
    )
    # no model time: no measured/model
    assert _metrics(b) == f32({"time_us": 200.0, "busbw_GBps": 0.28672, "algbw_GBps": 0.32768})
    assert _metrics(c) == f32(
        {"time_us": 50.0, "busbw_GBps": 0.28672, "algbw_GBps": 0.16384, "measured_over_model": 1.25}
    )
    assert [s["status"] for g in groups.values() for s in g["sessions"]] == ["STATUS_SUCCESS"] * 3


def test_each_family_is_a_curve_against_log2_of_its_size(tmp_path):
    out = write_tensorboard(tmp_path, _points())
    gather = out / "by_size" / "all_gather over X (8), float32"
    # 8 KiB = 2^13 B, 64 KiB = 2^16 B
    steps, busbw = _curve(gather, "by_size/busbw_GBps")
    assert steps == [13, 16] and busbw == f32([0.07168, 0.28672])
    assert _curve(gather, "by_size/time_us")[1] == f32([100.0, 200.0])
    steps, algbw = _curve(out / "by_size" / "all_reduce over X (8), bfloat16", "by_size/algbw_GBps")
    assert steps == [13] and algbw == f32([0.16384])
    # a size that is not a power of two: every step of the family is its size in bytes
    pts = _points()
    pts.loc[1, ["size_bytes", "V_bytes"]] = 65000
    out = write_tensorboard(tmp_path / "odd", pts)
    assert _curve(out / "by_size" / "all_gather over X (8), float32", "by_size/time_us")[0] == [8192, 65000]


def test_a_rewrite_removes_the_runs_of_points_no_longer_there(tmp_path):
    out = write_tensorboard(tmp_path, _points())
    (out / "notes.txt").write_text("mine")  # not shardlab's: left alone
    pts = _points()
    pts.loc[1, "status"] = "failed"
    write_tensorboard(tmp_path, pts)
    assert not (out / "001 AllGather X 64KiB float32").exists()
    assert (out / "000 AllGather X 8KiB float32" / EVENTS_NAME).is_file() and (out / "notes.txt").is_file()
    assert sorted(_hparams_tab(out)[1]) == ["000 AllGather X 8KiB float32", "002 AllReduce X 8KiB bfloat16"]


def test_without_tensorboard_nothing_is_written_and_the_report_names_the_install(tmp_path, monkeypatch):
    monkeypatch.setattr(tensorboard_export, "tensorboard", None)  # as its import failed
    assert write_tensorboard(tmp_path, _points()) is None
    assert list(tmp_path.iterdir()) == []
    assert report_line("SWEEP", None) == (
        f"`{INSTALL}` adds this sweep's TensorBoard HParams table and curves (`tensorboard --logdir SWEEP`)."
    )
    assert INSTALL == 'pip install "shardlab[tensorboard]"'


def test_a_sweeps_report_writes_its_points_for_tensorboard(tiny_sweeps, tmp_path):
    from analysis.report.sweep_report import write_report

    root = tmp_path / "s"
    shutil.copytree(tiny_sweeps["float32"], root)
    write_report(root)
    s = pd.read_csv(root / "summary.csv")
    s = s[(s["status"] == "ok") & s["is_target"]].drop_duplicates("point")
    assert len(s) == 8
    _, groups = _hparams_tab(root)  # --logdir SWEEP: the point folders' own files beside tensorboard/
    names = {}
    for r in s.itertuples():
        size = {4096: "4KiB", 32768: "32KiB", 262144: "256KiB", 2097152: "2MiB"}[r.size_bytes]
        names[f"{r.point[:3]} {'AllGather' if r.op == 'all_gather' else 'AllReduce'} X {size} float32"] = r
    assert sorted(groups) == sorted(names)
    for name, r in names.items():
        assert groups[name]["hparams"] == {"op": r.op, "size_bytes": float(r.size_bytes)}
        want = {
            "time_us": r.time_s * 1e6,
            "busbw_GBps": r.busbw_Bps * 1e-9,
            "algbw_GBps": r.algbw_Bps * 1e-9,
            "measured_over_model": r.time_s / r.model_time_s,
        }
        # a metric the point lacks (no model time, say) is no value in its row
        assert _metrics(groups[name]) == f32({k: v for k, v in want.items() if math.isfinite(v)}), name
    report = (root / "report" / "report.md").read_text()
    assert f"TensorBoard: `tensorboard --logdir {root}` shows this sweep in its HParams tab" in report


def test_the_tensorboard_command_serves_the_table_and_the_curves(tmp_path):
    """The real ``tensorboard --logdir SWEEP`` (its default, fast loader, which reads files
    differently from the Python reader above): the HParams tab's rows and a curve, over HTTP."""
    import re
    import subprocess
    import time
    import urllib.parse
    import urllib.request

    write_tensorboard(tmp_path, _points())
    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(tmp_path), "--host", "127.0.0.1", "--port", "0"]
    server = subprocess.Popen(
        [*cmd, "--reload_interval", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        for line in server.stderr:  # "TensorBoard 2.x at http://127.0.0.1:PORT/ (Press CTRL+C to quit)"
            if m := re.search(r"http://127\.0\.0\.1:(\d+)/", line):
                break
        assert m, "tensorboard printed no address"
        base = f"http://127.0.0.1:{m.group(1)}/data/plugin"

        def get(path, body=None):
            data = None if body is None else json.dumps(body).encode()
            req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.load(r)

        deadline = time.monotonic() + 90  # its first load of the folder, on a busy machine
        while True:
            groups = get(
                "/hparams/session_groups", {"startIndex": 0, "sliceSize": 100, "allowedStatuses": ["STATUS_SUCCESS"]}
            )
            rows = {g["name"]: g for g in groups["sessionGroups"]}
            if len(rows) == 3 and all(_metrics(g) for g in rows.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert {n: (g["hparams"], _metrics(g)) for n, g in rows.items()} == {
            "000 AllGather X 8KiB float32": (
                {"op": "all_gather", "size_bytes": 8192.0, "dtype": "float32"},
                f32({"time_us": 100.0, "busbw_GBps": 0.07168, "algbw_GBps": 0.08192, "measured_over_model": 1.25}),
            ),
            "001 AllGather X 64KiB float32": (
                {"op": "all_gather", "size_bytes": 65536.0, "dtype": "float32"},
                f32({"time_us": 200.0, "busbw_GBps": 0.28672, "algbw_GBps": 0.32768}),
            ),
            "002 AllReduce X 8KiB bfloat16": (
                {"op": "all_reduce", "size_bytes": 8192.0, "dtype": "bfloat16"},
                f32({"time_us": 50.0, "busbw_GBps": 0.28672, "algbw_GBps": 0.16384, "measured_over_model": 1.25}),
            ),
        }
        run = urllib.parse.quote("tensorboard/by_size/all_gather over X (8), float32")
        points = get(f"/scalars/scalars?run={run}&tag=by_size%2Fbusbw_GBps")  # [[wall time, step, value], ...]
        assert [(step, v) for _, step, v in points] == list(zip([13, 16], f32([0.07168, 0.28672])))
    finally:
        server.terminate()
        server.wait(30)


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


def _slashed_points() -> pd.DataFrame:
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
    out = tb.write_tensorboard(tmp_path, _slashed_points())
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
    pts = _slashed_points()
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
    pts = _slashed_points()
    assert tb.curves(pts.drop(columns="V_bytes")) == []
    assert tb.curves(pts.drop(columns="family")) == []
    pts["V_bytes"] = pd.Series([8192, "n/a", None], dtype=object)
    assert tb.curves(pts) == [
        (".X/ag.", "step = log2(V in bytes): 10 = 1 KiB, 20 = 1 MiB, 30 = 1 GiB", [(13, tb.metrics_of(pts.iloc[0]))])
    ]


def test_a_rewrite_without_curves_removes_the_curves_folder(tmp_path, clock):
    out = tb.write_tensorboard(tmp_path, _slashed_points())
    assert (out / "by_size" / "X-ag." / tb.EVENTS_NAME).is_file()
    tb.write_tensorboard(tmp_path, _slashed_points().drop(columns="V_bytes"))
    assert sorted(p.name for p in out.iterdir()) == [
        "000 AllGather X 8KiB float32",
        "001 AllGather X 64KiB float32",
        tb.EVENTS_NAME,
    ]
