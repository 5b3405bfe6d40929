"""The tidy table of a sweep: one row per run and collective op (``summary.csv``).

Timings come from the untraced iterations in result.json; the trace only attributes time
to ops (``trace_*`` columns) and measures how much the profiler perturbed them. The book
model's time for each point (``model_time_s``) is added by :mod:`analysis.sweep`, once the
constants to model with are known.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.book.collective_cost import active_axes
from analysis.book.collectives import BY_OP
from analysis.runs.point_flags import TRACE_SLOWDOWN_LIMIT, dispatch_floor, flags
from analysis.runs.point_table import point_table, saved_table
from analysis.runs.record import ESTIMATORS, IMPORTED, LOOP, Result, Timing, either


def hlo_kind_of(op: str, grad: bool = False) -> str | None:
    """The HLO opcode a point of ``op`` is about: its own, or its backward partner's for a grad
    (the book: the backward pass of an AllGather is a ReduceScatter, and vice versa)."""
    k = BY_OP.get(op)
    if k is None:
        return None
    return BY_OP[k.backward].hlo if grad and k.backward else k.hlo


def dims_of(text) -> dict[str, int]:
    """The ``dims`` column read back: ``"B=256 D=1024"`` -> ``{"B": 256, "D": 1024}``."""
    return {k: int(v) for k, v in (kv.split("=") for kv in str(text).split())}


def mesh_of(text) -> dict[str, int]:
    """The ``mesh_axes`` column read back: ``"X=4,Y=2"`` -> ``{"X": 4, "Y": 2}``."""
    return {k: int(v) for k, v in (kv.split("=") for kv in str(text).split(",") if kv)}


# A point is *noisy* when its 95% interval is wider than this many times the per-round target
# (timing.target_rel_ci, 5%: so +-25%). The interval spans the drift between rounds as well:
# on this shared 2-core machine the default sweep's half-widths are 9-17% (median 15%), and
# a flag at 2x the target (+-10%) marked 13-15 of its 17 points, which tells a reader nothing.
NOISY_FACTOR = 5


def _dispatch_share(share, backend) -> float | None:
    """(step - device) / step where the device times its own ops; blank on ``cpu``, where the
    "device time" is the traced host thread's (waiting for the others, slowed by the profiler),
    and blank where it would be negative (a device time above the step is no device time)."""
    if share is None or backend == "cpu" or not share == share or share < 0:
        return None
    return share


def _estimator_columns(t: Timing) -> dict:
    """``step_time_s``, ``loop_time_s``, ``device_time_s``, their intervals, ``loop_K``, and the
    loop's rounds and why (``loop_rounds``, ``loop_why``)."""
    out = {}
    for name in ESTIMATORS:
        e = t.estimate(name)
        out.update({f"{name}_time_s": e.median_s, f"{name}_ci_low_s": e.ci_low_s, f"{name}_ci_high_s": e.ci_high_s})
    loop = t.estimate(LOOP)
    out["loop_K"] = loop.K
    # the same loop with an empty body: what a repetition costs the loop itself, and whether
    # that is more than a quarter of the loop's (runner.worker.estimators.LAUNCH_BOUND_SHARE)
    out["loop_empty_s"] = loop.empty_loop_s
    out["loop_launch_bound"] = loop.launch_bound
    # the loop is a cross-check, timed again after round 1 only where it disagreed with the
    # source estimator (runner.worker.estimators.loop_rule): how many rounds it has, and why
    out["loop_rounds"] = loop.rounds
    out["loop_why"] = t.loop_rule.why
    return out


