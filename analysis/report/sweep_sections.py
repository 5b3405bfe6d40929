"""The sweep report's sections after the headline: what ran, the nccl-tests-style tables,
the fits, the model, what failed or was skipped, and each point's files. Each appends its
blocks to a :class:`~analysis.report.document.Report`; the tables come from the sweep
(:func:`analysis.sweep.load_sweep`). :mod:`analysis.report.sweep_report` orders them."""

from __future__ import annotations

import shlex
from pathlib import Path

import pandas as pd

from analysis.book.units import fmt_bandwidth, fmt_bytes, fmt_duration, fmt_pct
from analysis.headline import within
from analysis.report.document import Link, Report
from analysis.report.nccl_table import avg_busbw_line, nccl_frame
from analysis.runs.record import IMPORTED, ONE_ROUND, STEP, Result, RoundsRule, either
from analysis.runs.rundir import LOG_NAME, RESULT_NAME, SUMMARY_NAME, sweep_command
from analysis.statistics.fit import BANDWIDTH_REGIME, CLEARLY_BANDWIDTH, LARGEST, MIN_POINTS, REGIME_JUMP
from analysis.sweep import Sweep


def resume_command(root: Path) -> str:
    """The command that finishes this sweep (re-runs failed and missing points): the one that
    started it (``sweep.json``) with its folder and ``resume=true``."""
    cmd = sweep_command(root) or "python -m runner <the same sweep and overrides>"
    kept = [a for a in shlex.split(cmd) if not a.startswith(("hydra.sweep.dir=", "resume="))]
    return " ".join([shlex.join(kept), f"hydra.sweep.dir={shlex.quote(str(root))}", "resume=true"])


def what_ran(rep: Report, points: pd.DataFrame, ok: pd.DataFrame) -> None:
    """One table: hardware, devices, jax, meshes, ops, dtypes, sizes; no empty fields."""
    first = ok.iloc[0] if len(ok) else (points.iloc[0] if len(points) else None)
    if first is None:
        return
    rep.heading("What ran")

    def values(col, fmt_one=str) -> str:
        # a point that failed before its mesh was known records an empty string, not a gap
        v = sorted({x for x in points[col].dropna() if str(x).strip()}, key=str) if col in points else []
        return ", ".join(fmt_one(x) for x in v) or "(none recorded)"

    sizes = points["V_bytes"].dropna()
    row = {
        "hardware": first.get("hardware") or "(unknown)",
        "backend": first.get("backend") or "(none ran)",
        "device": first.get("device_kind") or "(none ran)",
        "devices": int(first["device_count"]) if pd.notna(first.get("device_count")) else "(none ran)",
        "jax": first.get("jax_version") or "(none ran)",
        "meshes": values("mesh_axes"),
        "ops": values("op"),
        "dtypes": values("dtype"),
        "sizes": (
            f"{fmt_bytes(sizes.min())} to {fmt_bytes(sizes.max())}"
            if sizes.min() != sizes.max()
            else fmt_bytes(sizes.min())
        )
        if len(sizes)
        else "(matmuls: see their dims)",
    }
    rep.table(pd.DataFrame([row]))


def nccl_tables(rep: Report, pts: pd.DataFrame) -> None:
    """Per family, the table nccl-tests prints, line for line comparable."""
    rep.heading("Results as nccl-tests prints them")
    rep.text(
        "Per family, one line per size, as nccl-tests' output: size (bytes of S, what nccl-tests' size "
        "column counts), count (elements one rank passes: per rank, per peer for AllToAll), type, time (us), "
        "algbw and busbw (GB/s), #wrong (devices whose result differed from NumPy; blank when unchecked); "
        "closed by the mean bus bandwidth over the sizes, as nccl-tests closes its table."
    )
    for fam, g in pts.groupby("family", sort=False):
        g = g.sort_values("V_bytes")
        rep.text(f"**{fam}**")
        rep.table(nccl_frame(g))
        rep.text(f"`{avg_busbw_line(g).strip()}`")


