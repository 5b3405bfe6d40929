"""``python -m analysis predict EXPR ...``: the scaling book's prediction for a collective,
a sharded matmul or a bare array, in words (default) or as one JSON object (``--json``).

Example::

    python -m analysis predict "AllGather_X([B_X, D_Y])" --hardware tpu_v4p \\
        --mesh X=4,Y=4,Z=4 --dims B=1024,D=4096 --dtype bfloat16 --topology 4x4x4
    python -m analysis predict "AllGather_X(A[I_X, J])" --hardware h100 --mesh X=16 \\
        --dims I=16384,J=8192 --topology nodes=2,gpus_per_node=8

Mesh axes are single capital letters (``_XY`` in a subscript means axes X and Y); dims are
names like ``B`` or ``E1``. An invalid expression or option exits with status 2 and the
error message on stderr.
"""

from __future__ import annotations

import argparse
import json

from analysis.book.collectives import BY_OP
from analysis.book.dtypes import PRECISIONS, dtype_bytes
from analysis.book.errors import BookError
from analysis.book.expected_cost import expected_time
from analysis.book.notation_cost import CollectiveCost
from analysis.book.predict import ArrayPrediction, predict_expr
from analysis.book.units import fmt_time
from analysis.cli.json_out import versioned
from analysis.cli.options import add_constant_arguments, fail, hardware_from_args, parse_dims, parse_mesh


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``predict`` command's options."""
    parser.add_argument("expr", help='e.g. "AllGather_X([B_X, D_Y])" or "A[I, J_X] * B[J_X, K] -> C[I, K]"')
    parser.add_argument("--hardware", required=True, help="a name in conf/hardware (tpu_v5e, h100, ...) or a YAML path")
    parser.add_argument("--mesh", required=True, help="mesh axes and sizes, e.g. X=4,Y=4,Z=4")
    parser.add_argument("--dims", default="", help="global dim sizes, e.g. B=1024,D=4096")
    parser.add_argument("--dtype", default="bfloat16", help="element type (bfloat16, float32, int8, ...)")
    parser.add_argument(
        "--precision",
        default="default",
        choices=PRECISIONS,
        help="a matmul's precision, as the runner's `precision` (float32 at default: TF32 on NVIDIA GPUs, "
        "one bfloat16 pass on TPU; highest: float32 arithmetic)",
    )
    parser.add_argument(
        "--topology",
        default=None,
        help="physical slice shape, e.g. 4x4x4 (decides rings vs lines); or several domains: "
        "nodes=2,gpus_per_node=8 (GPU nodes over the scale-out network) or "
        "slices=2[,slice=16x16] (TPU slices over DCN); the first mesh axis varies slowest",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--explain",
        action="store_true",
        help="on a GPU entry priced by NCCL's model: every algorithm/protocol NCCL considers, with its latency "
        "and bandwidth terms (the cheapest is the expected time)",
    )
    add_constant_arguments(parser, flops=True)


def _collective_lines(c: CollectiveCost, indent: str) -> list[str]:
    p = c.prediction
    lines = [
        f"{indent}axes       {'; '.join(c.axis_notes) or ', '.join(c.axes) + ' (' + p.topology + ')'}",
        f"{indent}V          {c.V_formula}: {BY_OP[p.kind].V_meaning}",
        f"{indent}time       {p.formula}",
        f"{indent}regime     {p.regime}-bound ({p.topology}, {p.hops:g} hop{'' if p.hops == 1 else 's'})",
    ]
    if p.book_time_s is not None:
        lines += [
            f"{indent}book       the simple ring formula would give {p.book_formula} = {fmt_time(p.book_time_s)}",
            f"{indent}why        {p.note}; the topology-aware answer is {fmt_time(p.time_s)}",
        ]
    elif p.note:
        lines.append(f"{indent}note       {p.note}")
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
        lines = [
            result.expression,
            header,
            f"  local shape {list(result.local_shape)}: {result.formula}",
            f"  all devices together hold {result.bytes_total:,.0f} bytes",
        ]
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
        lines.append(
            f"  T_math     FLOPs / (devices * C) = {r.flops:.4g} / ({r.devices} * {r.C_flops_per_s:.4g} FLOP/s)"
            f" = {fmt_time(r.T_math_s)}"
        )
    lines.append(f"  T_comms    {fmt_time(r.T_comms_s)} (the collectives above, one after another)")
    lines.append(
        f"  total      overlapped max(T_math, T_comms) = {fmt_time(r.overlapped_time_s)} ({r.bound}-bound); "
        f"serial sum = {fmt_time(r.serial_time_s)}"
    )
    lines.append(f"  predicted  {fmt_time(r.time_s)} (overlapped, as a collective matmul would)")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    """Run ``predict``; 0 on success, 2 on invalid input (message on stderr)."""
    try:
        mesh = parse_mesh(args.mesh)
        dims = parse_dims(args.dims)
        hw = hardware_from_args(args)
        dtype, nbytes = dtype_bytes(args.dtype)
        result = predict_expr(args.expr, mesh, dims, dtype, hw, args.topology, args.precision)
    except BookError as err:
        return fail(str(err))
    except OverflowError:  # each dim is bounded (parse_dims), yet 30 of them multiply past a float
        return fail("--dims: the arrays' sizes multiply past a float's range (about 1e308); use smaller dims")
    expected = _expected(result, hw)
    if args.json:
        out = {
            **result.to_dict(),
            **(expected.to_dict() if expected else {}),
            "hardware": hw.name,
            "mesh": mesh,
            "dims": dims,
            "dtype": dtype,
            "dtype_bytes": nbytes,
            "precision": args.precision,
            "slice_topology": args.topology,
        }
        if "time_s" in out:  # the name before format_version 2, kept for one version
            out["predicted_time_s"] = out["time_s"]
        print(json.dumps(versioned("predict", out), indent=2))
        return 0
    mesh_txt = " ".join(f"{k}={v}" for k, v in mesh.items())
    header = (
        f"  hardware   {hw.name} ({hw.interconnect}), mesh {mesh_txt}"
        f"{', topology ' + args.topology if args.topology else ''}, {dtype} ({nbytes:g} bytes)"
    )
    text = render(result, header)
    if expected is not None:
        text += "\n" + "\n".join(_expected_lines(result.time_s, expected, args.explain, _entry_file(args.hardware)))
    print(text)
    return 0


