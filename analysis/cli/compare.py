"""``python -m analysis compare DIR_A DIR_B [...] [--out DIR]``: a report comparing sweeps
that share points (the same collectives and sizes), e.g. a float32 sweep against a
bfloat16 one, or mesh x8 against xy_4x2.

Writes ``compare.md``, ``index.html`` (self-contained), ``ratios.csv``, ``fits.csv``,
``config_diff.csv`` and the figures to ``--out`` (default
``outputs/compare/<YYYY-mm-dd_HH-MM-SS>``, relative to the current folder), and prints per
shared point both times (us) and bus bandwidths (GB/s) with the ratio and its interval,
then the path of ``index.html``. A folder with no successful results, or sweeps that share no
point, exit with status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

import pandas as pd

from analysis.cli.options import add_allow_mixed, fail
from analysis.compare_console import console_summary
from analysis.report import write_compare_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``compare`` command's options."""
    parser.add_argument(
        "dirs", type=Path, nargs="+", help="two or more sweep (multirun) folders; the first is the reference"
    )
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: outputs/compare/<time>)")
    add_allow_mixed(parser, "compare")


def main(args: argparse.Namespace) -> int:
    """Run ``compare``; 0 on success, 2 on unusable input (one line on stderr)."""
    from analysis.compare import CompareError

    out = args.out or Path("outputs") / "compare" / dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    try:
        index = write_compare_report(args.dirs, out, allow_mixed=args.allow_mixed)
        print(console_summary(pd.read_csv(out / "ratios.csv")))
        print(index)
    except CompareError as err:
        return fail(str(err))
    except OSError as err:
        return fail(f"cannot write the comparison to {out}: {err.strerror or err}")
    return 0
