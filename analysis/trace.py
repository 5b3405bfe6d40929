"""Traces: an ``.xplane.pb`` file -> a table of events -> per-device HLO-op intervals.

The seam (DESIGN.md): :func:`read_xplane` is the only code that touches the profiler's
format; it yields one row per event. Everything after it works on that table and is
tested with hand-built tables in the shapes CPU, TPU and GPU profiles have:

* CPU: plane ``/host:CPU``, lines ``tf_XLAPjRtCpuClient/<thread>``, op events named after
  the HLO instruction with stats ``hlo_op``, ``hlo_module``, ``device_ordinal``.
* TPU: planes ``/device:TPU:N``, line ``XLA Ops``, events named after the HLO instruction.
* GPU: planes ``/device:GPU:N``, one line per stream, kernel events (``nccl...``) carrying
  ``hlo_op`` / ``hlo_module`` stats.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

EVENT_COLUMNS = ["plane", "line", "name", "start_ns", "duration_ns", "hlo_op", "hlo_module", "device_ordinal"]
_KEPT_STATS = ("hlo_op", "hlo_module", "device_ordinal")
_DEVICE_PLANE = re.compile(r"^/device:(TPU|GPU):(\d+)")


class TraceError(ValueError):
    """A trace file that cannot be read (missing, truncated, not an xplane)."""


def read_xplane(path: str | Path) -> pd.DataFrame:
    """Every event of an xplane file as a DataFrame with :data:`EVENT_COLUMNS`.

    Uses ``jax.profiler.ProfileData`` (the reader that ships with jaxlib). Stats other
    than the few the analysis needs are dropped to keep this fast (one pass, no per-event
    dicts).
    """
    from jax.profiler import ProfileData

    path = Path(path)
    try:
        data = ProfileData.from_serialized_xspace(path.read_bytes())
    except Exception as exc:  # the C++ reader raises a bare RuntimeError on bad bytes
        raise TraceError(f"{path}: not a readable xplane trace ({exc})") from exc
    cols: dict[str, list] = {c: [] for c in EVENT_COLUMNS}
    for plane in data.planes:
        pname = plane.name
        for line in plane.lines:
            lname = line.name
            for ev in line.events:
                cols["plane"].append(pname)
                cols["line"].append(lname)
                cols["name"].append(ev.name)
                cols["start_ns"].append(ev.start_ns)
                cols["duration_ns"].append(ev.duration_ns)
                hlo_op = hlo_module = dev = None
                for key, value in ev.stats:
                    if key == "hlo_op":
                        hlo_op = value
                    elif key == "hlo_module":
                        hlo_module = value
                    elif key == "device_ordinal":
                        dev = value
                cols["hlo_op"].append(hlo_op)
                cols["hlo_module"].append(hlo_module)
                cols["device_ordinal"].append(dev)
    df = pd.DataFrame(cols)
    df["start_ns"] = df["start_ns"].astype("float64")
    df["duration_ns"] = df["duration_ns"].astype("float64")
    return df


def device_ops(events: pd.DataFrame) -> pd.DataFrame:
    """The HLO-op executions per device: columns ``device, hlo_module, hlo_op, name,
    start_ns, end_ns, duration_ns, iteration``.

    ``iteration`` counts the executions of one op on one device in time order, so the
    k-th all-gather on every device belongs to the same step (no reliance on run ids,
    which not every backend records).
    """
    plane_dev = events["plane"].str.extract(_DEVICE_PLANE)
    on_device_plane = plane_dev[1].notna()
    tpu_ops = on_device_plane & (plane_dev[0] == "TPU") & (events["line"] == "XLA Ops")
    gpu_ops = on_device_plane & (plane_dev[0] == "GPU") & events["hlo_op"].notna()
    cpu_ops = (events["plane"] == "/host:CPU") & events["hlo_op"].notna() & events["device_ordinal"].notna()
    keep = tpu_ops | gpu_ops | cpu_ops
    ops = events.loc[keep].copy()
    dev_from_plane = pd.to_numeric(plane_dev.loc[keep, 1], errors="coerce")
    ops["device"] = np.where(cpu_ops[keep], pd.to_numeric(ops["device_ordinal"], errors="coerce"), dev_from_plane)
    ops["hlo_op"] = ops["hlo_op"].where(ops["hlo_op"].notna(), ops["name"])
    ops["hlo_module"] = ops["hlo_module"].fillna("")
    ops["end_ns"] = ops["start_ns"] + ops["duration_ns"]
    ops = ops.sort_values(["device", "start_ns"], kind="stable")
    ops["iteration"] = ops.groupby(["device", "hlo_module", "hlo_op"]).cumcount()
    ops["device"] = ops["device"].astype(int)
    return ops[["device", "hlo_module", "hlo_op", "name", "start_ns", "end_ns", "duration_ns", "iteration"]].reset_index(drop=True)


def op_steps(ops: pd.DataFrame) -> pd.DataFrame:
    """One row per (module, op, iteration) across the devices that ran it.

    ``op_time_s`` runs from the last device's start to the last device's end: on the CPU
    backend each device thread waits inside the collective until every participant has
    arrived, so a device's own duration includes that wait (``arrival_skew_s``).
    ``device_time_s`` is the median per-device duration, which is what TPU/GPU profiles
    report per op.
    """
    g = ops.groupby(["hlo_module", "hlo_op", "iteration"])
    out = g.agg(devices=("device", "nunique"), start_min=("start_ns", "min"), start_max=("start_ns", "max"),
                end_max=("end_ns", "max"), device_ns=("duration_ns", "median"))
    out["op_time_s"] = (out["end_max"] - out["start_max"]) * 1e-9
    out["device_time_s"] = out["device_ns"] * 1e-9
    out["arrival_skew_s"] = (out["start_max"] - out["start_min"]) * 1e-9
    return out[["devices", "op_time_s", "device_time_s", "arrival_skew_s"]].reset_index()


def op_summary(steps: pd.DataFrame) -> pd.DataFrame:
    """Median over iterations of :func:`op_steps`, one row per (module, op)."""
    g = steps.groupby(["hlo_module", "hlo_op"])
    return g.agg(iterations=("iteration", "count"), devices=("devices", "max"),
                 op_time_s=("op_time_s", "median"), device_time_s=("device_time_s", "median"),
                 arrival_skew_s=("arrival_skew_s", "median")).reset_index()
