"""``python -m analysis predict EXPR ...``: the scaling book's prediction for a collective,
a sharded matmul or a bare array, in words (default) or as one JSON object (``--json``).

Example::

    python -m analysis predict "AllGather_X([B_X, D_Y])" --hardware tpu_v4p \\
        --mesh X=4,Y=4,Z=4 --dims B=1024,D=4096 --dtype bfloat16 --topology 4x4x4

Mesh axes are single capital letters (``_XY`` in a subscript means axes X and Y); dims are
names like ``B`` or ``E1``. An invalid expression or option exits with status 2 and the
:class:`~analysis.notation.NotationError` message on stderr.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys

from analysis.hardware import Hardware, load_hardware
from analysis.model import ArrayPrediction, CollectiveCost, dtype_bytes, fmt_time, predict_expr
from analysis.notation import NotationError

_V_MEANING = {"all_gather": "the gathered array each device ends with",
              "reduce_scatter": "the unreduced array each device starts with",
              "all_reduce": "the unreduced array each device holds",
              "all_to_all": "the array across the group, before the move"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``predict`` command's options."""
    parser.add_argument("expr", help='e.g. "AllGather_X([B_X, D_Y])" or "A[I, J_X] * B[J_X, K] -> C[I, K]"')
    parser.add_argument("--hardware", required=True, help="a name in conf/hardware (tpu_v5e, h100, ...) or a YAML path")
    parser.add_argument("--mesh", required=True, help="mesh axes and sizes, e.g. X=4,Y=4,Z=4")
    parser.add_argument("--dims", default="", help="global dim sizes, e.g. B=1024,D=4096")
    parser.add_argument("--dtype", default="bfloat16", help="element type (bfloat16, float32, int8, ...)")
    parser.add_argument("--topology", default=None, help="physical slice shape, e.g. 4x4x4; decides rings vs lines")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_constant_arguments(parser, flops=True)


def add_constant_arguments(parser: argparse.ArgumentParser, flops: bool) -> None:
    """Options that supply or override hardware constants (``cpu`` publishes none); read them
    back with :func:`hardware_from_args`. ``flops`` adds ``--flops-per-s`` (for ``--dtype``)."""
    fitted = parser.add_argument_group("constants for hardware without published ones (cpu), or to override")
    fitted.add_argument("--link-bw-bidir-Bps", type=float, default=None, help="W_bidi (the ring formula's W)")
    fitted.add_argument("--link-bw-unidir-Bps", type=float, default=None, help="W_unidir (lines; a switch's W)")
    fitted.add_argument("--hop-latency-s", type=float, default=None, help="T_min per hop")
    if flops:
        fitted.add_argument("--flops-per-s", type=float, default=None, help="peak FLOP/s for --dtype")