def _with_ci(fits: pd.DataFrame, name: str, unit: str, fmt) -> pd.Series:
    """A constant and its 95% interval in one cell: ``1.2 GB/s (0.9-1.5 GB/s)``."""
    if f"{name}_{unit}" not in fits:
        return pd.Series("", index=fits.index)
    lo = fits.get(f"{name}_ci_low_{unit}", pd.Series(None, index=fits.index))
    hi = fits.get(f"{name}_ci_high_{unit}", pd.Series(None, index=fits.index))
    cells = [
        "" if v is None or pd.isna(v) else fmt(v) + within(a, b, fmt) for v, a, b in zip(fits[f"{name}_{unit}"], lo, hi)
    ]
    return pd.Series(cells, index=fits.index)


def fits_section(rep: Report, sweep: Sweep) -> None:
    """The fitted constants per family, each with its 95% bootstrap interval, and the points
    the fits left out."""
    fits, left = sweep.fits, sweep.left_out
    rep.heading("Fitted latency and bandwidth")
    if not len(fits):
        rep.text("Too few successful points to fit.")
        return
    f = pd.DataFrame(
        {
            "op": fits["op"],
            "axes": fits["axes"],
            "devices/group": fits["group_size"],
            "dtype": fits["dtype"],
            "points": fits["n_points"],
            "α": _with_ci(fits, "alpha", "s", fmt_duration),
            "β": _with_ci(fits, "beta", "Bps", fmt_bandwidth),
            "α-β error": fits.get("alpha_beta_rel_rmse", pd.Series(dtype=float)).map(lambda v: fmt_pct(v, 1)),
            "T_min": _with_ci(fits, "T_min", "s", fmt_duration),
            "latency floor": _with_ci(fits, "latency_floor", "s", fmt_duration),
            "W": _with_ci(fits, "W", "Bps", fmt_bandwidth),
            "book error": fits.get("book_rel_rmse", pd.Series(dtype=float)).map(lambda v: fmt_pct(v, 1)),
            "crossover": _with_ci(fits, "crossover", "bytes", fmt_bytes),
            "note": fits.get("note", pd.Series(dtype=object)).fillna(""),
        }
    )
    rep.table(f)
    boot = fits.dropna(subset=["bootstrap_replicates"]) if "bootstrap_replicates" in fits else fits.iloc[0:0]
    rep.text(
        "α-β: `T = α + V/β`. Book: `T = max(T_min·hops, c·V/W)` with the book's hops and factor c for each "
        "collective, so W is comparable across collectives. Errors are the relative RMS over the points, as "
        "measured. In brackets, 95% intervals: "
        + (
            f"{int(boot['bootstrap_replicates'].iloc[0])} bootstrap replicates (seed "
            f"{int(boot['bootstrap_seed'].iloc[0])}) redraw every point's median from "
            f"{boot['resampled'].iloc[0]} and repeat the whole fit, regime selection included"
            if len(boot)
            else "none"
        )
        + f". A fit uses only the points of one regime: flagged points are left out, then points more than "
        f"{REGIME_JUMP:g}x faster (effective bandwidth c·V/T) than the median of the {LARGEST} largest messages "
        f"that take {CLEARLY_BANDWIDTH:g}x the smallest sizes' time or more (a cache edge; the book's W is what "
        f"large messages see); a family needs {MIN_POINTS} points, and W and "
        f"the crossover need a bandwidth regime (a bandwidth-bound point taking at least {BANDWIDTH_REGIME:g}x "
        "its latency term)."
    )
    if len(left):
        rep.text("Left out of the fits:")
        rep.table(
            pd.DataFrame(
                {
                    "op": left["op"],
                    "axes": left["axes"],
                    "point": left["point"],
                    "V": left["V_bytes"].map(fmt_bytes),
                    "why": left["reason"],
                }
            )
        )


