"""The tidy table of a sweep: one row per run and collective op (``summary.csv``).

Timings come from the untraced iterations in result.json; the trace only attributes time
to ops (``trace_*`` columns) and measures how much the profiler perturbed them. The book
model's time for each point (``model_time_s``) is added by :mod:`analysis.sweep`, once the
constants to model with are known.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis import hlo as hlo_parser
from analysis import trace as trace_reader
from analysis.book.collective_cost import active_axes
from analysis.book.collectives import BY_OP
from analysis.trace.overlap import overlap_summary


def hlo_kind_of(op: str, grad: bool = False) -> str | None:
    """The HLO opcode a job of ``op`` is about: its own, or its backward partner's for a grad
    (the book: the backward pass of an AllGather is a ReduceScatter, and vice versa)."""
    k = BY_OP.get(op)
    if k is None:
        return None
    return BY_OP[k.backward].hlo if grad and k.backward else k.hlo


def _run_columns(r: dict) -> dict:
    exp = r.get("experiment") or {}
    cfg = r.get("config") or {}
    env = r.get("environment") or {}
    op_cfg = cfg.get("op") or {}
    mesh = exp.get("mesh") or {}
    s = (r.get("timing") or {}).get("summary") or {}
    target = ((cfg.get("timing") or {}).get("target_rel_ci")) or 0.05
    return {
        "job": r["job"], "status": r.get("status"), "error_type": r.get("error_type"), "error": r.get("error"),
        "op": exp.get("op", op_cfg.get("name")), "expr": exp.get("expr", op_cfg.get("expr")), "dtype": exp.get("dtype", cfg.get("dtype")),
        "mesh": mesh.get("name", (cfg.get("mesh") or {}).get("name")),
        "mesh_axes": ",".join(f"{k}={v}" for k, v in (mesh.get("axes") or {}).items()),
        "axes": "".join(exp.get("axes") or op_cfg.get("axes") or []),
        "axis_sizes": "x".join(str((mesh.get("axes") or {}).get(a, "")) for a in exp.get("axes") or []),
        "n_axes": active_axes([(mesh.get("axes") or {}).get(a, 1) for a in exp.get("axes") or []]),
        "group_size": exp.get("group_size"), "num_groups": exp.get("num_groups"),
        "size_bytes": exp.get("size_bytes"), "V_bytes": exp.get("V_bytes"),
        "hardware": exp.get("hardware", (cfg.get("hardware") or {}).get("name")),
        "backend": env.get("backend"), "device_kind": env.get("device_kind"), "device_count": env.get("device_count"),
        "jax_version": env.get("jax_version"),
        "time_s": s.get("median_s"), "time_p10_s": s.get("p10_s"), "time_p90_s": s.get("p90_s"),
        "time_ci_low_s": s.get("ci_low_s"), "time_ci_high_s": s.get("ci_high_s"), "time_cv": s.get("cv"),
        "time_rel_ci": s.get("rel_ci_halfwidth"), "time_n": s.get("n"),
        "noisy": bool(s) and s.get("rel_ci_halfwidth", np.inf) > target,
        "compile_s": (r.get("compile") or {}).get("compile_s"),
        "traced_iter_over_untraced": (r.get("trace") or {}).get("traced_iter_over_untraced"),
        "ceiling_kind": (r.get("ceiling") or {}).get("kind"), "ceiling_Bps": (r.get("ceiling") or {}).get("Bps"),
        # matmul jobs
        "strategy": exp.get("strategy"), "flops": exp.get("flops"), "grad": bool(exp.get("grad", op_cfg.get("grad"))),
        "dims": " ".join(f"{k}={v}" for k, v in (exp.get("dims") or op_cfg.get("dims") or {}).items()) or None,
    }


def _hlo_rows(r: dict) -> tuple[list[dict], str | None]:
    rel = (r.get("files") or {}).get("hlo_compiled")
    if not rel:
        return [], None
    path = Path(r["job_dir"]) / rel
    try:
        text = path.read_text()
        mesh_axes = ((r.get("experiment") or {}).get("mesh") or {}).get("axes") or {}
        axis_names = list(mesh_axes)
        # HLO replica groups number devices by their position in the mesh, not by device id.
        device_ids = np.arange(int(np.prod(list(mesh_axes.values())))).reshape(list(mesh_axes.values()) or [0])
        colls = hlo_parser.parse_collectives(text, num_devices=int(device_ids.size) or None)
    except (OSError, UnicodeDecodeError, hlo_parser.HloParseError) as exc:
        return [], f"{path}: {exc}"
    rows = []
    for c in colls:
        try:
            groups = c.replica_groups or (tuple(int(d) for d in device_ids.ravel()),)
            axes = "".join(hlo_parser.group_mesh_axes(groups, device_ids, axis_names))
        except (hlo_parser.HloParseError, ValueError):
            axes = None
        rows.append({"hlo_op": c.name, "hlo_kind": c.kind, "hlo_dtype": c.dtype,
                     "hlo_operand_bytes": c.operand_bytes, "hlo_result_bytes": c.result_bytes,
                     "hlo_group_size": c.group_size, "hlo_num_groups": c.num_groups, "hlo_axes": axes})
    return rows, None


def _trace_ops(r: dict) -> tuple[pd.DataFrame | None, dict, str | None]:
    """Per-op trace times, the compute/collective overlap, and any problem reading them."""
    rel = (r.get("files") or {}).get("xplane")
    if not rel:
        return None, {}, None
    path = Path(r["job_dir"]) / rel
    try:
        ops = trace_reader.device_ops(trace_reader.read_xplane(path))
    except (OSError, trace_reader.TraceError) as exc:
        return None, {}, str(exc) if str(path) in str(exc) else f"{path}: {exc}"
    if not len(ops):
        return None, {}, None
    return trace_reader.op_summary(trace_reader.op_steps(ops)), overlap_summary(ops), None


def job_rows(r: dict) -> list[dict]:
    """The summary rows of one job: one per collective in its compiled HLO (at least one)."""
    base = _run_columns(r)
    problems = []
    hlo_rows, err = _hlo_rows(r)
    problems += [err] if err else []
    kind, rel = hlo_kind_of(base["op"], base["grad"]), (r.get("files") or {}).get("hlo_compiled")
    if r.get("status") == "ok" and rel and not err and kind and not any(h["hlo_kind"] == kind for h in hlo_rows):
        # e.g. a file cut short before the op: say so, or the point just vanishes from the tables
        problems.append(f"{Path(r['job_dir']) / rel}: no {kind} in the compiled HLO (truncated?); "
                        f"the point is left out of the tables")
    ops, overlap, err = _trace_ops(r)
    problems += [err] if err else []
    base["skipped"] = "; ".join(problems) or None
    base.update(overlap)
    rows = [dict(base, **h) for h in hlo_rows] or [dict(base)]
    for row in rows:
        if ops is not None and row.get("hlo_op") is not None:
            hit = ops[ops["hlo_op"] == row["hlo_op"]]
            if len(hit):
                row["trace_op_time_s"] = float(hit["op_time_s"].iloc[0])
                row["trace_device_time_s"] = float(hit["device_time_s"].iloc[0])
                row["trace_arrival_skew_s"] = float(hit["arrival_skew_s"].iloc[0])
                row["trace_iterations"] = int(hit["iterations"].iloc[0])
    return rows


def ceiling_busbw(df: pd.DataFrame) -> pd.Series:
    """The ceiling on the scale of one device's bus bandwidth.

    ``host_copy``: every virtual CPU device copies through the same memory, so the host's
    copy bandwidth is shared by all of them. ``link``: a collective over k torus axes uses
    k links' worth (the book's N_axes factor).
    """
    ceiling = pd.to_numeric(df.get("ceiling_Bps"), errors="coerce")
    devices = pd.to_numeric(df["device_count"], errors="coerce")
    n_axes = pd.to_numeric(df["n_axes"], errors="coerce").clip(lower=1)
    return pd.Series(np.where(df.get("ceiling_kind") == "host_copy", ceiling / devices, ceiling * n_axes),
                     index=df.index, dtype=float)


def summary_table(results: list[dict]) -> pd.DataFrame:
    """Every job's result (``analysis.rundir.read_results``) as tidy rows, with bandwidths
    and profiler perturbation."""
    df = pd.DataFrame([row for r in results for row in job_rows(r)])
    for col in ("hlo_op", "hlo_kind", "trace_op_time_s", "trace_device_time_s", "trace_arrival_skew_s",
                "hlo_group_size", "hlo_operand_bytes", "hlo_result_bytes"):
        if col not in df:
            df[col] = np.nan
    n = df["group_size"].astype(float)
    factor = pd.Series([BY_OP[op].busbw_factor(g) if op in BY_OP and g == g and g else np.nan
                        for op, g in zip(df["op"], n)], index=df.index, dtype=float)
    df["algbw_Bps"] = df["V_bytes"].astype(float) / df["time_s"].astype(float)
    df["busbw_Bps"] = df["algbw_Bps"] * factor
    df["ceiling_busbw_Bps"] = ceiling_busbw(df)
    df["busbw_over_ceiling"] = df["busbw_Bps"] / df["ceiling_busbw_Bps"]
    df["trace_over_untraced"] = df["trace_op_time_s"].astype(float) / df["time_s"].astype(float)
    # The row of the collective the experiment asked for (XLA may add others, e.g. in matmuls).
    # Backward passes are not the collective they name: keep them out of its fits.
    df["is_target"] = [hlo_kind_of(op) == kind and not grad for op, kind, grad in zip(df["op"], df["hlo_kind"], df["grad"])]
    return df
