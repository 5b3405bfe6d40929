"""A sweep as TensorBoard shows it, in ``SWEEP/tensorboard/``: the HParams table (one session
per ok point: its config keys against its median time, busbw, algbw and measured/model) and
the Scalars tab's curves (one run per collective family, each metric against size), so
``tensorboard --logdir SWEEP`` shows the sweep beside its points' profiles.

The layout the HParams plugin reads: the experiment (which hparams and metrics there are) in
``tensorboard/`` itself, each point a run ``tensorboard/<NNN Op axes size dtype>`` holding its
session start (the hparams), its metrics as scalars at step 0 and its session end; the curves
are runs ``tensorboard/by_size/<family>``, tags ``by_size/<metric>``, at step log2(V in bytes)
when every V of the family is a power of two (10 = 1 KiB, 20 = 1 MiB), else at step V in bytes
(each tag's description says which).

Pure: reads the sweep's points table (:attr:`analysis.sweep.Sweep.points`), writes files, each
whole or not at all (:func:`analysis.runs.rundir.write_bytes_atomic`). TensorBoard is optional
(``pip install "shardlab[tensorboard]"``): without it nothing is written. Event files are
written without TensorFlow, through tensorboard's own protos and record writer.
"""

from __future__ import annotations

import io
import math
import os
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.book.collectives import BY_OP
from analysis.book.units import format_size
from analysis.runs.rundir import write_bytes_atomic

try:  # optional (INSTALL): without it, available() is False and nothing is written
    import tensorboard
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2
    from tensorboard.plugins.hparams import metadata as hp_metadata
    from tensorboard.plugins.hparams import summary_v2 as hp
    from tensorboard.plugins.scalar import metadata as scalar_metadata
    from tensorboard.summary.writer.record_writer import RecordWriter
    from tensorboard.util import tensor_util
except ImportError:
    tensorboard = None

TB_DIR = "tensorboard"  # in the sweep's folder, beside report/ and nccl-tests/
CURVES_DIR = "by_size"  # the family runs, under TB_DIR; also their tags' prefix
EVENTS_NAME = "events.out.tfevents.0.shardlab"  # one fixed name: a rebuilt report replaces it
INSTALL = 'pip install "shardlab[tensorboard]"'

# (tag, column, scale, display name): a point's metrics, in TensorBoard's units
METRICS = (
    ("time_us", "time_s", 1e6, "median time (us)"),
    ("busbw_GBps", "busbw_Bps", 1e-9, "bus bandwidth (GB/s)"),
    ("algbw_GBps", "algbw_Bps", 1e-9, "algorithm bandwidth (GB/s)"),
    ("measured_over_model", "measured_over_model", 1.0, "measured / model"),
)
# the config keys a point can differ in, in the order run names and the table give them;
# op and size_bytes always, the others where the sweep's points differ in them
HPARAM_KEYS = ("op", "size_bytes", "dtype", "axes", "mesh", "mesh_axes", "placement", "strategy", "grad", "dims")
ALWAYS = ("op", "size_bytes")


def available() -> bool:
    """Whether tensorboard is installed (the ``tensorboard`` extra)."""
    return tensorboard is not None


def _value(v):
    """A cell as an HParams value (bool, number or str), or None where the point has none."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return None
    if hasattr(v, "item") and not isinstance(v, str):  # numpy scalar
        v = v.item()
    if isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def ok_points(points: pd.DataFrame) -> pd.DataFrame:
    """The points that become sessions: status ok, one row per point, in the sweep's order."""
    if not len(points):
        return points
    ok = points[points["status"] == "ok"] if "status" in points else points
    return ok.drop_duplicates("point")


def hparam_keys(ok: pd.DataFrame) -> list[str]:
    """``op`` and ``size_bytes``, then each other config key whose value differs between points."""
    keys = []
    for k in HPARAM_KEYS:
        if k not in ok:
            continue
        values = {_value(v) for v in ok[k]} - {None}
        if values and (k in ALWAYS or len({_value(v) for v in ok[k]}) > 1):
            keys.append(k)
    return keys