def _run_columns(r: Result) -> dict:
    """The columns of a point's every row, from its record (:class:`analysis.runs.record.Result`):
    what ran (``spec``, else the config it was asked with), where, its timing and checks."""
    exp, cfg, env, t, s = r.spec, r.config, r.environment, r.timing, r.timing.summary
    mesh_axes = exp.mesh.axes or {}
    target = cfg.timing.target_rel_ci or 0.05
    rel_ci = s.rel_ci_halfwidth if s.rel_ci_halfwidth is not None else np.inf
    return {
        "point": r.point,
        "status": r.status,
        "error_type": r.error_type,
        "error": r.error,
        "op": either(exp.op, cfg.op.name),
        "expr": either(exp.expr, cfg.op.expr),
        "dtype": either(exp.dtype, cfg.dtype),
        "precision": either(exp.precision, cfg.precision),
        "mesh": either(exp.mesh.name, cfg.mesh.name),
        "mesh_axes": ",".join(f"{k}={v}" for k, v in mesh_axes.items()),
        "axes": "".join(exp.axes or cfg.op.axes or []),
        "axis_sizes": "x".join(str(mesh_axes.get(a, "")) for a in exp.axes or []),
        # where the mesh axes lay on the physical axes (TPU; analysis.book.placement), for the model
        "placement": json.dumps(exp.mesh.physical, sort_keys=True) if exp.mesh.physical else None,
        "n_axes": active_axes([mesh_axes.get(a, 1) for a in exp.axes or []]),
        "group_size": exp.group_size,
        "num_groups": exp.num_groups,
        "size_bytes": exp.size_bytes,
        "V_bytes": exp.V_bytes,
        "hardware": either(exp.hardware, cfg.hardware.name),
        "backend": env.backend,
        "device_kind": env.device_kind,
        "device_count": env.device_count,
        "jax_version": env.jax_version,
        "estimator": t.estimator,
        # why the chosen estimator gave no time (device found no execution of the collective);
        # time_s is then empty: no other estimator's number stands in for it
        "missing_reason": t.missing_reason,
        "time_s": s.median_s,
        "time_p10_s": s.p10_s,
        "time_p90_s": s.p90_s,
        "time_p95_s": s.p95_s,
        "time_p99_s": s.p99_s,
        "time_max_s": s.max_s,
        "time_ci_low_s": s.ci_low_s,
        "time_ci_high_s": s.ci_high_s,
        "time_cv": s.cv,
        "time_rel_ci": s.rel_ci_halfwidth,
        "time_n": s.n,
        "time_rounds": s.rounds,
        "rounds_disagree": bool(s.rounds_disagree),
        # adaptive rounds (runner.sweep.rounds.rounds_rule): how many timing.rounds asked for, and why
        # the point took the rounds it did (stopped after 2 when they agreed, else all)
        "rounds_wanted": t.rounds_rule.wanted,
        "rounds_why": t.rounds_why(),  # one round: ONE_ROUND (not checked for run-to-run drift)
        # a point without a time is not noisy: it has none; an imported one (nccl-tests' average
        # over its iterations) brings no interval to judge, which is not the same as a wide one
        "noisy": s.median_s is not None and t.estimator != IMPORTED and rel_ci > NOISY_FACTOR * target,
        **_estimator_columns(t),
        "page_faults_per_step": t.page_faults_per_step,
        "checked": r.check.passed is not None if r.check else None,
        "compile_s": r.compile.compile_s,
        "profiler_slowdown": r.trace.profiler_slowdown,
        "dispatch_share": _dispatch_share(r.trace.dispatch_share, env.backend),
        "no_communication": exp.no_communication,
        "rewritten": exp.rewritten,
        "ceiling_kind": r.ceiling.kind,
        "ceiling_busbw_Bps": r.ceiling.busbw_Bps,
        "ceiling_ci_low_Bps": r.ceiling.ci_low_Bps,
        "ceiling_ci_high_Bps": r.ceiling.ci_high_Bps,
        "ceiling_inconsistent": r.ceiling.inconsistent,
        # matmul points
        "strategy": exp.strategy,
        "flops": exp.flops,
        "grad": bool(either(exp.grad, cfg.op.grad)),
        "dims": " ".join(f"{k}={v}" for k, v in (exp.dims or cfg.op.dims or {}).items()) or None,
    }


def point_rows(rec: Result, table: dict | None = None) -> list[dict]:
    """The summary rows of one point: one per collective in its compiled HLO (at least one).
    What the HLO and trace say comes from the point's table (``table``, else
    :func:`analysis.runs.point_table.point_table`: the one the worker wrote, rebuilt only where it
    is missing or stale)."""
    base = _run_columns(rec)
    table = table if table is not None else point_table(rec)
    problems = [e for e in (table["hlo"]["error"],) if e]
    hlo_rows = table["hlo"]["rows"]
    kind, rel = hlo_kind_of(base["op"], base["grad"]), rec.files.get("hlo_compiled")
    imported = rec.timing.estimator == IMPORTED  # another tool's numbers: no HLO to expect
    if rec.ok and kind and not any(h["hlo_kind"] == kind for h in hlo_rows):
        # No HLO to read (deleted, damaged, cut short): the timing still stands, so the point
        # keeps its row, named by its op, and says what is missing.
        if not problems and not imported:
            # a group of 1 (XLA compiles a copy) or a rewrite says why; else the file is suspect
            why = rec.spec.no_communication or rec.spec.rewritten or "truncated?"
            problems.append(
                f"{Path(rec.point_dir) / rel}: no {kind} in the compiled HLO ({why})"
                if rel
                else "no compiled HLO recorded"
            )
        if not imported:
            problems.append("the point keeps its timing; its HLO columns are empty")
        hlo_rows = hlo_rows + [{"hlo_op": None, "hlo_kind": kind}]
    problems += [e for e in (table["trace"]["error"],) if e]
    base["skipped"] = "; ".join(problems) or None
    base.update(table["trace"]["overlap"])
    ops = {op["hlo_op"]: op for op in table["trace"]["ops"] or []}
    rows = [dict(base, **h) for h in hlo_rows] or [dict(base)]
    for row in rows:
        if (hit := ops.get(row.get("hlo_op"))) is not None:
            row["trace_op_time_s"] = _float(hit["op_time_s"])
            row["trace_device_time_s"] = _float(hit["device_time_s"])
            row["trace_arrival_skew_s"] = _float(hit["arrival_skew_s"])
            row["trace_iterations"] = int(hit["iterations"])
    return rows


