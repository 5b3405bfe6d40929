"""``python -m analysis compare DIR_A DIR_B [...] [--out DIR]``: a report comparing sweeps
that share experiments (the same collectives and sizes), e.g. a float32 sweep against a
bfloat16 one, or mesh x8 against xy_4x2.

Writes ``compare.md``, ``index.html`` (self-contained), ``ratios.csv``, ``fits.csv``,
``config_diff.csv`` and the figures to ``--out`` (default
``outputs/compare/<YYYY-mm-dd_HH-MM-SS>``, relative to the current folder), and prints the
path of ``index.html``. A folder with no successful results, or sweeps that share no
experiment, exit with status 2 and one line on stderr.
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``compare`` command's options."""
    parser.add_argument("dirs", type=Path, nargs="+",
                        help="two or more sweep (multirun) folders; the first is the reference")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default: outputs/compare/<time>)")


class CompareError(Exception):
    """Input the comparison cannot use; the message is the one line the user sees."""


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.3g} B"


def _values(points, sweep: str, column: str) -> str:
    """The distinct values of ``column`` among one sweep's points, ``, ``-joined."""
    return ", ".join(sorted(set(points.loc[points["sweep"] == sweep, column].astype(str))))


def _short(df):
    """Long values (a hardware's calibrated list) cut for the report; config_diff.csv has them whole."""
    return df.map(lambda v: v if len(str(v)) <= 120 else f"{str(v)[:117]}...")


def load(dirs: list[Path]):
    """(points of every sweep with a ``sweep`` label, their fits, the config diff, the labels)."""
    import pandas as pd

    from analysis import compare
    from analysis.fit import fit_table
    from analysis.load import job_dirs, read_results
    from analysis.predictions import unit_terms
    from analysis.report import target_points
    from analysis.summary import summary_table

    if len(dirs) < 2:
        raise CompareError("compare needs two or more sweep folders")
    names = [d.resolve().name for d in dirs]
    results, points = {}, []
    for d, name in zip(dirs, names):
        if not d.is_dir() or not job_dirs(d):
            raise CompareError(f"{d} holds no run folders (no */result.json)")
        pts = target_points(summary_table(d))
        if not len(pts):
            raise CompareError(f"{d} has no successful results")
        results[name] = read_results(d)
        points.append(pts)
    diff = compare.differing_keys(compare.config_values(results), names)
    labels = compare.sweep_labels(names, compare.split_absent(diff)[0])
    diff.columns = ["key", *labels]
    points = [unit_terms(p.assign(sweep=label)) for p, label in zip(points, labels)]
    fits = pd.concat([fit_table(p).assign(sweep=label) for p, label in zip(points, labels)], ignore_index=True)
    return pd.concat(points, ignore_index=True), fits, diff, labels


