"""``python -m analysis hlo FILE``: every collective in an HLO text file, as an aligned table or
a JSON list, optionally with the scaling book's predicted time for each.

FILE is HLO text as ``compiled.as_text()`` prints it or XLA dumps it (``--xla_dump_to``), from
any backend; a file holding several modules lists them all. Example::

    python -m analysis hlo outputs/.../hlo/compiled.hlo.txt --hardware tpu_v5e --topology 8x16

With ``--hardware``, the book's model (:func:`analysis.book.collective_cost.predict_collective`)
prices each all-gather, reduce-scatter, all-reduce and all-to-all as if its group were ONE mesh
axis of ``group_size`` devices; HLO does not say how a group lies on the physical links. V is
taken as the book does: the result bytes for all-gather (the gathered array), the operand bytes
for reduce-scatter and all-reduce (the unreduced array), and operand bytes * group_size for
all-to-all (the whole array across the group, as the runner's V and the notation's; each
device's operand is 1/group_size of it). Whether that axis wraps around follows the hardware's
rule for an axis of that size. With a slice ``--topology`` (``4x4x4``) on a torus, a group's
device ids place it: device ``i`` sits at chip ``i`` of the slice, row-major (as ``predict``
lays a mesh on it), so a group spans the physical axes its ids vary along - several, where
one mesh axis spans them - each a ring only when the group covers the whole axis and the chip
wraps it (v4/v5p: only a slice of full 4x4x4 cubes; v5e/v6e: only an axis of 16). With a
multi-node or multi-slice ``--topology``
(``nodes=2,gpus_per_node=8``, ``slices=2[,slice=16x16]``), a group's device ids say where it
lies: device ``i`` sits in node (or slice) ``i // devices_per_node``, and a group spanning
several is priced level by level (inside each node over its own W, across nodes over the
scale-out network). collective-permute, collective-broadcast, ragged-all-to-all and groups of
unknown or uneven size get no prediction. A missing file, unreadable HLO, HLO cut short (a
module that ends inside a computation, or has no ENTRY) or a bad option exits with status 2 and
``error: ...`` on stderr; a whole module without collectives lists 0 of them."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import stat

from analysis.book.collective_cost import Span, predict_collective
from analysis.book.collectives import BY_HLO, V_from_hlo
from analysis.book.errors import BookError
from analysis.book.hardware import Hardware, wraparound_for, wraparound_reason
from analysis.book.placement import Placement, position, spread
from analysis.book.topology import fabrics_for, group_extents, parse_layout
from analysis.book.units import fmt_time
from analysis.cli.json_out import versioned
from analysis.cli.options import add_constant_arguments, fail, hardware_from_args
from analysis.hlo import Collective, HloParseError, parse_collectives

MAX_HLO_BYTES = 1 << 30

_PREDICTION_KEYS = ("V_bytes", "links", "wraparound_reason", "model_time_s", "regime", "formula", "note")
_ASSUMPTION = (
    "each group taken as one mesh axis of group_size devices; V = result bytes (all-gather), "
    "operand bytes (reduce-scatter, all-reduce), operand bytes * group_size (all-to-all)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``hlo`` command's options."""
    parser.add_argument("file", help="HLO text: compiled.as_text() output or an XLA dump (--xla_dump_to)")
    parser.add_argument(
        "--num-devices",
        type=int,
        default=None,
        help="devices in a group written replica_groups={} (default: the module header's "
        "replica_count * num_partitions)",
    )
    parser.add_argument(
        "--hardware",
        default=None,
        help="also predict each collective's time with the book's model on this hardware "
        "(a name in conf/hardware, e.g. tpu_v5e, h100, or a YAML path); each group is "
        "taken as ONE mesh axis of group_size devices; V = result bytes (all-gather), "
        "operand bytes (reduce-scatter, all-reduce), operand bytes * group_size "
        "(all-to-all)",
    )
    parser.add_argument(
        "--topology",
        default=None,
        help="physical slice shape, e.g. 8x16 (with --hardware): a group as large as one of "
        "its axes is taken to be that axis, and the output says which; whether it wraps "
        "around follows the hardware's rule for its size either way. Or several domains: "
        "nodes=2,gpus_per_node=8 (GPUs) or slices=2[,slice=16x16] (TPUs): a group whose "
        "device ids span nodes/slices is priced inside each and across them",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print a JSON list, one object per collective: every field of "
        "analysis.hlo.Collective (for collective-permute, num_groups counts its pairs), "
        "num_pairs, and with --hardware the prediction",
    )
    add_constant_arguments(parser, flops=False)


