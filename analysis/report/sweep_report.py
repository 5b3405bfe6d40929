"""The report of a sweep: ``summary.csv``, ``fit.json`` and ``report/`` (index.html,
report.md, figures), rebuilt from disk alone.

The tables come from :func:`analysis.sweep.load_sweep`; this module only writes files and
lays out blocks (sections of other analyzers live beside it in this package).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.book.units import fmt_bytes
from analysis.report import figures
from analysis.report.claims_section import add_claims_section
from analysis.report.document import Report, fmt
from analysis.report.matmul_section import add_matmul_section
from analysis.report.processes_section import add_processes_section
from analysis.rundir import FIT_NAME, REPORT_DIR, SUMMARY_NAME, write_json_atomic
from analysis.sweep import Sweep, load_sweep


def write_report(root: str | Path, hardware: str | None = None) -> Path:
    """Write ``summary.csv``, ``fit.json`` and ``report/`` for the sweep in ``root``
    (``hardware``: see :func:`analysis.sweep.load_sweep`); return ``report/index.html``."""
    root = Path(root)
    t0 = time.perf_counter()
    sweep = load_sweep(root, hardware)
    sweep.summary.to_csv(root / SUMMARY_NAME, index=False)
    write_json_atomic(root / FIT_NAME, {
        "fits": sweep.fits.astype(object).where(sweep.fits.notna(), None).to_dict(orient="records"),
        "left_out": sweep.left_out.astype(object).where(sweep.left_out.notna(), None).to_dict(orient="records"),
        "model_source": sweep.model_source,
        "model_W_Bps": getattr(sweep.model_hw, "link_bw_bidir_Bps", None),
        "model_T_min_s": getattr(sweep.model_hw, "hop_latency_s", None)})
    out = root / REPORT_DIR
    out.mkdir(exist_ok=True)
    rep = build(sweep, out)
    (out / "report.md").write_text(rep.to_markdown(out))
    index = out / "index.html"
    index.write_text(rep.to_html())
    (out / "build_s.txt").write_text(f"{time.perf_counter() - t0:.3f}\n")
    return index


def build(sweep: Sweep, out: Path) -> Report:
    """The report's blocks, figures saved under ``out``."""
    root, a = sweep.root, {"points": sweep.points, "fits": sweep.fits, "model_hw": sweep.model_hw,
                           "model_source": sweep.model_source, "curves": sweep.curves, "left_out": sweep.left_out}
    s, pts = sweep.summary, sweep.points
    jobs = s.drop_duplicates("job")
    ok, failed = jobs[jobs["status"] == "ok"], jobs[jobs["status"] != "ok"]
    rep = Report(f"shardlab report: {root.resolve().parent.name}/{root.name}")
    rep.text(f"Folder `{root}`: {len(jobs)} jobs, {len(ok)} ok, {len(failed)} failed. "
             f"Tables: `summary.csv` (one row per run and collective), `fit.json`.")

    rep.heading("What ran")
    first = ok.iloc[0] if len(ok) else (jobs.iloc[0] if len(jobs) else None)
    if first is not None:
        rep.table(pd.DataFrame({
            "hardware": [first["hardware"]], "backend": [first["backend"]], "device": [first["device_kind"]],
            "devices": [first["device_count"]], "jax": [first["jax_version"]],
            "meshes": [", ".join(sorted(set(map(str, jobs["mesh_axes"].dropna()))))],
            "ops": [", ".join(sorted(set(map(str, jobs["op"].dropna()))))],
            "dtypes": [", ".join(sorted(set(map(str, jobs["dtype"].dropna()))))],
            "sizes": [f"{fmt_bytes(jobs['V_bytes'].min())} to {fmt_bytes(jobs['V_bytes'].max())}"]}))

    rep.heading("How these numbers were taken")
    rep.text(measurement_text(pts if len(pts) else s[s["status"] == "ok"]))

    if len(pts):
        figs = _figures(a, out)
        rep.heading("Figures")
        for path, caption in figs:
            rep.figure(path, caption)

    if len(pts) or not s["op"].eq("matmul").all():  # a matmul-only sweep has no collective fits
        _collective_sections(rep, a)

    add_matmul_section(rep, s, sweep.model_hw)
    add_claims_section(rep, s, root)
    add_processes_section(rep, sweep, out)  # only for sweeps with multi-process jobs

    if len(failed) or s["skipped"].notna().any():
        rep.heading("Failed and skipped")
        if len(failed):
            rep.table(pd.DataFrame({"job": failed["job"], "error type": failed["error_type"],
                                    "error": failed["error"].astype(str).str.slice(0, 300)}))
        sk = s[s["skipped"].notna()].drop_duplicates("job")
        if len(sk):
            rep.text("Files that could not be read (the rest of the report stands without them):")
            rep.table(pd.DataFrame({"job": sk["job"], "skipped": sk["skipped"]}))

    rep.heading("Traces")
    rep.text(f"Each job folder holds `trace/plugins/profile/<time>/<host>.xplane.pb`. Open them with "
             f"`python -m analysis view {root}` (XProf on 127.0.0.1), or "
             f"`tensorboard --logdir {root} --host 127.0.0.1`. The compiled HLO is in each job's `hlo/`.")
    return rep


