"""Traces: an ``.xplane.pb`` file -> a table of events -> per-device HLO-op intervals.

The seam (DESIGN.md): :func:`read_xplane` is the only code that touches the profiler's
format; it yields one row per event. Everything after it works on that table and is
tested with hand-built tables in the shapes CPU, TPU and GPU profiles have:

* CPU: plane ``/host:CPU``, lines ``tf_XLAPjRtCpuClient/<thread>``, op events named after
  the HLO instruction with stats ``hlo_op``, ``hlo_module``, ``device_ordinal``.
* TPU: planes ``/device:TPU:N``, line ``XLA Ops``, events named after the HLO instruction.
* GPU: planes ``/device:GPU:N``, one line per stream, kernel events (``nccl...``, cuBLAS)
  carrying ``hlo_op`` / ``hlo_module`` stats. One HLO op may launch several kernels (seen on
  an H100: a cuBLAS matmul is a ``Memset`` then the GEMM kernel); they share a
  ``scope_range_id``, which groups them into one execution.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

EVENT_COLUMNS = ["plane", "line", "name", "start_ns", "duration_ns", "hlo_op", "hlo_module", "device_ordinal",
                 "scope_range_id"]
_STATS = EVENT_COLUMNS[5:]
_STAT_SET = frozenset(_STATS)
_DEVICE_PLANE = re.compile(r"^/device:(TPU|GPU):(\d+)")


class TraceError(ValueError):
    """A trace file that cannot be read (missing, truncated, not an xplane)."""


def read_xplane(path: str | Path, candidates_only: bool = True) -> pd.DataFrame:
    """The events of an xplane file as a DataFrame with :data:`EVENT_COLUMNS`.

    Uses ``jax.profiler.ProfileData`` (the reader that ships with jaxlib). With
    ``candidates_only`` (the default) it keeps just the events that can be device ops:
    everything on ``/device:*`` planes, and on host planes the events named like an HLO
    instruction (no spaces, colons or parentheses, unlike runtime bookkeeping such as
    ``Wait: ...`` or ``ThunkExecutor::Execute``). That filter, applied while reading, is what
    keeps the parse fast: touching an event's fields and stats from Python is most of the
    cost. Pass ``candidates_only=False`` for every event of the file.
    """
    from jax.profiler import ProfileData

    path = Path(path)
    try:
        data = ProfileData.from_serialized_xspace(path.read_bytes())
    except Exception as exc:  # the C++ reader raises a bare RuntimeError on bad bytes
        raise TraceError(f"{path}: not a readable xplane trace ({exc})") from exc
    cols: dict[str, list] = {c: [] for c in EVENT_COLUMNS}
    add_plane, add_line, add_name = cols["plane"].append, cols["line"].append, cols["name"].append
    add_start, add_dur = cols["start_ns"].append, cols["duration_ns"].append
    add_stats = [(key, cols[key].append) for key in _STATS]
    for plane in data.planes:
        pname = plane.name
        on_device = pname.startswith("/device:")
        for line in plane.lines:
            lname = line.name
            for ev in line.events:
                name = ev.name
                candidate = on_device or not (" " in name or ":" in name or "(" in name)
                if candidates_only and not candidate:
                    continue
                kept = {k: v for k, v in ev.stats if k in _STAT_SET} if candidate else {}
                add_plane(pname)
                add_line(lname)
                add_name(name)
                add_start(ev.start_ns)
                add_dur(ev.duration_ns)
                for key, add in add_stats:
                    add(kept.get(key))
    df = pd.DataFrame(cols)
    df["start_ns"] = df["start_ns"].astype("float64")
    df["duration_ns"] = df["duration_ns"].astype("float64")
    return df


def count_events(path: str | Path) -> int:
    """How many events the file holds (for throughput figures)."""
    from jax.profiler import ProfileData

    data = ProfileData.from_serialized_xspace(Path(path).read_bytes())
    return sum(1 for plane in data.planes for line in plane.lines for _ in line.events)


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
    ops["device"] = ops["device"].astype(int)
    ops["hlo_op"] = ops["hlo_op"].where(ops["hlo_op"].notna(), ops["name"])
    ops["hlo_module"] = ops["hlo_module"].fillna("")
    ops["end_ns"] = ops["start_ns"] + ops["duration_ns"]
    ops["kernels"] = 1
    launched = ops["scope_range_id"].notna()
    if launched.any():
        # Several kernels of one launch are one execution: its time on the device is the
        # sum of their durations (the gaps between them are the host's, not the op's).
        keys = ["device", "hlo_module", "hlo_op", "scope_range_id"]
        merged = ops[launched].groupby(keys, sort=False).agg(
            name=("name", "last"), start_ns=("start_ns", "min"), end_ns=("end_ns", "max"),
            duration_ns=("duration_ns", "sum"), kernels=("kernels", "sum")).reset_index()
        ops = pd.concat([ops[~launched], merged], ignore_index=True)
    ops = ops.sort_values(["device", "start_ns"], kind="stable")
    ops["iteration"] = ops.groupby(["device", "hlo_module", "hlo_op"]).cumcount()
    return ops[["device", "hlo_module", "hlo_op", "name", "start_ns", "end_ns", "duration_ns", "kernels",
                "iteration"]].reset_index(drop=True)


def op_steps(ops: pd.DataFrame) -> pd.DataFrame:
    """One row per (module, op, iteration) across the devices that ran it.

    ``op_time_s`` runs from the last device's start to the last device's end: on the CPU
    backend each device thread waits inside the collective until every participant has
    arrived, so a device's own duration includes that wait (``arrival_skew_s``).
    ``device_time_s`` is the median per-device duration, which is what TPU/GPU profiles
    report per op (for a GPU op, the sum of its kernels).
    """
    g = ops.groupby(["hlo_module", "hlo_op", "iteration"])
    out = g.agg(devices=("device", "nunique"), start_min=("start_ns", "min"), start_max=("start_ns", "max"),
                end_max=("end_ns", "max"), device_ns=("duration_ns", "median"), device_max=("duration_ns", "max"))
    # Capped by the longest device time: a GPU op of several kernels spans host gaps that
    # are not its own.
    out["op_time_s"] = np.minimum(out["end_max"] - out["start_max"], out["device_max"]) * 1e-9
    out["device_time_s"] = out["device_ns"] * 1e-9
    out["arrival_skew_s"] = (out["start_max"] - out["start_min"]) * 1e-9
    return out[["devices", "op_time_s", "device_time_s", "arrival_skew_s"]].reset_index()


def op_summary(steps: pd.DataFrame) -> pd.DataFrame:
    """Median over iterations of :func:`op_steps`, one row per (module, op)."""
    g = steps.groupby(["hlo_module", "hlo_op"])
    return g.agg(iterations=("iteration", "count"), devices=("devices", "max"),
                 op_time_s=("op_time_s", "median"), device_time_s=("device_time_s", "median"),
                 arrival_skew_s=("arrival_skew_s", "median")).reset_index()