def build(dirs: list[Path], out: Path):
    """Compute the comparison and write every file under ``out``; returns ``index.html``."""
    import pandas as pd

    from analysis import compare, compare_plots
    from analysis.render import Report, fmt

    points, fits, diff, labels = load(dirs)
    keys, varied = compare.match_keys(points)
    ratios = compare.ratio_table(points, keys, labels[0])
    if not len(ratios):
        raise CompareError(f"the sweeps share no experiments (matched on {', '.join(keys)}): "
                           f"{' vs '.join(str(d) for d in dirs)}")
    side = compare.fits_side_by_side(fits, keys, labels)
    out.mkdir(parents=True, exist_ok=True)
    ratios.to_csv(out / "ratios.csv", index=False)
    side.to_csv(out / "fits.csv", index=False)
    diff.to_csv(out / "config_diff.csv", index=False)

    rep = Report(f"shardlab comparison: {' vs '.join(labels)}")
    jobs = points.drop_duplicates(["sweep", "job"])
    rep.table(pd.DataFrame({
        "sweep": labels, "folder": [str(d) for d in dirs],
        "ok points": [int((jobs["sweep"] == s).sum()) for s in labels],
        **{title: [_values(points, s, col) for s in labels]
           for title, col in (("hardware", "hardware"), ("device", "device_kind"), ("jax", "jax_version"))}}))
    rep.text(f"Ratios are each sweep over the reference `{labels[0]}` (the first folder). Experiments are "
             f"matched on {', '.join(f'`{k}`' for k in keys)}"
             + (f"; the sweeps differ in {', '.join(f'`{k}`' for k in varied)}, which is what is compared."
                if varied else ".")
             + " Tables: `ratios.csv`, `fits.csv`, `config_diff.csv`.")

    rep.heading("Config keys that differ")
    both, some = compare.split_absent(diff)
    if len(both):
        rep.table(_short(both))
    else:
        rep.text("None of the keys every sweep has: the same experiments, run again.")
    if len(some):
        rep.text("Keys only some sweeps' configs have (usually a newer shardlab that added them with their "
                 "defaults):")
        rep.table(_short(some))

    rep.heading("Time ratios")
    summary = ratios.groupby(["sweep", "op"], sort=False).agg(
        points=("time_ratio", "size"), geomean=("time_ratio", compare.geometric_mean),
        lowest=("time_ratio", "min"), highest=("time_ratio", "max"), differ=("differs", "sum")).reset_index()
    rep.table(summary.rename(columns={"geomean": "geometric mean ratio", "differ": "CI excludes 1"}))
    shown = [k for k in keys if k not in ("op", "size_bytes")]
    rep.table(pd.DataFrame({
        "sweep": ratios["sweep"], "op": ratios["op"], **{k: ratios[k] for k in shown},
        "V": ratios["V_bytes"].map(_size), f"time {labels[0]} (s)": ratios["time_s_ref"],
        "time (s)": ratios["time_s"], "ratio": ratios["time_ratio"],
        "95% CI": [f"{fmt(lo)} to {fmt(hi)}"
                   for lo, hi in zip(ratios["time_ratio_ci_low"], ratios["time_ratio_ci_high"])],
        "CI excludes 1": ratios["differs"], "busbw ratio": ratios["busbw_ratio"]}))
    rep.text("Ratio = sweep median / reference median (below 1: the sweep is faster). Its 95% CI combines the "
             "two medians' order-statistic CIs in log space, as if independent. A ratio whose CI includes 1 is "
             "no evidence of a difference; one that excludes it may still be drift between runs, which the "
             "CIs (sampling noise within a run) do not cover: on a shared CPU host, re-running the same "
             "sweep can move medians by tens of percent (DESIGN.md fact 8).")

    rep.heading("Fitted constants side by side")
    if len(side):
        rep.table(side)
        rep.text("Per experiment family and sweep, from each sweep's own fit: the book's "
                 "`T = max(T_min·hops, c·V/W)` and α-β `T = α + V/β`.")
    else:
        rep.text("Too few points per family to fit.")

    rep.heading("Figures")
    title = " vs ".join(labels)
    rep.figure(compare_plots.time_vs_bytes(points, out / "time_vs_bytes.png", title, labels),
               "Time per step against V, one colour per sweep, one marker per collective (bars: 95% CI).")
    rep.figure(compare_plots.bandwidth_vs_bytes(points, out / "bandwidth_vs_bytes.png", title, labels),
               "Bus bandwidth against V, one colour per sweep.")
    rep.figure(compare_plots.ratio_vs_bytes(ratios, out / "ratio_vs_bytes.png", title, labels),
               f"Time ratio over {labels[0]} against V with its 95% CI; the dashed line is no difference.")
    (out / "compare.md").write_text(rep.to_markdown(out))
    index = out / "index.html"
    index.write_text(rep.to_html())
    return index


def main(args: argparse.Namespace) -> int:
    """Run ``compare``; 0 on success, 2 on unusable input (one line on stderr)."""
    out = args.out or Path("outputs") / "compare" / dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    try:
        print(build(args.dirs, out))
    except CompareError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