def model_section(rep: Report, sweep: Sweep) -> None:
    pts = sweep.points
    rep.heading("Measured against the book's model")
    self_fit = pts["model_self_fit"] if "model_self_fit" in pts else pd.Series(False, index=pts.index)
    cv = pts["measured_over_model_cv"] if "measured_over_model_cv" in pts else pts["measured_over_model"]
    estimator = _estimator(pts)
    rep.text(
        f"Model constants: {sweep.model_source}. "
        + (
            # another tool's log: its average, no samples of ours, no interval and no other estimator
            "Times are the imported log's own."
            if estimator == IMPORTED
            else f"Times are the *{estimator}* estimator with its 95% interval; *step* and *loop* beside it."
            if "loop_time_s" in pts and pts["loop_time_s"].notna().any()
            else f"Times are the *{estimator}* estimator with its 95% interval; *step* beside it (no *loop* times: "
            "timing.loop=false, as timing=quick sets)."
        )
        + (
            f" measured/model of the {int(self_fit.sum())} points marked *self-fit* agrees by construction (the "
            "model's constants were fitted to them); *out of sample* holds each of them against its family's fit "
            "without its size (leave one size out), and is measured/model for every other point."
            if self_fit.any()
            else ""
        )
    )
    expected = "expected_time_s" in pts and pts["expected_time_s"].notna().any()
    if expected:
        rep.text(
            "*expected* is the time the hardware entry's published measurements lead one to expect "
            "(`analysis/book/expected_cost.py`: the share of the link rate each collective reaches, and the "
            "launch and protocol floors, from the entry's sourced `expected` block); *measured/model* is "
            "measured over the roofline, *measured/expected* measured over that."
        )
    table = pd.DataFrame(
        {
            "op": pts["op"],
            "axes": pts["axes"],
            "V": pts["V_bytes"].map(fmt_bytes),
            "time": pts["time_s"].map(fmt_duration),
            "95% interval": [
                f"{fmt_duration(lo)} to {fmt_duration(hi)}" if pd.notna(lo) and pd.notna(hi) else ""
                for lo, hi in zip(pts["time_ci_low_s"], pts["time_ci_high_s"])
            ],
            "step": pts["step_time_s"].map(fmt_duration),
            "loop": pts["loop_time_s"].map(fmt_duration),
            "busbw": pts["busbw_Bps"].map(fmt_bandwidth),
            "of ceiling": pts["busbw_over_ceiling"].map(fmt_pct),
            "model": pts["model_time_s"].map(fmt_duration),
            "regime": pts["model_regime"],
            "measured/model": [
                (f"{v:.2g}" + (" (self-fit)" if own else "")) if pd.notna(v) else ""
                for v, own in zip(pts["measured_over_model"], self_fit)
            ],
            "out of sample": cv.map(lambda v: f"{v:.2g}" if pd.notna(v) else ""),
        }
    )
    if expected:
        table["expected"] = pts["expected_time_s"].map(fmt_duration)
        table["measured/expected"] = (pts["time_s"] / pts["expected_time_s"]).map(
            lambda v: f"{v:.2g}" if pd.notna(v) else ""
        )
    table["flags"] = pts["flags"].fillna("")
    table["caveats"] = pts["caveats"].fillna("")
    rep.table(table)


def _estimator(pts: pd.DataFrame) -> str:
    chosen = pts["estimator"].dropna().mode() if "estimator" in pts else pd.Series(dtype=object)
    return chosen.iloc[0] if len(chosen) else STEP


