"""``python -m analysis hardware``: the hardware catalogue (``conf/hardware``), and which entry a
device kind resolves to and why.

Examples::

    python -m analysis hardware                                   # every entry, with its sources
    python -m analysis hardware --platform tpu                    # the TPU entries
    python -m analysis hardware --device-kind "TPU v5 lite"       # -> tpu_v5e (exact)
    python -m analysis hardware --device-kind "NVIDIA H100 PCIe" --platform cuda --json

The rules are :func:`analysis.book.device_kinds.resolve`'s: an exact ``device_kinds`` name, else
the longest matching ``device_kind_patterns`` entry, else an ``unknown_<platform>`` record
with no constants (as the runner records it). ``--platform`` takes what JAX reports (``cpu``,
``tpu``, ``gpu``, ``cuda``, ``rocm``; the last two mean gpu). Bad input exits with status 2
and ``error: ...`` on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from analysis.book.device_kinds import PLATFORMS, normalize_platform, resolve
from analysis.book.errors import BookError
from analysis.book.hardware import Hardware, hardware_names, load_hardware
from analysis.book.units import fmt_time
from analysis.cli.json_out import versioned
from analysis.cli.options import fail


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``hardware`` command's options."""
    parser.add_argument(
        "--device-kind",
        default=None,
        help='a device kind as JAX reports it (devices()[0].device_kind), e.g. "TPU v5 lite"',
    )
    parser.add_argument(
        "--platform",
        default=None,
        help=f"the devices' platform ({', '.join(PLATFORMS)}); restricts the catalogue or the match",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _num(x, unit: str = "") -> str:
    return "-" if x is None else f"{x:.4g}{unit}"


def _constants(hw: Hardware) -> list[str]:
    """An entry's constants in two lines: its domain, then what lies beyond it."""
    flops = hw.flops_per_s.get("bfloat16")
    mem = (
        "-"
        if not hw.memory_bytes
        else f"{hw.memory_bytes / 2**30:g} GiB"
        if hw.memory_bytes % 2**30 == 0
        else f"{hw.memory_bytes / 1e9:.4g} GB"
    )
    lines = [
        (
            f"W {_num(hw.link_bw_unidir_Bps, ' B/s')} one way, {_num(hw.link_bw_bidir_Bps, ' B/s')} bidi "
            f"({hw.interconnect or '-'}, wraparound {hw.wraparound or '-'}), T_min "
            f"{fmt_time(hw.hop_latency_s) if hw.hop_latency_s else '-'}; HBM {_num(hw.hbm_bw_Bps, ' B/s')}, "
            f"{mem}; bf16 {_num(flops, ' FLOP/s')}"
        )
    ]
    if hw.domain_size:
        beyond = (
            f"; beyond it {hw.scaleout_network or 'scale-out'} {_num(hw.scaleout_bw_unidir_Bps, ' B/s')} "
            f"per device one way, {fmt_time(hw.scaleout_latency_s) if hw.scaleout_latency_s else '-'}"
            if hw.scaleout_bw_unidir_Bps
            else ""
        )
        node = f"; PCIe in a node {_num(hw.node_bw_unidir_Bps, ' B/s')}" if hw.node_bw_unidir_Bps else ""
        core_bw = hw.core_bw_unidir_Bps
        cores = f"; the two cores of a chip {_num(core_bw, ' B/s')} one way" if core_bw else ""
        lines.append(f"domain {hw.domain_size} devices{node}{cores}{beyond}")
    return lines


def _block(hw: Hardware) -> list[str]:
    kinds = ", ".join(repr(k) for k in hw.device_kinds) or "(none: pick it by name)"
    pats = f"; patterns {', '.join(repr(p) for p in hw.device_kind_patterns)}" if hw.device_kind_patterns else ""
    out = [f"{hw.name} ({hw.kind}): device kinds {kinds}{pats}"]
    out += [f"  {line}" for line in _constants(hw)]
    src = [s for s in hw.source.splitlines() if s.strip()]
    out += [f"  source: {src[0]}" if src else "  source: -"] + [f"          {s}" for s in src[1:]]
    return out


def _entry_json(hw: Hardware) -> dict:
    return dataclasses.asdict(hw)


def main(args: argparse.Namespace) -> int:
    """Run ``hardware``; 0 on success, 2 on bad input (message on stderr)."""
    try:
        if args.platform is not None and args.platform.strip().lower() not in PLATFORMS:
            raise BookError(f"--platform {args.platform!r} is not one of {', '.join(PLATFORMS)}")
        platform = normalize_platform(args.platform) if args.platform else None
        if args.device_kind is None:
            hws = [load_hardware(n) for n in hardware_names()]
            hws = [h for h in hws if platform is None or h.kind == platform]
        else:
            if not args.device_kind.strip():
                raise BookError('--device-kind is empty; give it as JAX reports it, e.g. "TPU v5 lite"')
            r = resolve(args.device_kind, platform)
            hw = load_hardware(r.entry["name"]) if r.known else None
    except BookError as err:
        return fail(str(err))
    if args.device_kind is None:
        if args.json:
            print(json.dumps(versioned("hardware", {"entries": [_entry_json(h) for h in hws]}), indent=2))
        else:
            print("\n".join(line for h in hws for line in _block(h) + [""]).rstrip())
        return 0
    if args.json:
        out = {
            "device_kind": r.device_kind,
            "platform": r.platform,
            "name": r.entry["name"],
            "known": r.known,
            "matched_by": r.matched_by,
            "reason": r.reason,
        }
        print(
            json.dumps(
                versioned(
                    "hardware",
                    {
                        **out,
                        **(
                            {k: v for k, v in _entry_json(hw).items() if k != "name"}
                            if hw
                            else {"kind": r.entry["kind"], "source": r.entry["source"]}
                        ),
                    },
                ),
                indent=2,
            )
        )
        return 0
    print(f"{r.device_kind!r} ({r.platform}) -> {r.entry['name']} ({r.matched_by}): {r.reason}")
    if hw is not None:
        print("\n".join(_block(hw)))
    return 0