def _float(v) -> float:
    return float("nan") if v is None else float(v)


# summary.csv's columns in the order a person reads them. First the row as nccl-tests prints it
# and the headline reads it: which point, what it ran (op, axes, size, dtype, mesh), the time
# with the estimator it came from and its 95% interval, the bandwidths, the book's time beside
# it, and what to doubt. Then the rest, a group at a time. A column missing here still lands in
# the file, after these (tests/analysis/runs/test_summary.py asks that every column has its place).
FIRST_COLUMNS = (
    "point",
    "status",
    "op",
    "axes",
    "size_bytes",
    "dtype",
    "mesh",
    "estimator",
    "time_s",
    "time_ci_low_s",
    "time_ci_high_s",
    "algbw_Bps",
    "busbw_Bps",
    "model_time_s",
    "flags",
    "caveats",
)
COLUMN_GROUPS = {
    "what ran": (
        "expr",
        "group_size",
        "num_groups",
        "n_axes",
        "axis_sizes",
        "mesh_axes",
        "placement",
        "V_bytes",
        "S_bytes",
        "precision",
        "grad",
        "strategy",
        "dims",
        "flops",
    ),
    "bandwidth against the ceiling and the model": (
        "busbw_ci_low_Bps",
        "busbw_ci_high_Bps",
        "ceiling_kind",
        "ceiling_busbw_Bps",
        "ceiling_ci_low_Bps",
        "ceiling_ci_high_Bps",
        "ceiling_inconsistent",
        "busbw_over_ceiling",
        "model_regime",
    ),
    "the time's spread and rounds": (
        "time_p10_s",
        "time_p90_s",
        "time_p95_s",
        "time_p99_s",
        "time_max_s",
        "time_cv",
        "time_rel_ci",
        "time_n",
        "noisy",
        "time_rounds",
        "rounds_wanted",
        "rounds_disagree",
        "rounds_why",
        "missing_reason",
    ),
    "the three estimators": (
        "step_time_s",
        "step_ci_low_s",
        "step_ci_high_s",
        "loop_time_s",
        "loop_ci_low_s",
        "loop_ci_high_s",
        "loop_K",
        "loop_empty_s",
        "loop_launch_bound",
        "loop_rounds",
        "loop_why",
        "device_time_s",
        "device_ci_low_s",
        "device_ci_high_s",
        "dispatch_floor_s",
        "dispatch_share",
    ),
    "checks": ("checked", "no_communication", "rewritten", "page_faults_per_step"),
    "the compiled HLO": (
        "hlo_op",
        "hlo_kind",
        "is_target",
        "hlo_dtype",
        "hlo_operand_bytes",
        "hlo_result_bytes",
        "hlo_group_size",
        "hlo_num_groups",
        "hlo_axes",
        "compile_s",
    ),
    "the trace": (
        "trace_op_time_s",
        "trace_device_time_s",
        "trace_arrival_skew_s",
        "trace_iterations",
        "trace_over_untraced",
        "profiler_slowdown",
        "trace_unrepresentative",
        "trace_collective_s",
        "trace_compute_s",
        "trace_overlap_s",
        "trace_overlap_frac",
        "trace_overlap_frac_min",
        "trace_command_buffers",
    ),
    "where it ran": ("hardware", "backend", "device_kind", "device_count", "jax_version"),
    "the sweep, and what went wrong": ("sweep_id", "sweep_start_time", "error_type", "error", "skipped"),
}
COLUMN_ORDER = FIRST_COLUMNS + tuple(c for group in COLUMN_GROUPS.values() for c in group)


