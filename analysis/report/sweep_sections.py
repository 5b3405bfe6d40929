"""The sweep report's sections after the headline: what ran, the nccl-tests-style tables,
the fits, the model, what failed or was skipped, and each point's files. Each appends its
blocks to a :class:`~analysis.report.document.Report`; the tables come from the sweep
(:func:`analysis.sweep.load_sweep`). :mod:`analysis.report.sweep_report` orders them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.book.dtypes import itemsize
from analysis.book.units import fmt_bandwidth, fmt_bytes, fmt_duration, fmt_pct
from analysis.report.document import Link, Report
from analysis.rundir import LOG_NAME, RESULT_NAME, SUMMARY_NAME, sweep_command
from analysis.sweep import Sweep


def resume_command(root: Path) -> str:
    """The command that finishes this sweep (re-runs failed and missing points): the one that
    started it (``sweep.json``) with its folder and ``resume=true``."""
    import shlex

    cmd = sweep_command(root) or "python -m runner <the same sweep and overrides>"
    kept = [a for a in shlex.split(cmd) if not a.startswith(("hydra.sweep.dir=", "resume="))]
    return " ".join([shlex.join(kept), f"hydra.sweep.dir={shlex.quote(str(root))}", "resume=true"])


def what_ran(rep: Report, jobs: pd.DataFrame, ok: pd.DataFrame) -> None:
    """One table: hardware, devices, jax, meshes, ops, dtypes, sizes; no empty fields."""
    first = ok.iloc[0] if len(ok) else (jobs.iloc[0] if len(jobs) else None)
    if first is None:
        return
    rep.heading("What ran")

    def values(col, fmt_one=str) -> str:
        # a point that failed before its mesh was known records an empty string, not a gap
        v = sorted({x for x in jobs[col].dropna() if str(x).strip()}, key=str) if col in jobs else []
        return ", ".join(fmt_one(x) for x in v) or "(none recorded)"

    sizes = jobs["V_bytes"].dropna()
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
        "column counts), count (elements), type, time (us), algbw and busbw (GB/s), #wrong (devices whose "
        "result differed from NumPy; blank when unchecked)."
    )
    for fam, g in pts.groupby("family", sort=False):
        g = g.sort_values("V_bytes")
        rep.text(f"**{fam}**")
        size = g["S_bytes"].fillna(g["V_bytes"])
        elem = g["dtype"].map(itemsize)
        rep.table(
            pd.DataFrame(
                {
                    "size": size.astype("int64"),
                    "count": (size / elem).astype("int64"),
                    "type": g["dtype"].map(
                        lambda d: {
                            "float32": "float",
                            "bfloat16": "bfloat16",
                            "float16": "half",
                            "int32": "int32",
                            "int8": "int8",
                        }.get(d, d)
                    ),
                    "redop": g["op"].map(lambda o: "sum" if o in ("all_reduce", "reduce_scatter") else "none"),
                    "time (us)": (g["time_s"] * 1e6).map(lambda v: f"{v:.2f}"),
                    "algbw (GB/s)": (g["algbw_Bps"] / 1e9).map(lambda v: f"{v:.2f}"),
                    "busbw (GB/s)": (g["busbw_Bps"] / 1e9).map(lambda v: f"{v:.2f}"),
                    "#wrong": g["checked"].map(lambda c: 0 if c else ""),
                }
            )
        )


def fits_section(rep: Report, sweep: Sweep) -> None:
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
            "α": fits.get("alpha_s", pd.Series(dtype=float)).map(fmt_duration),
            "β": fits.get("beta_Bps", pd.Series(dtype=float)).map(fmt_bandwidth),
            "α-β error": fits.get("alpha_beta_rel_rmse", pd.Series(dtype=float)).map(lambda v: fmt_pct(v, 1)),
            "T_min": fits.get("T_min_s", pd.Series(dtype=float)).map(fmt_duration),
            "W": fits.get("W_Bps", pd.Series(dtype=float)).map(fmt_bandwidth),
            "book error": fits.get("book_rel_rmse", pd.Series(dtype=float)).map(lambda v: fmt_pct(v, 1)),
            "crossover": fits.get("crossover_bytes", pd.Series(dtype=float)).map(fmt_bytes),
            "note": fits.get("note", pd.Series(dtype=object)).fillna(""),
        }
    )
    rep.table(f)
    rep.text(
        "α-β: `T = α + V/β`. Book: `T = max(T_min·hops, c·V/W)` with the book's hops and factor c for each "
        "collective, so W is comparable across collectives. Errors are the relative RMS over the points, as "
        "measured. A fit uses only the points of one regime: flagged points and points in another bandwidth "
        "regime (a cache edge) are left out, and a family needs 3 points."
    )
    if len(left):
        rep.text("Left out of the fits:")
        rep.table(
            pd.DataFrame(
                {
                    "op": left["op"],
                    "axes": left["axes"],
                    "job": left["job"],
                    "V": left["V_bytes"].map(fmt_bytes),
                    "why": left["reason"],
                }
            )
        )


def model_section(rep: Report, sweep: Sweep) -> None:
    pts = sweep.points
    rep.heading("Measured against the book's model")
    rep.text(
        f"Model constants: {sweep.model_source}. Times are the *{_source(pts)}* estimator with its 95% "
        "interval; *step* and *loop* beside it."
    )
    rep.table(
        pd.DataFrame(
            {
                "op": pts["op"],
                "axes": pts["axes"],
                "V": pts["V_bytes"].map(fmt_bytes),
                "time": pts["time_s"].map(fmt_duration),
                "95% interval": [
                    f"{fmt_duration(lo)} to {fmt_duration(hi)}"
                    for lo, hi in zip(pts["time_ci_low_s"], pts["time_ci_high_s"])
                ],
                "step": pts["step_time_s"].map(fmt_duration),
                "loop": pts["loop_time_s"].map(fmt_duration),
                "busbw": pts["busbw_Bps"].map(fmt_bandwidth),
                "of ceiling": pts["busbw_over_ceiling"].map(fmt_pct),
                "model": pts["model_time_s"].map(fmt_duration),
                "regime": pts["model_regime"],
                "measured/model": pts["measured_over_model"].map(lambda v: f"{v:.2g}" if pd.notna(v) else ""),
                "flags": pts["flags"].fillna(""),
                "caveats": pts["caveats"].fillna(""),
            }
        )
    )


def _source(pts: pd.DataFrame) -> str:
    src = pts["source"].dropna().mode() if "source" in pts else pd.Series(dtype=object)
    return src.iloc[0] if len(src) else "step"


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
                    "job number": [m["num"] for m in sweep.missing],
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
                        "job": failed["job"],
                        "error type": failed["error_type"],
                        "error": failed["error"].astype(str).str.slice(0, 300),
                    }
                )
            )
        sk = s[s["skipped"].notna()].drop_duplicates("job")
        if len(sk):
            rep.text("Files that could not be read (the rest of the report stands without them):")
            rep.table(pd.DataFrame({"job": sk["job"], "skipped": sk["skipped"]}))


def points_section(rep: Report, sweep: Sweep) -> None:
    """Every point with links to its files, and how to open its trace."""
    rep.heading("Points and their files")
    rep.text(
        f"Each job folder holds `result.json` (everything measured), `hlo/` (the lowered and compiled "
        f"programs) and `trace/plugins/profile/<time>/<host>.xplane.pb`. Open all traces with "
        f"`python -m analysis view {sweep.root}` (XProf on 127.0.0.1, one run per point), or one point's "
        "with `python -m analysis view <its folder>`."
    )
    rows = []
    for r in sweep.results:
        job = r["job"]
        files = r.get("files") or {}
        rows.append(
            {
                "job": job,
                "status": r.get("status"),
                "result": Link(RESULT_NAME, f"../{job}/{RESULT_NAME}"),
                "HLO": Link("compiled", f"../{job}/{files['hlo_compiled']}") if files.get("hlo_compiled") else "",
                "trace": Link("xplane", f"../{job}/{files['xplane']}") if files.get("xplane") else "",
                "log": Link(LOG_NAME, f"../{job}/{LOG_NAME}"),
            }
        )
    if len(rows) > 60:  # summarise: the links of the first 50, the rest in summary.csv
        rep.text(f"The first 50 of {len(rows)} points; every point is a row of `{SUMMARY_NAME}`.")
        rows = rows[:50]
    rep.table(pd.DataFrame(rows))