def parse_assignments(text: str, what: str, key_pattern: str) -> dict[str, int]:
    """``"X=4,Y=2"`` -> ``{"X": 4, "Y": 2}`` (NotationError quoting a bad entry)."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = re.fullmatch(rf"({key_pattern})\s*=\s*(\d+)", part)
        if m is None or int(m.group(2)) <= 0:
            raise NotationError(f"{what} entry {part!r} is not like {'X=4' if what == '--mesh' else 'B=1024'}")
        if m.group(1) in out:
            raise NotationError(f"{what} names {m.group(1)} twice")
        out[m.group(1)] = int(m.group(2))
    return out


def hardware_from_args(args: argparse.Namespace) -> Hardware:
    """``--hardware`` loaded, with the constants :func:`add_constant_arguments` supplies."""
    hw = load_hardware(args.hardware)
    over = {k: getattr(args, k) for k in ("link_bw_bidir_Bps", "link_bw_unidir_Bps", "hop_latency_s")
            if getattr(args, k) is not None}
    if over:
        over["calibrated"] = ()  # constants given on the command line win over measured ones
    if getattr(args, "flops_per_s", None) is not None:
        over["flops_per_s"] = {**hw.flops_per_s, dtype_bytes(args.dtype)[0]: args.flops_per_s}
    return dataclasses.replace(hw, **over) if over else hw


def _collective_lines(c: CollectiveCost, indent: str) -> list[str]:
    p = c.prediction
    lines = [f"{indent}axes       {'; '.join(c.axis_notes) or ', '.join(c.axes) + ' (' + p.topology + ')'}",
             f"{indent}V          {c.V_formula}: {_V_MEANING[p.kind]}",
             f"{indent}time       {p.formula}",
             f"{indent}regime     {p.regime}-bound ({p.topology}, {p.hops:g} hop{'' if p.hops == 1 else 's'})"]
    if p.book_time_s is not None:
        lines += [f"{indent}book       the simple ring formula would give {p.book_formula} = {fmt_time(p.book_time_s)}",
                  f"{indent}why        {p.note}; the topology-aware answer is {fmt_time(p.time_s)}"]
    return lines


def render(result, header: str) -> str:
    """The prediction as text."""
    lines = [header]
    if isinstance(result, CollectiveCost):
        title = result.expression if " -> " in result.expression else f"{result.expression} -> {result.result}"
        lines = [title, header] + _collective_lines(result, "  ")
        lines.append(f"  predicted  {fmt_time(result.time_s)}")
        return "\n".join(lines)
    if isinstance(result, ArrayPrediction):
        lines = [result.expression, header, f"  local shape {list(result.local_shape)}: {result.formula}",
                 f"  all devices together hold {result.bytes_total:,.0f} bytes"]
        return "\n".join(lines)
    r = result
    lines = [r.expression, header, f"  {r.case_text}"]
    colls = iter(r.collectives)
    for i, step in enumerate(r.steps, 1):
        lines.append(f"  {i}. {step}")
        if not step.startswith("local matmul"):
            c = next(colls)
            lines += _collective_lines(c, "       ") + [f"       -> {fmt_time(c.time_s)}"]
    lines += [f"  {a}" for a in r.alternatives if a] + [f"  note: {n}" for n in r.notes]
    lines.append(f"  FLOPs      {r.flops_formula}")
    if r.T_math_s is not None:
        lines.append(f"  T_math     FLOPs / (devices * C) = {r.flops:.4g} / ({r.devices} * {r.C_flops_per_s:.4g} FLOP/s)"
                     f" = {fmt_time(r.T_math_s)}")
    lines.append(f"  T_comms    {fmt_time(r.T_comms_s)} (the collectives above, one after another)")
    lines.append(f"  total      overlapped max(T_math, T_comms) = {fmt_time(r.overlapped_time_s)} ({r.bound}-bound); "
                 f"serial sum = {fmt_time(r.serial_time_s)}")
    lines.append(f"  predicted  {fmt_time(r.predicted_time_s)} (overlapped, as a collective matmul would)")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    """Run ``predict``; 0 on success, 2 on invalid input (message on stderr)."""
    try:
        mesh = parse_assignments(args.mesh, "--mesh", "[A-Z]")
        if not mesh:
            raise NotationError("--mesh is empty; give it like X=4,Y=4")
        dims = parse_assignments(args.dims, "--dims", "[A-Za-z][A-Za-z0-9]*")
        hw = hardware_from_args(args)
        dtype, nbytes = dtype_bytes(args.dtype)
        result = predict_expr(args.expr, mesh, dims, dtype, hw, args.topology)
    except NotationError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        out = {**result.to_dict(), "hardware": hw.name, "mesh": mesh, "dims": dims, "dtype": dtype,
               "dtype_bytes": nbytes, "slice_topology": args.topology}
        print(json.dumps(out, indent=2))
        return 0
    mesh_txt = " ".join(f"{k}={v}" for k, v in mesh.items())
    header = (f"  hardware   {hw.name} ({hw.interconnect}), mesh {mesh_txt}"
              f"{', topology ' + args.topology if args.topology else ''}, {dtype} ({nbytes:g} bytes)")
    print(render(result, header))
    return 0
