"""``python -m analysis import nccl-tests FILE... --out DIR`` (and ``accelerator-microbenchmarks``):
measurements taken by another tool, written as a sweep folder that ``report``, ``compare``,
``calibrate``, the bandwidth gate and ``load_sweep`` read as one shardlab ran.

nccl-tests / rccl-tests: their text output as printed (one file per collective; several runs in
one file are all read). Each size becomes a point with the tool's out-of-place time, the
collective, dtype, ranks, nodes (the distinct host names of the ``# Rank`` lines) and the
device kind resolved through the hardware catalogue (``--hardware`` names the entry instead).
A file that is not such output, a table cut short, or a value no run prints (a NaN or
negative time, a size past 1 TiB or not a whole number of elements, a rank count past any
cluster's, a size measured twice, more points than a report reads: the bounds of
:mod:`analysis.importers.limits`) is one ``error:`` line naming the file, the line and the
field (exit 2), and nothing is written. A size at which the tool's own data check found wrong
elements is imported as a failed point (as the runner records one) and named on stderr.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from analysis.book.errors import BookError
from analysis.book.hardware import hardware_names
from analysis.cli.options import fail
from analysis.importers import ImportFormatError
from analysis.importers.accelerator_microbenchmarks import parse_results
from analysis.importers.limits import MAX_POINTS, POINTS_ALLOWED, check
from analysis.importers.nccl_tests import parse_nccl_tests
from analysis.importers.nccl_tests_json import parse_nccl_tests_json
from analysis.importers.nccl_tests_rows import run_points
from analysis.importers.sweep_writer import write_sweep

TOOLS = ("nccl-tests", "accelerator-microbenchmarks")
MAX_FILE_BYTES = 64 << 20  # a results file larger than this is not one of these tools' outputs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``import`` command's options."""
    parser.add_argument("tool", help=f"whose output the files are: {', '.join(TOOLS)}")
    parser.add_argument("files", type=Path, nargs="+", help="the tool's output files")
    parser.add_argument("--out", type=Path, required=True, help="the sweep folder to write (new or empty)")
    parser.add_argument(
        "--op", default=None, help="nccl-tests: the collective, where neither the file nor its name says it"
    )
    parser.add_argument(
        "--hardware",
        default=None,
        help="the conf/hardware entry to model with (default: resolved from the device kind)",
    )


def read_points(tool: str, files: list[Path], op: str | None, hardware: str | None = None) -> list:
    """Every point of every file; ImportFormatError / OSError on the first bad file, and where
    the files hold more points than an import writes (before the next file is read)."""
    points = []
    seen: set[str] = set()
    for f in files:
        if os.path.realpath(f) in seen:  # its points would all be there twice
            raise ImportFormatError(f, None, "named twice: each file is read once")
        seen.add(os.path.realpath(f))
        if f.stat().st_size > MAX_FILE_BYTES:
            raise ImportFormatError(f, None, f"{f.stat().st_size} bytes, larger than any {tool} output")
        try:
            text = f.read_text()
        except UnicodeDecodeError:
            raise ImportFormatError(f, None, f"not text, so not {tool} output") from None
        if tool == "nccl-tests":
            parse = parse_nccl_tests_json if text.lstrip().startswith("{") else parse_nccl_tests  # -J FILE
            got = [p for i, run in enumerate(parse(text, f, op)) for p in run_points(run, i)]
            if not got:  # a sweep folder of no point would pass for an import that worked
                raise ImportFormatError(f, None, "no row of a size above 0 (size 0 times an empty launch)")
            points += got
        else:
            points += parse_results(text, f, hardware)
        check(len(points) <= MAX_POINTS, f, None, "number of points so far", len(points), POINTS_ALLOWED)
    return points


def main(args: argparse.Namespace) -> int:
    """Run ``import``; 0 on success, 2 on unusable input (one line on stderr)."""
    if args.tool not in TOOLS:
        return fail(f"import {args.tool!r}: the tool is one of {', '.join(TOOLS)}")
    if args.hardware:
        if args.hardware not in hardware_names():
            return fail(f"--hardware={args.hardware!r}: no such entry (one of {', '.join(hardware_names())})")
    command = " ".join(["python -m analysis import", *(shlex.quote(a) for a in sys.argv[2:])]) if sys.argv else ""
    try:
        if args.tool == "accelerator-microbenchmarks" and not args.hardware:
            return fail("accelerator-microbenchmarks results do not name the chip: pass --hardware (e.g. tpu_v6e)")
        points = read_points(args.tool, args.files, args.op, args.hardware)
        out = write_sweep(points, args.out, command, args.hardware)
    except (ImportFormatError, BookError, FileExistsError) as err:
        return fail(str(err))
    except OSError as err:
        return fail(f"{err.filename or args.out}: {err.strerror or err}")
    runs = {(p.origin.get("file"), p.op, p.ranks) for p in points}
    failed = [p for p in points if p.wrong or p.check_error]
    if failed:  # kept, as the runner keeps a point whose check failed: the report counts it, fits leave it out
        at = ", ".join(f"{p.op} of {int(p.S_bytes)} B in {p.origin.get('file')}" for p in failed[:3])
        more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
        print(
            f"warning: {len(failed)} size(s) failed the tool's data check ({at}{more}): imported as failed points",
            file=sys.stderr,
        )
    print(f"{len(points)} points of {len(runs)} run(s) -> {out}")
    print(f"  python -m analysis report {shlex.quote(str(out))}")
    return 0