def _collective_sections(rep: Report, a: dict) -> None:
    """Fitted constants and the point-by-point comparison with the book's model."""
    pts, fits = a["points"], a["fits"]
    rep.heading("Fitted latency and bandwidth")
    if len(fits):
        f = fits.copy()
        cols = {"op": "op", "axes": "axes", "group_size": "devices/group", "dtype": "dtype", "mesh": "mesh",
                "n_points": "points", "alpha_s": "α (s)", "beta_Bps": "β (B/s)",
                "alpha_beta_rel_rmse": "α-β rel. RMSE", "T_min_s": "T_min (s)", "W_Bps": "W (B/s)",
                "book_rel_rmse": "book rel. RMSE", "crossover_bytes": "crossover V"}
        f["crossover_bytes"] = f.get("crossover_bytes", pd.Series(dtype=float)).map(fmt_bytes)
        cols["note"] = "note"
        rep.table(f[[c for c in cols if c in f]].rename(columns=cols))
        rep.text("α-β: `T = α + V/β`. Book: `T = max(T_min·hops, c·V/W)` with the book's hops and factor c "
                 "for each collective, so W is comparable across collectives. Errors are relative, as measured. "
                 "A fit uses only the points of one regime: flagged points (above their ceiling, page-faulting) "
                 "and points in another bandwidth regime (a cache edge) are left out, and a family needs 3 points.")
        left = a.get("left_out")
        if left is not None and len(left):
            rep.text("Left out of the fits:")
            rep.table(pd.DataFrame({"op": left["op"], "axes": left["axes"], "job": left["job"],
                                    "V": left["V_bytes"].map(fmt_bytes), "why": left["reason"]}))
    else:
        rep.text("Too few successful points to fit.")

    rep.heading("Measured against the book's model")
    rep.text(f"Model constants: {a['model_source']}.")
    if len(pts):
        t = pd.DataFrame({
            "op": pts["op"], "axes": pts["axes"], "V": pts["V_bytes"].map(fmt_bytes), "time (s)": pts["time_s"],
            "95% CI": [f"{fmt(lo)} to {fmt(hi)}" for lo, hi in zip(pts["time_ci_low_s"], pts["time_ci_high_s"])],
            "busbw (B/s)": pts["busbw_Bps"], "of ceiling": pts["busbw_over_ceiling"], "model (s)": pts["model_time_s"], "regime": pts["model_regime"],
            "measured/model": pts["measured_over_model"], "step (s)": pts["step_time_s"],
            "loop (s)": pts["loop_time_s"], "device (s)": pts["device_time_s"],
            "flags": pts["flags"], "caveats": pts["caveats"]})
        rep.table(t)
        noisy = pts[pts["noisy"]]
        if len(noisy):
            rep.text(f"**{len(noisy)} noisy point(s)**: the median's 95% CI is wider than the target "
                     f"(±{100 * 0.05:.0f}% by default) within the time budget; read them with care: "
                     + ", ".join(f"{r.op} {fmt_bytes(r.V_bytes)} (±{100 * r.time_rel_ci:.0f}%)" for r in noisy.itertuples()))

