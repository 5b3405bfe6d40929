"""The report of a sweep: ``summary.csv``, ``samples.csv``, ``fit.json``, ``headline.json``
and ``report/`` (index.html, report.md, figures, the column dictionary), rebuilt from disk.

The tables come from :func:`analysis.sweep.load_sweep` and the analyzers; this module only
writes files and lays out blocks, answer first: the headline, the figures, the
nccl-tests-style tables, then how the numbers were taken and everything behind them.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from analysis.book.units import fmt_bandwidth, fmt_bytes, fmt_duration, fmt_pct
from analysis.headline import family_name, headline_sentence, headline_table, within
from analysis.matmul_cases import Matmuls, load_matmuls
from analysis.predictions import family_fit
from analysis.report import sweep_figures as figures
from analysis.report.claims_section import add_claims_section
from analysis.report.columns import write_dictionary
from analysis.report.document import Report
from analysis.report.matmul_section import add_matmul_section
from analysis.report.measurement import measurement_text
from analysis.report.nccl_export import write_nccl_exports
from analysis.report.processes_section import add_processes_section
from analysis.report.sweep_sections import (
    fits_section,
    model_section,
    nccl_tables,
    points_section,
    problems_section,
    resume_command,
    what_ran,
)
from analysis.report.training_step_section import add_step_section
from analysis.runs.rundir import (
    FIT_NAME,
    HEADLINE_NAME,
    REPORT_DIR,
    SAMPLES_NAME,
    SUMMARY_NAME,
    stamp,
    write_json_atomic,
    write_text_atomic,
)
from analysis.statistics.fit import BOOTSTRAP, SEED
from analysis.statistics.stats import CONFIDENCE
from analysis.sweep import Sweep, load_sweep, samples_table


def _spread(row, regime: str) -> str:
    """``0.26-0.37 (median 0.31, 6)``: the headline's out-of-sample measured/model in one regime."""
    n = row[f"out_of_sample_{regime}_points"]
    if not n or pd.isna(n):
        return ""
    lo, hi, med = (row[f"out_of_sample_{regime}_{s}"] for s in ("min", "max", "median"))
    return f"{lo:.2g}-{hi:.2g} (median {med:.2g}, {int(n)})"


def write_report(
    root: str | Path, hardware: str | None = None, allow_mixed: bool = False, t0: float | None = None
) -> Path:
    """Write the sweep's tables and ``report/`` for the sweep in ``root`` (``hardware``,
    ``allow_mixed``: see :func:`analysis.sweep.load_sweep`); return ``report/index.html``.
    ``report/build_s.txt`` holds the seconds it took, from ``t0`` (a ``time.perf_counter()``;
    default now) on."""
    root = Path(root)
    t0 = time.perf_counter() if t0 is None else t0
    sweep = load_sweep(root, hardware, allow_mixed)
    # on the boundary (tests/project/test_layering.py): tensorboard's protos, ~0.2 s, load
    # only when a report is written (the sweep's report process imports this module while idle)
    from analysis.report.tensorboard_export import report_line, write_tensorboard

    write_text_atomic(root / SUMMARY_NAME, sweep.summary.to_csv(index=False))  # each file whole or not at all
    write_nccl_exports(root, sweep.points, sweep.results)  # nccl-tests/<family>.json and .txt
    tensorboard = write_tensorboard(root, sweep.points)  # tensorboard/: HParams and curves, if installed
    write_text_atomic(root / SAMPLES_NAME, samples_table(sweep.results).to_csv(index=False))
    head = headline_table(sweep.summary, sweep.points, sweep.fits)
    families = [dict(r, text=headline_sentence(pd.Series(r))) for r in _records(head)]
    mm = load_matmuls(sweep.summary, sweep.model_hw)
    write_json_atomic(
        root / HEADLINE_NAME,
        {
            **stamp("headline"),
            "families": families,
            "matmuls": mm.headline if mm is not None else [],
            "expected_points": sweep.expected,
            "missing_points": sweep.missing,
            "incomplete": bool(sweep.missing),
        },
    )
    write_json_atomic(
        root / FIT_NAME,
        {
            **stamp("fit"),
            "fits": _records(sweep.fits),
            "left_out": _records(sweep.left_out),
            "model_source": sweep.model_source,
            "model_W_Bps": getattr(sweep.model_hw, "link_bw_bidir_Bps", None),
            "model_T_min_s": getattr(sweep.model_hw, "hop_latency_s", None),
            "bootstrap": {
                "replicates": BOOTSTRAP,
                "seed": SEED,
                "confidence": CONFIDENCE,
                "over": "each point's rounds (with replacement) and the samples within each round; the whole fit, "
                "regime selection included, is repeated on every replicate",
            },
        },
    )
    out = root / REPORT_DIR
    out.mkdir(exist_ok=True)
    write_dictionary(out / "columns.md")
    rep = build(sweep, head, mm, out)
    if line := report_line(root, tensorboard):  # under "Points and their files", the report's last section
        rep.text(line)
    write_text_atomic(out / "report.md", rep.to_markdown(out))
    index = out / "index.html"
    write_text_atomic(index, rep.to_html())
    write_text_atomic(out / "build_s.txt", f"{time.perf_counter() - t0:.3f}\n")
    return index


