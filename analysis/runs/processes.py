"""Points run by several JAX processes: their traces merged, skew, and in- vs cross-process
(tables only; :mod:`analysis.report.processes_section` shows them).

Each process of a multi-process point (``distributed=local`` or ``auto``) traces only its own
devices, into ``trace/host<i>/plugins/profile/<time>/<host>.xplane.pb``. This module reads
them all into one table with a ``process`` column (device ids are global, so they do not
collide), then asks of every collective: which device was slowest, how far apart were the
devices, and what does crossing processes cost against staying in one. The report shows a
section built from these tables only when a sweep has multi-process points.

Where the processes come from: ``result.json``'s ``processes`` list (``local``: the runner
merged them), or ``result.host<i>.json`` files beside it (``auto``: each host wrote its own).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis import trace as trace_reader
from analysis.runs.record import Process, Result
from analysis.runs.rundir import read_host_results, safe_path

OPS_COLUMNS = ["process", "host", "device", "hlo_module", "hlo_op", "start_ns", "end_ns", "duration_ns", "iteration"]


def process_parts(rec: Result) -> list[Process]:
    """Every process of a point, with its ``process_id``, ``host``, ``xplane`` (relative to the
    point folder) and ``device_ids`` (the global ids of its devices, in its local order)."""
    if rec.processes:
        return list(rec.processes)
    return [_own_part(r) for r in [rec, *read_host_results(rec.point_dir)]]


def _own_part(r: Result) -> Process:
    """The process that wrote ``r``, as a merged record lists it."""
    index = r.environment.process_index
    return Process(
        process_id=0 if index is None else index,
        host=r.environment.host,
        xplane=r.files.get("xplane"),
        device_ids=r.process.device_ids if r.process else None,
    )


def global_device_ids(local: pd.Series, device_ids: list[int] | None) -> pd.Series:
    """A host's trace numbers its planes by local device (``/device:TPU:0`` is each host's
    first chip): map ordinal k to the k-th of the process's devices' global ids. A number
    that is not a local ordinal (already global, as CPU traces may give) stays."""
    if not device_ids:
        return local
    return local.map(lambda k: device_ids[int(k)] if 0 <= int(k) < len(device_ids) else int(k))


def merged_device_ops(result: Result) -> pd.DataFrame:
    """Every process's device-op executions in one table (:data:`OPS_COLUMNS`)."""
    tables = []
    for part in process_parts(result):
        if not part.xplane:
            continue
        ops = trace_reader.device_ops(
            trace_reader.read_xplane(safe_path(Path(result.point_dir), part.xplane, "xplane"))
        )
        ops["device"] = global_device_ids(ops["device"], part.device_ids)
        tables.append(ops.assign(process=part.process_id, host=part.host))
    if not tables:
        return pd.DataFrame(columns=OPS_COLUMNS)
    return pd.concat(tables, ignore_index=True)[OPS_COLUMNS]


def collective_skew(ops: pd.DataFrame, same_clock: bool = True) -> pd.DataFrame:
    """Per (module, op) across every device of every process: the slowest device and the skew.

    ``slowest_device_time_s``: the largest per-device median duration. ``device_spread_s``:
    per iteration, the longest device duration minus the shortest (median over iterations);
    clock-free, so it holds across hosts. ``arrival_skew_s``: per iteration, last device start
    minus first; only meaningful when the processes share a clock (``same_clock``: one host).
    """
    if ops.empty:
        return pd.DataFrame()
    per_dev = ops.groupby(["hlo_module", "hlo_op", "process", "device"])["duration_ns"].median().reset_index()
    slowest = per_dev.loc[per_dev.groupby(["hlo_module", "hlo_op"])["duration_ns"].idxmax()]
    it = ops.groupby(["hlo_module", "hlo_op", "iteration"]).agg(
        d_max=("duration_ns", "max"),
        d_min=("duration_ns", "min"),
        s_max=("start_ns", "max"),
        s_min=("start_ns", "min"),
        processes=("process", "nunique"),
        devices=("device", "nunique"),
    )
    it["spread"], it["arrival"] = it["d_max"] - it["d_min"], it["s_max"] - it["s_min"]
    g = it.groupby(["hlo_module", "hlo_op"])
    out = pd.DataFrame(
        {
            "processes": g["processes"].max(),
            "devices": g["devices"].max(),
            "iterations": g.size(),
            "device_spread_s": g["spread"].median() * 1e-9,
            "arrival_skew_s": g["arrival"].median() * 1e-9 if same_clock else np.nan,
            "median_device_time_s": per_dev.groupby(["hlo_module", "hlo_op"])["duration_ns"].median() * 1e-9,
        }
    )
    out = out.reset_index().merge(
        slowest.rename(
            columns={"process": "slowest_process", "device": "slowest_device", "duration_ns": "slowest_device_time_s"}
        ),
        on=["hlo_module", "hlo_op"],
    )
    out["slowest_device_time_s"] *= 1e-9
    return out


