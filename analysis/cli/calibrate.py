"""``python -m analysis calibrate DIR --name NAME [--out PATH] [--base HARDWARE]``: fit the
book's W and T_min to a sweep, per collective and number of mesh axes, and write them as a
hardware entry (``conf/hardware/NAME.yaml`` by default).

Then ``python -m analysis predict ... --hardware NAME`` and ``python -m runner hardware=NAME``
predict with the measured constants. Invalid input exits with status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from analysis.book.errors import BookError
from analysis.book.hardware import hardware_dir, load_hardware, read_yaml
from analysis.book.units import fmt_bandwidth, fmt_duration
from analysis.cli.options import add_allow_mixed, fail
from analysis.runs.record import Result
from analysis.runs.rundir import point_dirs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``calibrate`` command's options."""
    parser.add_argument("dir", type=Path, help="a sweep (multirun) folder")
    parser.add_argument("--name", required=True, help="the new hardware entry's name, e.g. cpu_laptop")
    parser.add_argument("--out", type=Path, default=None, help="where to write it (default: conf/hardware/NAME.yaml)")
    parser.add_argument(
        "--base",
        default=None,
        help="hardware whose keys and topology rules to start from (default: the one the sweep ran on)",
    )
    add_allow_mixed(parser, "fit")


class _Refused(Exception):
    """Input ``calibrate`` refuses: its message is the one line on stderr."""


@dataclass(frozen=True)
class _Fitted:
    """The fits of one sweep: the calibration table inside domains (maybe empty) and the
    across-domain fit (None without points crossing domains)."""

    sweep: object  # analysis.sweep.Sweep
    base: str  # the base entry's name, as given or as the sweep ran on
    base_hw: object  # its Hardware
    table: object  # pandas.DataFrame of calibrate.CALIBRATION_COLUMNS
    across: dict | None


def _fit(args: argparse.Namespace) -> _Fitted:
    """Check the arguments, load the sweep and fit it (:class:`_Refused` for bad input, in
    the order the checks are made)."""
    import pandas as pd

    from analysis import calibrate
    from analysis.sweep import MixedSweepError, load_sweep

    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]*", args.name):
        raise _Refused(f"--name {args.name!r}: use letters, digits, _ and - (it becomes hardware=NAME)")
    if not args.dir.is_dir() or not point_dirs(args.dir):
        raise _Refused(f"{args.dir} holds no run folders (no */result.json)")
    try:
        sweep = load_sweep(args.dir, allow_mixed=args.allow_mixed)
    except MixedSweepError as exc:
        raise _Refused(str(exc)) from None
    points = sweep.points
    if not len(points):
        raise _Refused(f"{args.dir} has no successful points to fit")
    base = args.base or str(points["hardware"].mode().iloc[0])
    try:
        base_hw = load_hardware(base)
    except BookError as err:
        raise _Refused(str(err)) from None
    if base_hw.interconnect is None:
        raise _Refused(f"base hardware {base_hw.name!r} names no interconnect; pick one with --base (e.g. cpu)")
    from analysis.statistics.resample import rounds_by_point

    # inside a domain and across domains (a multi-node import) are fitted apart: each level
    # has its own fabric in the book's model
    inside, crossing = calibrate.split_levels(points, base_hw)
    across = calibrate.across_calibration(crossing, base_hw) if len(crossing) else None
    table = (
        calibrate.calibration_table(inside, base, rounds_by_point(sweep.results))
        if len(inside)
        else pd.DataFrame(columns=calibrate.CALIBRATION_COLUMNS)
    )
    if not len(table) and across is None:
        raise _Refused(
            f"{args.dir}: no collective has 3 or more usable points to fit (flagged points and points "
            "in another bandwidth regime are left out; every point latency-bound gives no W)"
        )
    return _Fitted(sweep, base, base_hw, table, across)


