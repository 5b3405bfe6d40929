"""``python -m analysis report DIR``: rebuild a sweep's report from disk."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, help="a multirun folder (or one run folder)")
    parser.add_argument("--hardware", help="model with this conf/hardware entry's constants instead of the "
                        "one the sweep ran on (e.g. one written by `python -m analysis calibrate`)")


def main(args: argparse.Namespace) -> int:
    from analysis.load import job_dirs
    from analysis.report import write_report

    if not args.dir.is_dir() or not job_dirs(args.dir):
        print(f"error: {args.dir} holds no run folders (no */result.json)")
        return 2
    from analysis.hardware import load_hardware
    from analysis.notation import NotationError

    if args.hardware:
        try:
            load_hardware(args.hardware)
        except NotationError as exc:
            print(f"error: --hardware {args.hardware}: {exc}")
            return 2
    print(write_report(args.dir, args.hardware))
    return 0
