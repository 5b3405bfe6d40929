"""The comparison of sweeps as a report: ``compare.md``, ``index.html``, ``ratios.csv``,
``fits.csv``, ``config_diff.csv`` and figures (tables from :mod:`analysis.compare`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis import compare
from analysis.book.units import fmt_bytes
from analysis.report import compare_figures
from analysis.report.document import Report, fmt
from analysis.runs.rundir import write_text_atomic


def _values(points, sweep: str, column: str) -> str:
    """The distinct values of ``column`` among one sweep's points, ``, ``-joined."""
    return ", ".join(sorted(set(points.loc[points["sweep"] == sweep, column].astype(str))))


def _short(df):
    """Long values (a hardware's calibrated list) cut for the report; config_diff.csv has them whole."""
    return df.map(lambda v: v if len(str(v)) <= 120 else f"{str(v)[:117]}...")


@dataclass(frozen=True)
class _Comparison:
    """The sweeps' timed points and the tables computed from them."""

    dirs: list[Path]
    labels: list[str]  # one per sweep; the first is the reference
    points: pd.DataFrame  # the points with a time
    diff: pd.DataFrame  # config keys that differ
    keys: list[str]  # what experiments are matched on
    varied: list[str]  # the keys the sweeps differ in
    ratios: pd.DataFrame
    side: pd.DataFrame  # the fits side by side


def _compare(dirs: list[Path], allow_mixed: bool) -> _Comparison:
    """Load the sweeps and compute the ratio and fit tables; CompareError where there is nothing to compare."""
    points, fits, diff, labels = compare.load_sweeps(dirs, allow_mixed)
    # a point without a time (its device estimator found nothing) has nothing to compare
    points = points[points["time_s"].notna()]
    if not len(points):
        raise compare.CompareError(
            "no point of these sweeps has a time (each report lists why, under Points without a time)"
        )
    keys, varied = compare.match_keys(points)
    ratios = compare.ratio_table(points, keys, labels[0])
    if not len(ratios):
        raise compare.CompareError(
            f"the sweeps share no points (matched on {', '.join(keys)}): {' vs '.join(str(d) for d in dirs)}"
        )
    side = compare.fits_side_by_side(fits, keys, labels)
    return _Comparison(dirs, labels, points, diff, keys, varied, ratios, side)


def _overview(rep: Report, c: _Comparison) -> None:
    """One row per sweep (folder, points, hardware, device, jax), then what was matched and compared."""
    labels, points = c.labels, c.points
    per_point = points.drop_duplicates(["sweep", "point"])
    rep.table(
        pd.DataFrame(
            {
                "sweep": labels,
                "folder": [str(d) for d in c.dirs],
                "ok points": [int((per_point["sweep"] == s).sum()) for s in labels],
                **{
                    title: [_values(points, s, col) for s in labels]
                    for title, col in (("hardware", "hardware"), ("device", "device_kind"), ("jax", "jax_version"))
                },
            }
        )
    )
    rep.text(
        f"Ratios are each sweep over the reference `{labels[0]}` (the first folder). Experiments are "
        f"matched on {', '.join(f'`{k}`' for k in c.keys)}"
        + (
            f"; the sweeps differ in {', '.join(f'`{k}`' for k in c.varied)}, which is what is compared."
            if c.varied
            else "."
        )
        + " Tables: `ratios.csv`, `fits.csv`, `config_diff.csv`."
    )


def _config_section(rep: Report, diff: pd.DataFrame) -> None:
    """The config keys that differ: those every sweep has, then those only some have."""
    rep.heading("Config keys that differ")
    both, some = compare.split_absent(diff)
    if len(both):
        rep.table(_short(both))
    else:
        rep.text("None of the keys every sweep has: the same points, run again.")
    if len(some):
        rep.text("Keys only some sweeps' configs have (usually a newer shardlab that added them with their defaults):")
        rep.table(_short(some))