def _write_entry(args: argparse.Namespace, fit: _Fitted) -> Path:
    """Write the hardware entry (the base entry with the fitted constants and where they came
    from) and check it reads back; its path. :class:`_Refused` for a file calibrate did not write."""
    from analysis import calibrate

    base_hw, table, across = fit.base_hw, fit.table, fit.across
    out = args.out or hardware_dir() / f"{args.name}.yaml"
    try:  # a malformed file is one line (file:line and what YAML said), as load_hardware says it
        existing = read_yaml(out) if out.is_file() else None
        base_raw = read_yaml(calibrate.base_entry_path(fit.base))
    except BookError as exc:
        raise _Refused(str(exc)) from None
    if out.is_file() and "calibrated" not in (existing if isinstance(existing, dict) else {}):
        raise _Refused(f"{out} exists and was not written by calibrate; pick another --name or --out")
    base_raw.pop("calibrated", None)
    today = dt.date.today().isoformat()
    started = _sweep_date(fit.sweep.results)
    source = (
        f"calibrated on {today} by `python -m analysis calibrate` from the sweep {args.dir.resolve()} "
        f"(measured {started}); base entry {base_hw.name}"
    )
    if len(table):
        entry = calibrate.hardware_entry(base_raw, args.name, table, source)
        head = calibrate.headline_fit(table)
        inside_says = f"from {head['op']} over {head['n_axes']} mesh axis/axes"
    else:  # only runs across domains: the links inside keep the base entry's constants
        entry = dict(base_raw, name=args.name, device_kinds=[], source=source, calibrated=[])
        inside_says = f"no run inside one domain: {base_hw.name}'s published link constants"
    if across is not None:
        entry["scaleout_bw_unidir_Bps"] = float(across["scaleout_bw_unidir_Bps"])
        entry["scaleout_latency_s"] = float(across["scaleout_latency_s"])
        entry["source"] += (
            f"; across domains: scaleout_bw_unidir_Bps and scaleout_latency_s fitted to {across['n_points']} "
            f"points crossing domains ({across['ops']}; rel RMS {across['rel_rms_error']:.2f})"
        )
    header = (
        f"{args.name}: {base_hw.name} with W and T_min measured on this machine ({today}).\n"
        "Each `calibrated` entry fits the book's max(T_min * hops, c * V / W) to the sweep's medians\n"
        "for one collective over n_axes mesh axes; predictions use the matching entry, and the\n"
        f"top-level constants ({inside_says}) for any other.\n"
        "device_kinds is empty so that hardware=auto keeps picking the base entry."
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(calibrate.entry_yaml(entry, header))
    calibrate.check_round_trip(out, table)
    return out


def _print_fits(table, across: dict | None) -> None:
    """The fitted constants with their intervals, one line per collective and axis count, then
    the across-domain fit and what each fit left out."""
    from analysis.report.document import fmt
    from analysis.statistics.fit import BOOTSTRAP, SEED

    print(f"{'op':<15} {'axes':>4} {'W (95% interval)':>34} {'T_min (95% interval)':>30} {'rel RMS':>8} {'points':>6}")
    for r in table.itertuples():
        W = f"{fmt_bandwidth(r.W_Bps)} ({_span(r.W_ci_low_Bps, r.W_ci_high_Bps, fmt_bandwidth)})"
        t = f"{fmt_duration(r.T_min_s)} ({_span(r.T_min_ci_low_s, r.T_min_ci_high_s, fmt_duration)})"
        print(f"{r.op:<15} {r.n_axes:>4} {W:>34} {t:>30} {fmt(r.rel_rms_error):>8} {r.n_points:>6}")
    if across is not None:
        print(
            f"across domains ({across['ops']}, {across['n_points']} points): W_out "
            f"{fmt_bandwidth(across['scaleout_bw_unidir_Bps'])} per device, T_out "
            f"{fmt_duration(across['scaleout_latency_s'])}, rel RMS {fmt(across['rel_rms_error'])}"
        )
    print(f"intervals: {BOOTSTRAP} bootstrap replicates over rounds and samples, seed {SEED}")
    for r in table.itertuples():
        if r.left_out:
            print(f"left out of {r.op} over {r.n_axes} axis/axes: {r.left_out}")


def _warn_poor_fits(table, across: dict | None) -> None:
    """A warning on stderr for each fit whose relative RMS error passes calibrate.WARN_REL_ERROR."""
    from analysis import calibrate

    if across is not None and across["rel_rms_error"] > calibrate.WARN_REL_ERROR:
        print(
            f"warning: the fitted model stays {across['rel_rms_error']:.0%} (relative RMS) from the medians of the "
            "points across domains; its W_out and T_out describe those points poorly",
            file=sys.stderr,
        )
    for r in table.itertuples():
        if r.rel_rms_error > calibrate.WARN_REL_ERROR:
            print(
                f"warning: the fitted model stays {r.rel_rms_error:.0%} (relative RMS) from the {r.op} medians over "
                f"{r.n_axes} axis/axes; its W and T_min describe those points poorly (noisy rounds, or a "
                "regime the book's max() form does not have)",
                file=sys.stderr,
            )


def main(args: argparse.Namespace) -> int:
    """Run ``calibrate``; 0 on success, 2 on invalid input."""
    try:
        fit = _fit(args)
        out = _write_entry(args, fit)
    except _Refused as exc:
        return fail(str(exc))
    _print_fits(fit.table, fit.across)
    print(f"wrote {out}")
    _warn_poor_fits(fit.table, fit.across)
    return 0


def _span(lo, hi, fmt) -> str:
    """``1.1 GB/s to 2.3 GB/s``, an unbounded side as ``or more``."""
    if lo is None or lo != lo:
        return "no interval"
    return f"{fmt(lo)} or more" if hi is None or hi != hi else f"{fmt(lo)} to {fmt(hi)}"


def _sweep_date(results: list[Result]) -> str:
    """When the sweep's first point started (from its result.json), or 'date unknown'."""
    started = []
    for r in results:
        when = r.started_at
        try:  # ISO 8601 (format_version 1); epoch seconds in older results
            started.append(
                dt.datetime.fromisoformat(when)
                if isinstance(when, str)
                else dt.datetime.fromtimestamp(float(when)).astimezone()
            )
        except (TypeError, ValueError):
            continue
    return min(started).isoformat(sep=" ", timespec="minutes") if started else "date unknown"
