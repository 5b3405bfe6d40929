"""What the commands share: parsing ``X=4,Y=2`` options, hardware constants given on the
command line, and the one way to fail (``error: ...`` on stderr, exit status 2)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import sys

from analysis.book.dtypes import dtype_bytes
from analysis.book.errors import BookError
from analysis.book.hardware import MAX_DEVICES, Hardware, load_hardware, out_of_range


def fail(message: str) -> int:
    """Print ``error: message`` on stderr and return the exit status for bad input (2)."""
    print(f"error: {message}", file=sys.stderr)
    return 2


def add_allow_mixed(parser: argparse.ArgumentParser, what: str) -> None:
    """``--allow-mixed``: ``what`` the command does with points measured unlike each other
    (another JAX, machine or config), which it refuses without the flag."""
    parser.add_argument(
        "--allow-mixed",
        action="store_true",
        help=f"{what} points measured unlike each other (another JAX, machine or config) together",
    )


# The runner's bounds (runner.config.spec_values, which analysis never imports): a larger number
# is a typo or a test of the parser, and 2**2000 overflowed a float deep in the model.
MAX_DIM = 1 << 40  # runner.config.spec_values.MAX_DIM


def parse_assignments(text: str, what: str, key_pattern: str, top: int) -> dict[str, int]:
    """``"X=4,Y=2"`` -> ``{"X": 4, "Y": 2}``, each value from 1 to ``top`` (BookError quoting a
    bad entry)."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = re.fullmatch(rf"({key_pattern})\s*=\s*(\d+)", part)
        if m is None:
            raise BookError(f"{what} entry {part!r} is not like {'X=4' if what == '--mesh' else 'B=1024'}")
        # compared as text first: int() refuses more than 4300 digits with a ValueError of its own
        digits = m.group(2).lstrip("0")
        if not digits or len(digits) > len(str(top)) or int(digits) > top:
            raise BookError(f"{what} entry {_short(part)}: must be a whole number from 1 to {top}")
        if m.group(1) in out:
            raise BookError(f"{what} names {m.group(1)} twice")
        out[m.group(1)] = int(digits)
    return out


def _short(text: str) -> str:
    """``text`` quoted, cut to 40 characters: an entry of 600 digits is one line still."""
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")


def parse_mesh(text: str) -> dict[str, int]:
    """``--mesh X=4,Y=2``: one capital letter per axis, at least one axis, at most
    :data:`MAX_DEVICES` devices in all (the runner's bound)."""
    mesh = parse_assignments(text, "--mesh", "[A-Z]", MAX_DEVICES)
    if not mesh:
        raise BookError("--mesh is empty; give it like X=4,Y=4")
    if math.prod(mesh.values()) > MAX_DEVICES:
        raise BookError(f"--mesh {text}: {math.prod(mesh.values())} devices, at most {MAX_DEVICES}")
    return mesh


def parse_dims(text: str) -> dict[str, int]:
    """``--dims B=1024,D=4096``, each dim at most :data:`MAX_DIM` (the runner's bound)."""
    return parse_assignments(text, "--dims", "[A-Za-z][A-Za-z0-9]*", MAX_DIM)


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
    """``--hardware`` loaded, with the constants :func:`add_constant_arguments` supplies; a
    BookError for a constant out of the range a hardware file's value must be in."""
    hw = load_hardware(args.hardware)
    keys = ("link_bw_bidir_Bps", "link_bw_unidir_Bps", "hop_latency_s", "flops_per_s")
    given = {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}
    for key, value in given.items():  # a negative W from the command line prices as wrongly as one from a file
        allowed = out_of_range(key, value)
        if allowed:
            raise BookError(f"--{key.replace('_', '-')}={value!r}: must be {allowed}")
    over = {k: v for k, v in given.items() if k != "flops_per_s"}
    if over:
        over["calibrated"] = ()  # constants given on the command line win over measured ones
    if "flops_per_s" in given:
        over["flops_per_s"] = {**hw.flops_per_s, dtype_bytes(args.dtype)[0]: given["flops_per_s"]}
    return dataclasses.replace(hw, **over) if over else hw
