"""What the commands share: parsing ``X=4,Y=2`` options, hardware constants given on the
command line, and the one way to fail (``error: ...`` on stderr, exit status 2)."""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys

from analysis.book.dtypes import dtype_bytes
from analysis.book.errors import BookError
from analysis.book.hardware import Hardware, load_hardware


def fail(message: str) -> int:
    """Print ``error: message`` on stderr and return the exit status for bad input (2)."""
    print(f"error: {message}", file=sys.stderr)
    return 2


def parse_assignments(text: str, what: str, key_pattern: str) -> dict[str, int]:
    """``"X=4,Y=2"`` -> ``{"X": 4, "Y": 2}`` (BookError quoting a bad entry)."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = re.fullmatch(rf"({key_pattern})\s*=\s*(\d+)", part)
        if m is None or int(m.group(2)) <= 0:
            raise BookError(f"{what} entry {part!r} is not like {'X=4' if what == '--mesh' else 'B=1024'}")
        if m.group(1) in out:
            raise BookError(f"{what} names {m.group(1)} twice")
        out[m.group(1)] = int(m.group(2))
    return out


def parse_mesh(text: str) -> dict[str, int]:
    """``--mesh X=4,Y=2``: one capital letter per axis, at least one axis."""
    mesh = parse_assignments(text, "--mesh", "[A-Z]")
    if not mesh:
        raise BookError("--mesh is empty; give it like X=4,Y=4")
    return mesh


def parse_dims(text: str) -> dict[str, int]:
    """``--dims B=1024,D=4096``."""
    return parse_assignments(text, "--dims", "[A-Za-z][A-Za-z0-9]*")


def add_constant_arguments(parser: argparse.ArgumentParser, flops: bool) -> None:
    """Options that supply or override hardware constants (``cpu`` publishes none); read them
    back with :func:`hardware_from_args`. ``flops`` adds ``--flops-per-s`` (for ``--dtype``)."""
    fitted = parser.add_argument_group("constants for hardware without published ones (cpu), or to override")
    fitted.add_argument("--link-bw-bidir-Bps", type=float, default=None, help="W_bidi (the ring formula's W)")
    fitted.add_argument("--link-bw-unidir-Bps", type=float, default=None, help="W_unidir (lines; a switch's W)")
    fitted.add_argument("--hop-latency-s", type=float, default=None, help="T_min per hop")
    if flops:
        fitted.add_argument("--flops-per-s", type=float, default=None, help="peak FLOP/s for --dtype")


def hardware_from_args(args: argparse.Namespace) -> Hardware:
    """``--hardware`` loaded, with the constants :func:`add_constant_arguments` supplies."""
    hw = load_hardware(args.hardware)
    over = {
        k: getattr(args, k)
        for k in ("link_bw_bidir_Bps", "link_bw_unidir_Bps", "hop_latency_s")
        if getattr(args, k, None) is not None
    }
    if over:
        over["calibrated"] = ()  # constants given on the command line win over measured ones
    if getattr(args, "flops_per_s", None) is not None:
        over["flops_per_s"] = {**hw.flops_per_s, dtype_bytes(args.dtype)[0]: args.flops_per_s}
    return dataclasses.replace(hw, **over) if over else hw