def process_table(results: list[Result], summary: pd.DataFrame) -> pd.DataFrame:
    """One row per multi-process point and collective it asked for: placement, timing per
    process, and the merged trace's skew figures. Empty when no point ran in several processes."""
    rows = []
    # The collective each point asked for; for a matmul (no single target), its first collective.
    ok = summary[summary["status"] == "ok"].sort_values("is_target", ascending=False, kind="stable")
    targets = ok.drop_duplicates("point").set_index("point")
    for r in results:
        placement = r.spec.placement
        if (placement.process_count or 1) < 2 or r.point not in targets.index:
            continue
        parts = process_parts(r) if r.ok else []
        t = targets.loc[r.point]
        row = {
            "point": r.point,
            "op": t["op"],
            "hlo_op": t["hlo_op"],
            "axes": t["axes"],
            "dtype": t["dtype"],
            "group_size": t["group_size"],
            "V_bytes": t["V_bytes"],
            "processes": placement.process_count,
            "processes_per_group": placement.processes_per_group,
            "crosses_processes": bool(placement.crosses_processes),
            "time_s": t["time_s"],
            "busbw_Bps": t["busbw_Bps"],
            "slowest_process_time_s": max(p.timing_summary.median_s or np.nan for p in r.processes or [Process()]),
        }
        try:
            ops = merged_device_ops(r)
            hosts = {p.host for p in parts}
            skew = collective_skew(ops, same_clock=len(hosts) == 1)
            hit = skew[skew["hlo_op"] == t["hlo_op"]] if len(skew) and isinstance(t["hlo_op"], str) else skew.iloc[0:0]
            if len(hit):
                row.update(
                    hit.iloc[0][
                        [
                            "devices",
                            "slowest_device",
                            "slowest_process",
                            "slowest_device_time_s",
                            "median_device_time_s",
                            "device_spread_s",
                            "arrival_skew_s",
                        ]
                    ].to_dict()
                )
            row["traces_merged"] = int(ops["process"].nunique()) if len(ops) else 0
        except (OSError, ValueError, trace_reader.TraceError) as exc:
            row["skipped"] = str(exc)
        rows.append(row)
    return pd.DataFrame(rows)


def placement_comparison(table: pd.DataFrame) -> pd.DataFrame:
    """In-process against cross-process, for each (op, dtype, group size, V) that has both."""
    if table.empty:
        return pd.DataFrame()
    keys = ["op", "dtype", "group_size", "V_bytes"]
    side = table.assign(where=np.where(table["crosses_processes"], "cross", "in"))
    wide = side.pivot_table(index=keys, columns="where", values=["time_s", "busbw_Bps"], aggfunc="median")
    if ("time_s", "in") not in wide or ("time_s", "cross") not in wide:
        return pd.DataFrame()
    out = pd.DataFrame(
        {
            "in_process_time_s": wide[("time_s", "in")],
            "cross_process_time_s": wide[("time_s", "cross")],
            "in_process_busbw_Bps": wide[("busbw_Bps", "in")],
            "cross_process_busbw_Bps": wide[("busbw_Bps", "cross")],
        }
    ).reset_index()
    out["cross_over_in_time"] = out["cross_process_time_s"] / out["in_process_time_s"]
    return out.dropna(subset=["cross_over_in_time"])