def in_reading_order(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary with its columns in :data:`COLUMN_ORDER`; any column not placed there follows,
    in the order it had (none is dropped)."""
    placed = [c for c in COLUMN_ORDER if c in summary.columns]
    return summary[placed + [c for c in summary.columns if c not in set(placed)]]


PARALLEL_FROM = 200  # tables to build: from here they are built in worker processes


def _all_rows(results: list[Result]) -> list[dict]:
    """:func:`point_rows` of every result. Each point's table is read from the file the worker
    wrote (about 1 ms); those missing or stale (a sweep measured before shardlab wrote them, a
    trace replaced) are built from the trace and HLO (about 50 ms a point here), many of them
    spread over the cores in spawned processes (a forked copy of a process that runs JAX
    threads may deadlock)."""
    tables = [saved_table(r) for r in results]
    stale = [r for r, t in zip(results, tables) if t is None]
    workers = min(os.cpu_count() or 1, 8)
    if len(stale) >= PARALLEL_FROM and workers >= 2:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            built = iter(list(pool.map(point_table, stale, chunksize=max(len(stale) // (4 * workers), 1))))
        tables = [t if t is not None else next(built) for t in tables]
    return [row for r, t in zip(results, tables) for row in point_rows(r, t)]


def summary_table(results: list[Result]) -> pd.DataFrame:
    """Every point's record (``analysis.runs.rundir.read_results``) as tidy rows, with bandwidths
    and profiler perturbation."""
    df = pd.DataFrame(_all_rows(results))
    for col in (
        "hlo_op",
        "hlo_kind",
        "trace_op_time_s",
        "trace_device_time_s",
        "trace_arrival_skew_s",
        "hlo_group_size",
        "hlo_operand_bytes",
        "hlo_result_bytes",
    ):
        if col not in df:
            df[col] = np.nan
    # A point without a time (its device estimator found nothing) holds None there: as NaN, the
    # columns stay numbers even when no point of the sweep has a time
    for col in [c for c in df if c.startswith("time_") and c not in ("time_n", "time_rounds")] + ["time_s"]:
        df[col] = pd.to_numeric(df[col], errors="coerce")
    n = df["group_size"].astype(float)
    kinds = [BY_OP.get(op) for op in df["op"]]
    # a group of one moves nothing: no bandwidth to speak of (and nothing to divide by)
    factor = pd.Series(
        [k.busbw_factor(g) if k and g == g and g >= 2 else np.nan for k, g in zip(kinds, n)],
        index=df.index,
        dtype=float,
    )
    s_over_v = pd.Series(
        [k.S_over_V(g) if k and g == g and g else np.nan for k, g in zip(kinds, n)], index=df.index, dtype=float
    )
    # nccl-tests: algbw = S / t, S the bytes its *GetBw divides (the book's V, except AllToAll:
    # V / n, the per-rank buffer); busbw = algbw * factor(n)
    df["S_bytes"] = df["V_bytes"].astype(float) * s_over_v
    df["algbw_Bps"] = df["S_bytes"] / df["time_s"].astype(float)
    df["busbw_Bps"] = df["algbw_Bps"] * factor
    # the time's interval, inverted: the bus bandwidth's (a slow end is a low bandwidth)
    df["busbw_ci_low_Bps"] = df["busbw_Bps"] * df["time_s"].astype(float) / df["time_ci_high_s"].astype(float)
    df["busbw_ci_high_Bps"] = df["busbw_Bps"] * df["time_s"].astype(float) / df["time_ci_low_s"].astype(float)
    for col in ("ceiling_ci_low_Bps", "ceiling_ci_high_Bps", "ceiling_inconsistent"):
        if col not in df:  # result.json files from before the ceiling had an interval
            df[col] = np.nan
    df["busbw_over_ceiling"] = df["busbw_Bps"] / pd.to_numeric(df["ceiling_busbw_Bps"], errors="coerce")
    df["dispatch_floor_s"] = dispatch_floor(df)
    df["trace_over_untraced"] = df["trace_op_time_s"].astype(float) / df["time_s"].astype(float)
    df["trace_unrepresentative"] = pd.to_numeric(df["profiler_slowdown"], errors="coerce") > TRACE_SLOWDOWN_LIMIT
    df["flags"], df["caveats"] = flags(df)
    # The row of the collective the point asked for (XLA may add others, e.g. in matmuls).
    # Backward passes are not the collective they name: keep them out of its fits.
    df["is_target"] = [
        hlo_kind_of(op) == kind and not grad for op, kind, grad in zip(df["op"], df["hlo_kind"], df["grad"])
    ]
    return df