def _ratio_section(rep: Report, c: _Comparison) -> None:
    """The time ratios: per sweep and collective, then per experiment with its interval."""
    ratios = c.ratios
    rep.heading("Time ratios")
    summary = (
        ratios.groupby(["sweep", "op"], sort=False)
        .agg(
            points=("time_ratio", "size"),
            geomean=("time_ratio", compare.geometric_mean),
            lowest=("time_ratio", "min"),
            highest=("time_ratio", "max"),
            differ=("differs", "sum"),
        )
        .reset_index()
    )
    rep.table(summary.rename(columns={"geomean": "geometric mean ratio", "differ": "CI excludes 1"}))
    shown = [k for k in c.keys if k not in ("op", "size_bytes")]
    rep.table(
        pd.DataFrame(
            {
                "sweep": ratios["sweep"],
                "op": ratios["op"],
                **{k: ratios[k] for k in shown},
                "V": ratios["V_bytes"].map(fmt_bytes),
                f"time {c.labels[0]} (s)": ratios["time_s_ref"],
                "time (s)": ratios["time_s"],
                "ratio": ratios["time_ratio"],
                "95% CI": [
                    f"{fmt(lo)} to {fmt(hi)}"
                    for lo, hi in zip(ratios["time_ratio_ci_low"], ratios["time_ratio_ci_high"])
                ],
                "CI excludes 1": ratios["differs"],
                "busbw ratio": ratios["busbw_ratio"],
            }
        )
    )
    rep.text(
        "Ratio = sweep median / reference median (below 1: the sweep is faster). Its 95% CI combines the "
        "two medians' order-statistic CIs in log space, as if independent. A ratio whose CI includes 1 is "
        "no evidence of a difference; one that excludes it may still be drift between runs, which the "
        "CIs (sampling noise within a run) do not cover: on a shared CPU host, re-running the same "
        "sweep can move medians by tens of percent."
    )


def _figures_section(rep: Report, c: _Comparison, out: Path) -> None:
    """Time, bus bandwidth and the ratio against V, one colour per sweep."""
    labels = c.labels
    rep.heading("Figures")
    title = " vs ".join(labels)
    rep.figure(
        compare_figures.time_vs_size(c.points, out / "time_vs_size.png", title, labels),
        "Time per step against V, one colour per sweep, one marker per collective (bars: 95% CI).",
    )
    rep.figure(
        compare_figures.busbw_vs_size(c.points, out / "busbw_vs_size.png", title, labels),
        "Bus bandwidth against V, one colour per sweep.",
    )
    rep.figure(
        compare_figures.ratio_vs_size(c.ratios, out / "ratio_vs_size.png", title, labels),
        f"Time ratio over {labels[0]} against V with its 95% CI; the dashed line is no difference.",
    )


def write_compare_report(dirs: list[Path], out: Path, allow_mixed: bool = False) -> Path:
    """Compute the comparison and write every file under ``out``; returns ``index.html``.
    Raises :class:`analysis.compare.CompareError` for sweeps it cannot compare (one whose
    points were measured unlike each other, unless ``allow_mixed``)."""
    c = _compare(dirs, allow_mixed)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "ratios.csv", c.ratios.to_csv(index=False))
    write_text_atomic(out / "fits.csv", c.side.to_csv(index=False))
    write_text_atomic(out / "config_diff.csv", c.diff.to_csv(index=False))

    rep = Report(f"shardlab comparison: {' vs '.join(c.labels)}")
    _overview(rep, c)
    _config_section(rep, c.diff)
    _ratio_section(rep, c)
    rep.heading("Fitted constants side by side")
    if len(c.side):
        rep.table(c.side)
        rep.text(
            "Per family and sweep, from each sweep's own fit: the book's "
            "`T = max(T_min·hops, c·V/W)` and α-β `T = α + V/β`."
        )
    else:
        rep.text("Too few points per family to fit.")
    _figures_section(rep, c, out)
    write_text_atomic(out / "compare.md", rep.to_markdown(out))
    index = out / "index.html"
    write_text_atomic(index, rep.to_html())
    return index
