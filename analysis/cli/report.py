"""``python -m analysis report DIR``: rebuild a sweep's report from disk."""

from __future__ import annotations

import argparse
from pathlib import Path

from analysis.book.errors import BookError
from analysis.book.hardware import load_hardware
from analysis.cli.options import add_allow_mixed, fail
from analysis.report import write_report
from analysis.runs.rundir import point_dirs, read_result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, help="a multirun folder (or one run folder)")
    add_allow_mixed(parser, "report")
    parser.add_argument(
        "--hardware",
        help="model with this conf/hardware entry's constants (a name or a YAML path) instead of "
        "those the sweep's points recorded, which are their entry's with any hardware.X=... overrides "
        "(e.g. an entry written by `python -m analysis calibrate`)",
    )


# What analysis.runs.rundir.read_result makes of a result.json it cannot take as one shardlab wrote.
DAMAGED = ("UnreadableResult", "IncompleteResult")


def unreadable(root: Path) -> str | None:
    """Why ``root`` cannot be reported, when no point's result.json can be read (each is
    damaged: a report of such points says nothing and must not exit 0), else None. Stops at
    the first readable point: the report reads them all again, once."""
    dirs = point_dirs(root)
    first = None
    for d in dirs:
        r = read_result(d)
        if r.error_type not in DAMAGED:
            return None
        first = first if first is not None else " ".join(str(r.error).split())  # one line
    if not dirs:
        return None
    many = f"none of its {len(dirs)} points" if len(dirs) > 1 else "its one point"
    return f"{root}: {many} can be read ({first}{'; ...' if len(dirs) > 1 else ''})"


def main(args: argparse.Namespace) -> int:
    """Run ``report``; 0 on success, 2 on invalid input (one line on stderr)."""
    if not args.dir.is_dir() or not point_dirs(args.dir):
        return fail(f"{args.dir} holds no run folders (no */result.json)")
    if args.hardware:
        try:
            load_hardware(args.hardware)
        except BookError as exc:
            return fail(f"--hardware: {exc}")  # the message names the file or the entry
    damaged = unreadable(args.dir)
    if damaged:
        return fail(damaged)
    from analysis.sweep import MixedSweepError

    try:
        print(write_report(args.dir, args.hardware, args.allow_mixed))
    except MixedSweepError as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"cannot write the report into {args.dir}: {exc.strerror or exc}")
    return 0