def _records(df: pd.DataFrame) -> list[dict]:
    return df.astype(object).where(df.notna(), None).to_dict(orient="records") if len(df) else []


def build(sweep: Sweep, head: pd.DataFrame, mm: Matmuls | None, out: Path) -> Report:
    """The report's blocks, figures saved under ``out``."""
    root, s, pts = sweep.root, sweep.summary, sweep.points
    by_point = sweep.by_point
    ok, failed = by_point[by_point["status"] == "ok"], by_point[by_point["status"] != "ok"]
    title = f"shardlab report: {root.resolve().parent.name}/{root.name}"
    rep = Report(("INCOMPLETE " if sweep.missing else "") + title)
    if sweep.missing:
        rep.banner(
            "incomplete",
            f"**Incomplete**: {len(by_point)} of {len(by_point) + len(sweep.missing)} points have "
            f"results; {len(sweep.missing)} never ran (listed under *Missing points*). Finish "
            f"with `{resume_command(root)}`.",
        )
    rep.text(
        f"{len(by_point)} points: {len(ok)} ok, {len(failed)} failed. Units: times in us/ms/s; sizes in binary "
        "units (KiB = 1024 B, MiB = 2^20 B); bandwidths in decimal GB/s (10^9 B/s, as nccl-tests). Files keep SI "
        f"units named in their columns (`{SUMMARY_NAME}`, `{SAMPLES_NAME}`, `{FIT_NAME}`, `{HEADLINE_NAME}`; "
        "[every column explained](columns.md))."
    )

    _headline(rep, head, mm)

    what_ran(rep, by_point, ok)
    if len(pts):
        # a point without a time (its device estimator found nothing) is in neither the figures
        # nor the nccl-tests tables: "Points without a time" lists it, with the reason
        timed = pts[pts["time_s"].notna()]
        if len(timed):
            rep.heading("Figures")
            for path, caption in _figures(sweep, out):
                rep.figure(path, caption)
        nccl_tables(rep, timed)
        fits_section(rep, sweep)
        model_section(rep, sweep)
    rep.heading("How these numbers were taken")
    rep.text(measurement_text(pts if len(pts) else s[s["status"] == "ok"]))
    if mm is not None:
        add_matmul_section(rep, mm, out)
    add_step_section(rep, sweep.results, sweep.model_hw, sweep.model_source, out)
    add_claims_section(rep, s, root)
    add_processes_section(rep, sweep, out)  # only for sweeps with multi-process points
    problems_section(rep, sweep, failed)
    points_section(rep, sweep)
    return rep


def _headline(rep: Report, head: pd.DataFrame, mm: Matmuls | None) -> None:
    """The report's answer first: the matmuls' and each family's headline, their table and how to read it."""
    if len(head) or mm is not None:
        rep.heading("Headline")
    if mm is not None:
        rep.text("**Matmuls**: " + " ".join(mm.headline))
    if not len(head):
        return
    rep.text("\n\n".join(f"**{headline_sentence(r)}**" for _, r in head.iterrows()))
    rep.table(_headline_table(head))
    rep.text(
        "Which bandwidth to read: **bus bandwidth** (busbw, nccl-tests' convention) is the one to hold "
        "against links and ceilings; algbw (S / time) and the fits' W are beside it in the tables. The "
        "latency floor is the median time of the points the fit calls latency-bound (a family with fewer "
        "than 3 points of one regime has no fit, and its headline gives its fastest median instead); the peak "
        "is the unflagged point whose interval has the highest lower end (so a noisy point only when even its "
        "lower end beats every steady point); *bandwidth-bound above* needs a "
        "bandwidth regime in the sweep; in brackets, 95% bootstrap intervals. measured/model is a *self-fit* where "
        "the model's constants were fitted to the same points (it agrees by construction); its spread by the "
        "model's regime is then *out of sample*: each size against its family's fit without that size. "
        "*Flagged* points (above their ceiling, page-faulting) are left out of every fit."
    )