def _wraparound(hw: Hardware, size: int, topology: str | None) -> tuple[bool, str]:
    """Whether a group of ``size`` devices, taken as one mesh axis, is a ring, and why."""
    # Every wraparound rule in conf/hardware depends on the axis size alone, so a topology axis
    # of the group's size wraps exactly when the rule says that size does: it names the axis.
    ring = wraparound_for(hw, [size])[0]
    if hw.interconnect == "switch":
        return ring, "a switch: every device one hop from every other"
    if hw.interconnect == "host":
        return ring, "the host: the ring formula with the given W and T_min"
    where = ""
    layout = parse_layout(topology) if topology is not None else None
    phys = list(layout.shape or ()) if layout is not None else []
    if layout is not None and phys:
        name = "topology" if layout.kind == "shape" else "slice shape"
        where = (
            f"axis {phys.index(size)} of {name} {'x'.join(map(str, phys))}; "
            if size in phys
            else f"not an axis of {name} {'x'.join(map(str, phys))}; "
        )
    return ring, where + wraparound_reason(hw, size)


def _spans(c: Collective, hw: Hardware, topology: str | None) -> tuple[list[Span] | None, bool]:
    """Where the group lies over nodes/slices, from its device ids (None for a slice shape),
    and whether it spreads evenly over them."""
    layout = parse_layout(topology) if topology is not None else None
    if layout is None or layout.kind == "shape":
        return None, True
    total = c.group_size * (c.num_groups or 1)
    fabrics = fabrics_for(hw, layout, layout.blocks * layout.block_size if layout.block_size else total)
    blocks = [f.block for f in fabrics]
    ids = list(c.replica_groups[0]) if c.replica_groups else list(range(c.group_size))
    ext, even = group_extents(ids, blocks)
    return [Span(f, (n,), (_wraparound(hw, n, topology)[0],)) for f, n in zip(fabrics, ext)], even


def _physical(c: Collective, hw: Hardware, topology: str | None) -> tuple[list[int], list[bool], str] | None:
    """On a torus with a slice ``--topology``: the physical axes a group spans, from its device
    ids (device ``i`` at position ``i`` of the slice's chips, row-major, as ``predict`` lays a
    mesh), whether each is a ring, and why. None where that does not apply: no slice shape, not
    a torus, ids beyond the slice, or a group that is no sub-grid (then: one axis, as before)."""
    layout = parse_layout(topology) if topology is not None else None
    if layout is None or layout.kind != "shape" or hw.interconnect != "torus" or len(layout.shape) > 3:
        return None
    shape = list(layout.shape)
    ids = list(c.replica_groups[0]) if c.replica_groups else list(range(c.group_size))
    if not ids or max(ids) >= math.prod(shape):
        return None
    ext = spread([position(i, shape) for i in ids])
    if math.prod(ext.values()) != len(set(ids)):
        return None
    place = Placement(tuple(shape))
    rings = [place.ring(hw.wraparound, d, e) for d, e in ext.items()]
    what = "ring" if all(rings) else "line" if not any(rings) else "rings and lines"
    where = ", ".join(f"{d} ({e} of {place.size(d)})" for d, e in ext.items())
    why = (
        f"on {where} of topology {'x'.join(map(str, shape))} (device i at chip i, row-major): {what} "
        f"({wraparound_reason(hw, max(ext.values(), default=1), shape)})"
    )
    return list(ext.values()), rings, why


def predict(c: Collective, hw: Hardware, topology: str | None = None) -> dict | None:
    """The book's prediction for one parsed collective (see the module docstring), or None
    where the model has no formula for it."""
    if c.kind not in BY_HLO or not c.group_size:
        return None
    kind = BY_HLO[c.kind].op
    v = int(V_from_hlo(c.kind, c.operand_bytes, c.result_bytes, c.group_size))  # whole bytes, as printed
    spans, even = _spans(c, hw, topology)
    inner = spans[0].n if spans else c.group_size
    ring, why = _wraparound(hw, inner, topology)
    if spans and any(s.n > 1 for s in spans[1:]):
        why = " x ".join(f"{s.n} {s.fabric.where} ({s.fabric.name})" for s in spans if s.n > 1) + "; " + why
    physical = _physical(c, hw, topology)
    if physical is not None:
        sizes, rings, why = physical
        p = predict_collective(kind, v, sizes, hw, rings)
    else:
        p = predict_collective(kind, v, [c.group_size], hw, [ring], spans)
    uneven = "the group spreads unevenly over the nodes/slices: priced as if even, with its extents rounded up"
    note = p.note if even else "; ".join(filter(None, [p.note, uneven]))
    return {
        "V_bytes": v,
        "links": p.topology,
        "wraparound_reason": why,
        "model_time_s": p.time_s,
        "regime": p.regime,
        "formula": p.formula,
        "note": note,
    }