def problems_section(rep: Report, sweep: Sweep, failed: pd.DataFrame) -> None:
    s = sweep.summary
    if sweep.missing:
        rep.heading("Missing points")
        rep.text(
            f"The sweep asked for {len(sweep.expected)} points; these have no result (interrupted, or never "
            f"started). `{resume_command(sweep.root)}` runs them."
        )
        rep.table(
            pd.DataFrame(
                {
                    "point number": [m["num"] for m in sweep.missing],
                    "overrides": [" ".join(m["overrides"]) for m in sweep.missing],
                }
            )
        )
    if len(failed) or s["skipped"].notna().any():
        rep.heading("Failed and skipped")
        if len(failed):
            rep.table(
                pd.DataFrame(
                    {
                        "point": failed["point"],
                        "error type": failed["error_type"],
                        "error": failed["error"].astype(str).str.slice(0, 300),
                    }
                )
            )
        sk = s[s["skipped"].notna()].drop_duplicates("point")
        if len(sk):
            rep.text("Files that could not be read (the rest of the report stands without them):")
            rep.table(pd.DataFrame({"point": sk["point"], "skipped": sk["skipped"]}))
    no_time = _without_time(s)
    if len(no_time):
        rep.heading("Points without a time")
        rep.text(
            "These points ran (status ok) but the estimator their times come from found nothing to time, so "
            "they have no time, no bus bandwidth and no place in the fits. No other estimator's number stands "
            "in: a blocked step's wall time holds the host's dispatch and sync, which a device time (as XProf "
            "shows it) does not. Their step and loop times are still in `summary.csv` (`step_time_s`, "
            "`loop_time_s`)."
        )
        rep.table(
            pd.DataFrame(
                {
                    "point": no_time["point"],
                    "op": no_time["op"],
                    "V": no_time["V_bytes"].map(fmt_bytes),
                    "estimator": no_time["estimator"],
                    "why": no_time["missing_reason"],
                }
            )
        )


def _without_time(s: pd.DataFrame) -> pd.DataFrame:
    """The ok points whose chosen estimator gave no time (``missing_reason``), one row each."""
    if "missing_reason" not in s:
        return s.iloc[:0]
    return s[(s["status"] == "ok") & s["missing_reason"].notna()].drop_duplicates("point")


def points_section(rep: Report, sweep: Sweep) -> None:
    """Every point with links to its files, and how to open its trace."""
    rep.heading("Points and their files")
    rep.text(
        f"Each point folder holds `result.json` (everything measured), `hlo/` (the lowered and compiled "
        f"programs) and `trace/plugins/profile/<time>/<host>.xplane.pb`. Open all traces with "
        f"`python -m analysis view {sweep.root}` (XProf on 127.0.0.1, one run per point), or one point's "
        "with `python -m analysis view <its folder>`."
    )
    rows = []
    for r in sweep.results:
        point, files = r.point, r.files
        rows.append(
            {
                "point": point,
                "status": r.status,
                "result": Link(RESULT_NAME, f"../{point}/{RESULT_NAME}"),
                "HLO": Link("compiled", f"../{point}/{files['hlo_compiled']}") if files.get("hlo_compiled") else "",
                "trace": Link("xplane", f"../{point}/{files['xplane']}") if files.get("xplane") else "",
                "log": Link(LOG_NAME, f"../{point}/{LOG_NAME}"),
                "rounds": _rounds_taken(r),
            }
        )
    if len(rows) > 60:  # summarise: the links of the first 50, the rest in summary.csv
        rep.text(f"The first 50 of {len(rows)} points; every point is a row of `{SUMMARY_NAME}`.")
        rows = rows[:50]
    rep.table(pd.DataFrame(rows))


def _rounds_taken(r: Result) -> str:
    """How many rounds a point took, and why (adaptive rounds: ``timing.rounds_rule``)."""
    rule, n = r.timing.rounds_rule, len(r.timing.rounds)
    if rule == RoundsRule():  # one round (timing=quick): no rule ran, and no later round to show drift
        return f"1: {ONE_ROUND}" if n == 1 else (str(n) if n else "")
    return f"{n} of {either(rule.wanted, n)}: {(rule.why or '').split(': ', 1)[-1]}"