def _figures(a: dict, out: Path) -> list[tuple[Path, str]]:
    pts, fits, cur = a["points"], a["fits"], a["curves"]
    hw = a["model_hw"]
    title = f"{pts['hardware'].iloc[0]} ({pts['device_kind'].iloc[0]} x{int(pts['device_count'].iloc[0])})"
    f1 = figures.time_vs_bytes(pts, cur, out / "time_vs_bytes.png", title)
    cross = []
    for fam, g in pts.groupby("family", sort=False):
        first = g.iloc[0]
        f = fits[(fits["op"] == first["op"]) & (fits["axes"] == first["axes"]) & (fits["mesh"] == first["mesh"])
                 & (fits["dtype"] == first["dtype"])] if "crossover_bytes" in fits else fits.iloc[0:0]
        if len(f) and pd.notna(f["crossover_bytes"].iloc[0]) and f["crossover_bytes"].iloc[0] > 0:
            cross.append({"family": fam, "V_bytes": f["crossover_bytes"].iloc[0],
                          "label": fmt_bytes(f["crossover_bytes"].iloc[0])})
    ceilings = pts.dropna(subset=["ceiling_busbw_Bps"])[["family", "V_bytes", "ceiling_busbw_Bps", "ceiling_kind"]]
    f2 = figures.bandwidth_vs_bytes(pts, cur, pd.DataFrame(cross, columns=["family", "V_bytes", "label"]),
                                    ceilings, out / "bandwidth_vs_bytes.png", title)
    return [(f1, "Time per step against V (log-log): untraced medians with p10-p90 bars, the α-β fit "
                 "(dashed) and the book's model (solid)."),
            (f2, "Bus bandwidth against V, the model's curve, where each family turns from latency-bound to "
                 "bandwidth-bound (dotted), and each point's ceiling (dashed grey; on CPU measured at the "
                 "point's own size, so caches show).")]


ESTIMATOR_WORDS = {
    "step": "the wall time of one blocked step (what a caller sees, the host's dispatch and sync included)",
    "loop": "the program repeated K times in one call, per repetition (dispatch paid once per K)",
    "device": "the devices' own op times from the profiler trace",
}


def measurement_text(pts: pd.DataFrame) -> str:
    """How the numbers in the tables were taken: the estimator, rounds, intervals, and what
    the other estimators and the trace showed."""
    if not len(pts):
        return "No point succeeded."
    src = pts["source"].dropna().mode()
    src = src.iloc[0] if len(src) else "step"
    rounds = pts["time_rounds"].dropna()
    parts = [f"Times are the **{src}** estimator: {ESTIMATOR_WORDS.get(src, src)}."]
    if len(rounds):
        parts.append(f"Each point was timed in {int(rounds.max())} round(s), interleaved across the sweep in a shuffled "
                     "order; its median is the median of the rounds' medians, and its 95% interval a bootstrap "
                     "over rounds and samples, so it covers drift between rounds, not only one stretch of noise. "
                     f"{int(pts['rounds_disagree'].sum())} point(s) had rounds whose own intervals do not overlap.")
    floor = pts["dispatch_floor_s"].dropna()
    if len(floor):
        small = pts.loc[pts["V_bytes"] == pts["V_bytes"].min(), "dispatch_floor_s"].dropna()
        parts.append(f"Beside it: *loop* per repetition, and the dispatch floor *step - loop* "
                     f"({fmt(float(small.median()) * 1e6) if len(small) else '?'} us at the smallest V).")
    slow = pts["profiler_slowdown"].dropna()
    if len(slow):
        parts.append(f"The *device* estimator comes from the traced steps; tracing slowed a step {slow.median():.2g}x "
                     f"(range {slow.min():.2g}x to {slow.max():.2g}x: traced step / untraced step)"
                     + (", which is why on CPU the step, not the trace, is timed." if src == "step" else "."))
    share = pts["dispatch_share"].dropna()
    if len(share):
        parts.append(f"Dispatch share (step - device) / step: median {share.median():.0%}.")
    faults = pts["page_faults_per_step"].dropna()
    if len(faults):
        parts.append(f"Minor page faults per step: median {faults.median():.0f}, largest {faults.max():.0f} "
                     "(the worker runs with a malloc that keeps large buffers; a point faulting in more than 5% "
                     "of the bytes it moves is flagged).")
    return " ".join(parts)