def _record(c: Collective, hw: Hardware | None, topology: str | None) -> dict:
    rec = dataclasses.asdict(c)
    rec["num_pairs"] = len(c.source_target_pairs) if c.source_target_pairs is not None else None
    if hw is not None:
        rec.update(predict(c, hw, topology) or dict.fromkeys(_PREDICTION_KEYS))
    return rec


def _cell(value) -> str:
    if value is None:
        return ""
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def render(records: list[dict], with_prediction: bool) -> str:
    """The records as an aligned table, one row per collective (numbers right-aligned)."""
    cols = ["name", "kind", "dtype", "operand_bytes", "result_bytes", "group_size", "num_groups", "pairs"]
    if with_prediction:
        cols += ["V_bytes", "links", "predicted", "regime"]
    rows = []
    for r in records:
        permute = r["num_pairs"] is not None
        row = {**r, "pairs": r["num_pairs"]}
        if permute:  # pairs, not groups: the parser's num_groups counts them, shown once as pairs
            row["num_groups"] = None
        if with_prediction:
            row["predicted"] = fmt_time(r["model_time_s"]) if r["model_time_s"] is not None else None
        rows.append([_cell(row[k]) for k in cols])
    right = {"operand_bytes", "result_bytes", "group_size", "num_groups", "pairs", "V_bytes", "predicted"}
    widths = [max([len(k)] + [len(row[i]) for row in rows]) for i, k in enumerate(cols)]

    def line(cells):
        return "  ".join(c.rjust(w) if k in right else c.ljust(w) for k, c, w in zip(cols, cells, widths)).rstrip()

    return "\n".join([line(cols)] + [line(row) for row in rows])


def main(args: argparse.Namespace) -> int:
    """Run ``hlo``; 0 on success, 2 on a missing file, unreadable HLO or a bad option."""
    try:
        if args.topology is not None and args.hardware is None:
            raise BookError("--topology goes with --hardware")
        hw = hardware_from_args(args) if args.hardware is not None else None
        if args.topology is not None:
            parse_layout(args.topology)

        mode = os.stat(args.file).st_mode
        if not stat.S_ISREG(mode):  # /dev/urandom would be read forever
            raise BookError(f"{args.file} is not a regular file")
        if os.path.getsize(args.file) > MAX_HLO_BYTES:
            raise BookError(f"{args.file} is larger than {MAX_HLO_BYTES >> 20} MiB: not one program's HLO text")
        with open(args.file, encoding="utf-8") as f:
            text = f.read()
        if not re.search(r"^\s*HloModule\s", text, re.M) and not re.search(
            r"^\s*(ENTRY\s+)?%?[\w.\-]+\s.*\{\s*$", text, re.M
        ):
            raise HloParseError("no HloModule and no computation in it: not HLO text")
        collectives = parse_collectives(text, num_devices=args.num_devices, whole=True)
        records = [_record(c, hw, args.topology) for c in collectives]
    except OSError as err:
        return fail(f"cannot read {args.file}: {err.strerror or err}")
    except UnicodeDecodeError as err:
        return fail(f"{args.file} is not UTF-8 text: {err.reason} at byte {err.start}")
    except HloParseError as err:
        return fail(f"{args.file}: {err}")
    except BookError as err:
        return fail(str(err))
    if args.json:  # one record a line: replica groups can be long
        head = json.dumps(versioned("hlo", {"file": str(args.file)}))[:-1]
        body = ",".join("\n  " + json.dumps(r) for r in records) + ("\n]" if records else "]")
        print(f'{head}, "collectives": [{body}}}')
        return 0
    print(f"{args.file}: {len(records)} collective{'' if len(records) == 1 else 's'}")
    if hw is not None:
        where = f", topology {args.topology}" if args.topology else ""
        multi = args.topology is not None and parse_layout(args.topology).kind != "shape"
        print(
            f"model: {hw.name} ({hw.interconnect}){where}; {_ASSUMPTION}"
            + ("; device i lies in node/slice i // (devices per node/slice)" if multi else "")
            + (
                "; on the slice, device i at chip i (row-major): a group spans the physical axes its ids vary along"
                if args.topology is not None and not multi and hw.interconnect == "torus"
                else ""
            )
        )
    if records:
        print(render(records, hw is not None))
    for r in records:
        if r.get("note"):
            print(f"note ({r['name']}): {r['note']}")
        if r.get("links") == "hierarchical":
            print(f"formula ({r['name']}): {r['formula']}")
    return 0