def _headline_table(head: pd.DataFrame) -> pd.DataFrame:
    """The headline per family in human units, with the 95% intervals in brackets."""
    return pd.DataFrame(
        {
            "collective": [family_name(r) for _, r in head.iterrows()],
            "latency floor": [
                fmt_duration(r["latency_floor_s"])
                + within(r["latency_floor_ci_low_s"], r["latency_floor_ci_high_s"], fmt_duration)
                if str(r["latency_floor_from"]).startswith("fit")
                else "(no fit)"
                for _, r in head.iterrows()
            ],
            "peak bus bandwidth": [
                fmt_bandwidth(r["peak_busbw_Bps"])
                + within(r["peak_busbw_ci_low_Bps"], r["peak_busbw_ci_high_Bps"], fmt_bandwidth)
                if pd.notna(r["peak_busbw_Bps"])
                else ""
                for _, r in head.iterrows()
            ],
            "at V": head["peak_at_V_bytes"].map(fmt_bytes),
            "of ceiling": head["peak_share_of_ceiling"].map(fmt_pct),
            "bandwidth-bound above": [
                fmt_bytes(r["bandwidth_bound_above_bytes"])
                + within(r["bandwidth_bound_above_ci_low_bytes"], r["bandwidth_bound_above_ci_high_bytes"], fmt_bytes)
                if pd.notna(r["bandwidth_bound_above_bytes"])
                else ("no bandwidth regime in range" if r["bandwidth_regime"] in (False,) else "")
                for _, r in head.iterrows()
            ],
            "measured/model": [
                f"{v:.2g}" + (" (self-fit)" if own else "") if pd.notna(v) else ""
                for v, own in zip(head["measured_over_model_median"], head["model_self_fit"])
            ],
            "out of sample, latency-bound": [_spread(r, "latency") for _, r in head.iterrows()],
            "out of sample, bandwidth-bound": [_spread(r, "bandwidth") for _, r in head.iterrows()],
            "ok": head["ok"],
            "failed": head["failed"],
            "flagged": head["flagged"],
            "noisy": head["noisy"],
            "unchecked": head["unchecked"],
        }
    )


def _figures(sweep: Sweep, out: Path) -> list[tuple[Path, str]]:
    pts, fits, cur = sweep.points[sweep.points["time_s"].notna()], sweep.fits, sweep.curves
    title = f"{pts['hardware'].iloc[0]} ({pts['device_kind'].iloc[0]} x{int(pts['device_count'].iloc[0])})"
    cross = []
    for fam, g in pts.groupby("family", sort=False):
        first = g.iloc[0]
        f = family_fit(fits, first) if "crossover_bytes" in fits else fits.iloc[0:0]
        if len(f) and pd.notna(f["crossover_bytes"].iloc[0]) and f["crossover_bytes"].iloc[0] > 0:
            cross.append(
                {
                    "family": fam,
                    "V_bytes": f["crossover_bytes"].iloc[0],
                    "label": fmt_bytes(f["crossover_bytes"].iloc[0]),
                }
            )
    cross = pd.DataFrame(cross, columns=["family", "V_bytes", "label"])
    figs = [
        (
            figures.time_vs_size(pts, cur, out / "time_vs_size.png", title),
            "How long does it take? Time per step against V (log-log): medians with their 95% intervals "
            "(markers), the α-β fit (dashed) and the book's model (solid).",
        ),
    ]
    # A group of one moves nothing (no bus bandwidth to plot on a log axis): such points are
    # only in the time figure, and a sweep of nothing else has no bandwidth figure.
    moved = pts[pts["busbw_Bps"].fillna(0) > 0]
    if len(moved):
        figs.append(
            (
                figures.busbw_vs_size(moved, cur, cross, out / "busbw_vs_size.png", title),
                "How close to the ceiling? Bus bandwidth against V with each point's ceiling (dotted grey; on "
                "CPU measured at the point's own size, so caches show), the model's curve, and where each family "
                "turns bandwidth-bound (dotted vertical). Crosses: flagged points, left out of the fits.",
            )
        )
    if pts["measured_over_model"].notna().any():
        figs.append(
            (
                figures.measured_over_model(pts, out / "measured_over_model.png", title),
                f"Does the book predict it? Measured / model against V (1: exact), with the interval; model "
                f"constants: {sweep.model_source.split(':')[0]}.",
            )
        )
    return figs