def run_name(row: dict, keys: list[str], index: int) -> str:
    """``003 AllGather X 2MiB float32``: the point's number, op, axes, size and dtype, then the
    other keys that vary (``mesh=auto``); a folder name (no ``/``), unique by the number."""
    m = re.match(r"(\d+)_", str(row.get("point") or ""))
    parts = [m.group(1) if m else f"{index:03d}"]
    op = _value(row.get("op"))
    parts.append(BY_OP[op].notation if op in BY_OP else str(op))
    for k in ("axes", "size_bytes", "dtype"):
        v = _value(row.get(k))
        if v is not None:
            parts.append(format_size(v) if k == "size_bytes" else str(v))
    for k in keys:
        v = _value(row.get(k))
        if k not in ("op", "axes", "size_bytes", "dtype") and v is not None:
            parts.append(str(v) if k == "mesh_axes" else f"{k}={v}")
    return re.sub(r"[/\\]+", "-", " ".join(parts)).lstrip(".")


def metrics_of(row) -> dict[str, float]:
    """The point's metrics in TensorBoard's units (us, GB/s), each only where the point has it
    (measured/model is empty where the model gave no time)."""
    out = {}
    for tag, col, scale, _ in METRICS:
        v = _value(row.get(col))
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out[tag] = float(v) * scale
    return out


def sessions(points: pd.DataFrame) -> list[tuple[str, dict, dict[str, float]]]:
    """``(run name, hparams, metrics)`` per ok point: what the HParams table shows."""
    ok = ok_points(points)
    keys = hparam_keys(ok)
    out = []
    for i, row in enumerate(ok.to_dict("records")):
        hp = {k: _value(row.get(k)) for k in keys}
        out.append((run_name(row, keys, i), {k: v for k, v in hp.items() if v is not None}, metrics_of(row)))
    return out


def size_steps(sizes: list[int]) -> tuple[list[int], str]:
    """The step each size is drawn at and the rule in words: log2 of the size when every size is
    a power of two (evenly spaced, as a geometric sweep is), else the size in bytes."""
    if all(s > 0 and s & (s - 1) == 0 for s in sizes):
        return [s.bit_length() - 1 for s in sizes], "step = log2(V in bytes): 10 = 1 KiB, 20 = 1 MiB, 30 = 1 GiB"
    return list(sizes), "step = V in bytes"


def curves(points: pd.DataFrame) -> list[tuple[str, str, list[tuple[int, dict[str, float]]]]]:
    """``(family, step rule, [(step, metrics), ...])`` per family of ok points with a V, by V."""
    ok = ok_points(points)
    if not len(ok) or "family" not in ok or "V_bytes" not in ok:
        return []
    ok = ok[pd.to_numeric(ok["V_bytes"], errors="coerce").notna()]
    out = []
    for fam, g in ok.groupby("family", sort=False):
        g = g.sort_values("V_bytes")
        steps, rule = size_steps([int(v) for v in g["V_bytes"]])
        rows = [(s, m) for s, r in zip(steps, g.to_dict("records")) if (m := metrics_of(r))]
        if rows:
            out.append((str(fam), rule, rows))
    return out


def _events(summaries: list[tuple[int, object]], wall: float) -> bytes:
    """An event file's bytes: the version record, then one event per ``(step, Summary)``."""
    buf = io.BytesIO()
    w = RecordWriter(buf)
    w.write(event_pb2.Event(wall_time=wall, file_version="brain.Event:2").SerializeToString())
    for step, summary in summaries:
        w.write(event_pb2.Event(wall_time=wall, step=step, summary=summary).SerializeToString())
    return buf.getvalue()


def _scalars(values: dict[str, float], prefix: str = "", description: str = ""):
    """One Summary of scalars, each a float32 tensor: TensorBoard's default (fast, Rust) loader
    drops float64 scalars, so 7 significant digits is what it can show."""
    names = {tag: name for tag, _, _, name in METRICS}
    s = summary_pb2.Summary()
    for tag, v in values.items():
        meta = scalar_metadata.create_summary_metadata(display_name=names[tag], description=description)
        s.value.add(tag=prefix + tag, metadata=meta, tensor=tensor_util.make_tensor_proto(np.float32(v)))
    return s