def _expected(result, hw):
    """What a collective is expected to take on a real cluster (analysis.book.expected_cost), or
    None for a matmul or a bare array."""
    return expected_time(result.prediction, hw) if isinstance(result, CollectiveCost) else None


def _entry_file(hardware: str) -> str:
    """The file a ``--hardware`` value names: a YAML path as given, else the catalogue's entry."""
    return hardware if hardware.endswith((".yaml", ".yml")) else f"conf/hardware/{hardware}.yaml"


def _expected_lines(roofline_s: float, e, explain: bool = False, entry: str = "the entry's file") -> list[str]:
    """The expected time and what separates it from the roofline, in words; ``entry``: the
    hardware file whose ``expected:`` block priced it."""
    if e.time_s == 0:
        return ["  expected   0 (no communication)"]
    if e.algorithm is not None:
        return _nccl_lines(roofline_s, e, explain, entry)
    shares = ", ".join(f"{s:.2g}" for s in e.bw_shares)
    return [
        f"  expected   {fmt_time(e.time_s)} on a real cluster = {e.time_s / roofline_s:.3g}x the roofline above "
        f"(floor {fmt_time(e.floor_s)} {e.level}; bandwidth at {shares} of the links' rate)",
        "  factors    "
        + (
            e.source
            if e.source.startswith(("no ", "no expected")) or " has no expected factors" in e.source
            else f"the expected: block of {entry}, each number with its source"
        ),
    ]


def _nccl_lines(roofline_s: float, e, explain: bool, entry: str) -> list[str]:
    """NCCL's (or RCCL's) price (analysis.book.nccl_cost, rccl_cost): the pair it takes and its
    terms; with ``explain`` every pair it considered."""
    a, lib = e.algorithm, e.library
    where = f"{e.ranks} ranks on {e.nodes} node{'' if e.nodes == 1 else 's'}"
    channels = f" over {a.channels} channels" if a.channels else ""
    lines = [
        f"  expected   {fmt_time(e.time_s)} on a real cluster = {e.time_s / roofline_s:.3g}x the roofline above "
        f"({lib}'s model, {where}: {a.name}{' (the tuner plugin picked it)' if e.tuner else ''}, "
        f"latency {fmt_time(a.latency_s)} + bandwidth "
        f"{fmt_time(e.bandwidth_time_s)} at {a.bw_GBps:.4g} GB/s{channels})",
        f"  factors    {lib}'s tuning constants and the expected.{lib.lower()} block of {entry}, "
        "each number with its source",
    ]
    if explain:
        taken = "the cheapest is taken" + (
            "; across nodes RCCL then sets the protocol by size" if lib == "RCCL" else ""
        )
        lines.append(f"  {lib}       time = latency + bytes / bandwidth per algorithm/protocol; {taken}:")
        if e.settings:
            lines.append(f"    (only the pairs of {e.settings})")
        if e.tuner:
            lines.append(f"    ({e.tuner})")
        cheapest = min(e.candidates, key=lambda c: c.time_s).name
        for c in sorted(e.candidates, key=lambda c: c.time_s):
            mark = "  <- taken" if c.name == a.name else ""
            if e.tuner and a.name != cheapest:  # the tuner plugin's region replaced it
                mark = {a.name: "  <- taken (the tuner's region)", cheapest: "  <- cheapest"}.get(c.name, "")
            elif a.name != cheapest and c.name == cheapest:  # RCCL's protocol by size replaced it
                mark = f"  <- cheapest: RCCL runs {a.name}, estimated at this time"
            elif a.name != cheapest and c.name == a.name:
                mark = "  <- run (RCCL's protocol by size)"
            lines.append(
                f"    {c.name:17s} {fmt_time(c.time_s):>11s} = {fmt_time(c.latency_s)} + "
                f"{fmt_time(c.time_s - c.latency_s)} at {c.bw_GBps:.4g} GB/s{mark}"
            )
    return lines
