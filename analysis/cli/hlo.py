"""``python -m analysis hlo FILE``: every collective in an HLO text file, as an aligned table or
a JSON list, optionally with the scaling book's predicted time for each.

FILE is HLO text as ``compiled.as_text()`` prints it or XLA dumps it (``--xla_dump_to``), from
any backend; a file holding several modules lists them all. Example::

    python -m analysis hlo outputs/.../hlo/compiled.hlo.txt --hardware tpu_v5e --topology 8x16

With ``--hardware``, the book's model (:func:`analysis.book.collective_cost.predict_collective`) prices each
all-gather, reduce-scatter, all-reduce and all-to-all as if its group were ONE mesh axis of
``group_size`` devices; HLO does not say how a group lies on the physical links. V is taken
as the book does: the result bytes for all-gather (the gathered array), the operand bytes for
reduce-scatter and all-reduce (the unreduced array), and operand bytes * group_size for
all-to-all (the whole array across the group, as the runner's V and the notation's; each
device's operand is 1/group_size of it). Whether
that axis wraps around follows the hardware's rule for an axis of that size; with
``--topology``, a group as large as one of the topology's axes is taken to be that axis (the
reason names it; the rules in conf/hardware depend on the size alone, so the answer is the
same). collective-permute, collective-broadcast, ragged-all-to-all and groups of
unknown or uneven size get no prediction. A missing file, unreadable HLO or a bad option
exits with status 2 and ``error: ...`` on stderr.
"""
from __future__ import annotations

import argparse
import dataclasses
import json

from analysis.book.collective_cost import predict_collective
from analysis.book.errors import BookError
from analysis.book.hardware import Hardware, parse_topology, wraparound_for, wraparound_reason
from analysis.book.units import fmt_time
from analysis.cli.options import add_constant_arguments, fail, hardware_from_args
from analysis.hlo import Collective, HloParseError, parse_collectives

# HLO kind -> the model's kind, and the book's V from a parsed Collective.
_MODEL = {"all-gather": ("all_gather", lambda c: c.result_bytes),
          "reduce-scatter": ("reduce_scatter", lambda c: c.operand_bytes),
          "all-reduce": ("all_reduce", lambda c: c.operand_bytes),
          "all-to-all": ("all_to_all", lambda c: c.operand_bytes * c.group_size)}
_PREDICTION_KEYS = ("V_bytes", "links", "wraparound_reason", "model_time_s", "regime", "formula")
_ASSUMPTION = ("each group taken as one mesh axis of group_size devices; V = result bytes (all-gather), "
               "operand bytes (reduce-scatter, all-reduce), operand bytes * group_size (all-to-all)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``hlo`` command's options."""
    parser.add_argument("file", help="HLO text: compiled.as_text() output or an XLA dump (--xla_dump_to)")
    parser.add_argument("--num-devices", type=int, default=None,
                        help="devices in a group written replica_groups={} (default: the module header's "
                             "replica_count * num_partitions)")
    parser.add_argument("--hardware", default=None,
                        help="also predict each collective's time with the book's model on this hardware "
                             "(a name in conf/hardware, e.g. tpu_v5e, h100, or a YAML path); each group is "
                             "taken as ONE mesh axis of group_size devices; V = result bytes (all-gather), "
                             "operand bytes (reduce-scatter, all-reduce), operand bytes * group_size "
                             "(all-to-all)")
    parser.add_argument("--topology", default=None,
                        help="physical slice shape, e.g. 8x16 (with --hardware): a group as large as one of "
                             "its axes is taken to be that axis, and the output says which; whether it wraps "
                             "around follows the hardware's rule for its size either way")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON list, one object per collective: every field of "
                             "analysis.hlo.Collective (for collective-permute, num_groups counts its pairs), "
                             "num_pairs, and with --hardware the prediction")
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
    if topology is not None:
        phys = parse_topology(topology)
        where = (f"axis {phys.index(size)} of topology {topology}; " if size in phys
                 else f"not an axis of topology {topology}; ")
    return ring, where + wraparound_reason(hw, size)


def predict(c: Collective, hw: Hardware, topology: str | None = None) -> dict | None:
    """The book's prediction for one parsed collective (see the module docstring), or None
    where the model has no formula for it."""
    if c.kind not in _MODEL or not c.group_size:
        return None
    kind, v_of = _MODEL[c.kind]
    v = v_of(c)
    ring, why = _wraparound(hw, c.group_size, topology)
    p = predict_collective(kind, v, [c.group_size], hw, [ring])
    return {"V_bytes": v, "links": p.topology, "wraparound_reason": why, "model_time_s": p.time_s,
            "regime": p.regime, "formula": p.formula}


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
            parse_topology(args.topology)
        with open(args.file, encoding="utf-8") as f:
            text = f.read()
        collectives = parse_collectives(text, num_devices=args.num_devices)
        records = [_record(c, hw, args.topology) for c in collectives]
    except OSError as err:
        return fail(f"cannot read {args.file}: {err.strerror or err}")
    except UnicodeDecodeError as err:
        return fail(f"{args.file} is not UTF-8 text: {err.reason} at byte {err.start}")
    except HloParseError as err:
        return fail(f"{args.file}: {err}")
    except BookError as err:
        return fail(str(err))
    if args.json:  # one object a line: replica groups can be long
        print("[" + ",".join("\n  " + json.dumps(r) for r in records) + ("\n]" if records else "]"))
        return 0
    print(f"{args.file}: {len(records)} collective{'' if len(records) == 1 else 's'}")
    if hw is not None:
        where = f", topology {args.topology}" if args.topology else ""
        print(f"model: {hw.name} ({hw.interconnect}){where}; {_ASSUMPTION}")
    if records:
        print(render(records, hw is not None))
    return 0
