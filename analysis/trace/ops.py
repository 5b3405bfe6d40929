"""Per-device HLO-op executions from a trace's event table, and their per-step summary.

:func:`device_ops` picks the events that are device ops in each backend's shape (see
:mod:`.xplane`), :func:`op_steps` lines up the k-th execution of an op across devices, and
:func:`op_summary` takes medians over steps.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

_DEVICE_PLANE = re.compile(r"^/device:(TPU|GPU):(\d+)")


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


def device_samples(ops: pd.DataFrame, names: set[str] | None = None) -> list[float]:
    """The *device* estimator's samples: one per traced step, the median over devices of that
    device's time in seconds.

    With ``names`` (the instructions of one collective), a device's time is the sum of those
    ops' durations in the step; without, it is the union of all its op intervals in the step
    (a whole program, its idle gaps left out). Step k is the k-th execution of each op.
    """
    from analysis.trace.overlap import merge_intervals, total_length

    sub = ops if names is None else ops[ops["hlo_op"].isin(names)]
    if sub.empty:
        return []
    if names is not None:
        per = sub.groupby(["iteration", "device"])["duration_ns"].sum()
    else:
        per = sub.groupby(["iteration", "device"]).apply(
            lambda g: total_length(merge_intervals(g["start_ns"], g["end_ns"])), include_groups=False)
    per_step = per.groupby(level="iteration").median()
    return [float(v) * 1e-9 for v in per_step.sort_index()]
