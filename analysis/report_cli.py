"""``python -m analysis report DIR``: rebuild a sweep's report from disk."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, help="a multirun folder (or one run folder)")


def main(args: argparse.Namespace) -> int:
    from analysis.load import job_dirs
    from analysis.report import write_report

    if not args.dir.is_dir() or not job_dirs(args.dir):
        print(f"error: {args.dir} holds no run folders (no */result.json)")
        return 2
    print(write_report(args.dir))
    return 0