def _plugin_summary(tag: str, data):
    """A Summary holding HParams plugin data (as ``summary_v2`` builds it, without TensorFlow)."""
    s = summary_pb2.Summary()
    s.value.add(tag=tag, metadata=hp_metadata.create_summary_metadata(data), tensor=hp_metadata.NULL_TENSOR)
    return s


def _experiment(sess: list[tuple[str, dict, dict]], keys: list[str], wall: float):
    """The experiment summary: every hparam with its values, every metric with its name."""
    hparams = []
    for k in keys:
        values = sorted({h[k] for _, h, _ in sess if k in h}, key=lambda v: (str(type(v)), v))
        same_type = len({type(v) for v in values}) == 1
        hparams.append(hp.HParam(k, hp.Discrete(values) if values and same_type else None))
    tags = {t for _, _, m in sess for t in m}
    metrics = [hp.Metric(tag, display_name=name) for tag, _, _, name in METRICS if tag in tags]
    return hp.hparams_config_pb(hparams=hparams, metrics=metrics, time_created_secs=wall)


def write_tensorboard(root: str | Path, points: pd.DataFrame) -> Path | None:
    """Write ``root/tensorboard/`` for a sweep's points table (see the module's docstring) and
    return that folder; None, writing nothing, when tensorboard is not installed or no point is
    ok. Runs of an earlier export that this one no longer has are removed."""
    if not available() or not len(ok_points(points)):
        return None
    out = Path(root) / TB_DIR
    wall = time.time()
    sess = sessions(points)
    keys = hparam_keys(ok_points(points))
    files = {out / EVENTS_NAME: _events([(0, _experiment(sess, keys, wall))], wall)}
    end = plugin_data_pb2.HParamsPluginData(
        session_end_info=plugin_data_pb2.SessionEndInfo(status=api_pb2.STATUS_SUCCESS, end_time_secs=wall)
    )
    for name, hparams, metrics in sess:
        start = hp.hparams_pb(hparams, trial_id=name, start_time_secs=wall)
        summaries = [(0, start), (0, _scalars(metrics)), (0, _plugin_summary(hp_metadata.SESSION_END_INFO_TAG, end))]
        files[out / name / EVENTS_NAME] = _events(summaries, wall)
    for fam, rule, rows in curves(points):
        folder = out / CURVES_DIR / re.sub(r"[/\\]+", "-", fam).lstrip(".")
        files[folder / EVENTS_NAME] = _events([(s, _scalars(m, CURVES_DIR + "/", rule)) for s, m in rows], wall)
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, data)
    _remove_stale(out, set(files))
    return out


def _remove_stale(out: Path, keep: set[Path]) -> None:
    """Remove the event files of runs an earlier export wrote and this one did not (a point since
    renamed or failed), and the folders that leaves empty; nothing else is touched."""
    for folder, _, names in os.walk(out, topdown=False):
        here = Path(folder)
        if EVENTS_NAME in names and here / EVENTS_NAME not in keep:
            (here / EVENTS_NAME).unlink()
        if here != out and not any(here.iterdir()):
            here.rmdir()


def report_line(root: str | Path, written: Path | None) -> str:
    """The report's sentence on TensorBoard: how to open what :func:`write_tensorboard` wrote,
    or, without tensorboard installed, the one command that adds it; "" when there was nothing
    to write."""
    if written is not None:
        return (
            f"TensorBoard: `tensorboard --logdir {root}` shows this sweep in its HParams tab (one row per ok "
            "point: its config keys against median time, bus and algorithm bandwidth and measured/model) and, "
            f"in Scalars, each family's curves against size (`{TB_DIR}/{CURVES_DIR}/`), beside the points' profiles."
        )
    if not available():
        return f"`{INSTALL}` adds this sweep's TensorBoard HParams table and curves (`tensorboard --logdir {root}`)."
    return ""
