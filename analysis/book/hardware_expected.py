"""The ``expected:`` block of a hardware entry read and checked: per level and collective the
factors of :mod:`analysis.book.expected_cost`, and the cluster as NCCL's and RCCL's models see it
(``expected.nccl``, ``expected.rccl``: :mod:`analysis.book.nccl_cost`, :mod:`analysis.book.rccl_cost`).
Each reader answers a malformed block with one HardwareError line naming the entry and the key."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from analysis.book.collectives import OPS
from analysis.book.errors import HardwareError
from analysis.book.hardware_values import number, ranged
from analysis.book.nccl_cost import ALGOS, ARCHS, PROTOS, NcclSystem
from analysis.book.ofi_tuner import TUNERS
from analysis.book.rccl_cost import ARCHS as RCCL_ARCHS
from analysis.book.rccl_cost import RcclSystem

EXPECTED_LEVELS = ("inside", "across")


@dataclass(frozen=True)
class ExpectedFactor:
    """For one collective at one level (``inside`` a domain, ``across`` domains): the share of
    the roofline's link bandwidth its usual algorithms reach, and its launch/protocol floor."""

    level: str
    op: str
    bw_share: float  # of the roofline's link bandwidth, for large messages (NCCL's Simple protocol)
    floor_s: float  # the smallest time any message takes (launch and protocol)
    setup_s: float | None = None  # start-up of the bulk protocol; None: the floor
    small_bw_share: float | None = None  # the low-latency protocol's share (mid sizes); None: bw_share


def expected_factors(raw: Any, where: str) -> tuple[tuple[ExpectedFactor, ...], str]:
    """``expected: {source, inside: {op: {bw_share, floor_s}}, across: {...}}`` as factors."""
    if not isinstance(raw, dict):
        raise HardwareError(f"{where}: expected must be a mapping with source, inside and across")
    out = []
    for level, per_op in raw.items():
        if level in ("source", "nccl", "rccl"):  # read by nccl_system, rccl_system
            continue
        if level not in EXPECTED_LEVELS or not isinstance(per_op, dict):
            raise HardwareError(f"{where}: expected.{level}: the levels are {', '.join(EXPECTED_LEVELS)} (and source)")
        for op, f in per_op.items():
            keys = {"bw_share", "floor_s", "setup_s", "small_bw_share"}
            if op not in OPS or not isinstance(f, dict) or not {"bw_share", "floor_s"} <= set(f) <= keys:
                raise HardwareError(
                    f"{where}: expected.{level}.{op}: a collective ({', '.join(OPS)}) with bw_share and floor_s "
                    "(and optionally setup_s, small_bw_share)"
                )
            share, floor = number(f["bw_share"], "bw_share", where), number(f["floor_s"], "floor_s", where)
            setup, small = (
                number(f.get("setup_s"), "setup_s", where),
                number(f.get("small_bw_share"), "small_bw_share", where),
            )
            given = [x for x in (share, floor, setup, small) if x is not None]
            if (
                not (share and share > 0 and floor is not None and floor >= 0)
                or (small is not None and small <= 0)
                or (setup is not None and setup < 0)
                or not all(map(math.isfinite, given))  # an infinite share prices any size at 0 s
            ):
                raise HardwareError(
                    f"{where}: expected.{level}.{op}: shares > 0 and floor_s >= 0 (setup_s too), all finite; got {f!r}"
                )
            out.append(ExpectedFactor(level, op, share, floor, setup, small))
    return tuple(out), str(raw.get("source") or "")


_NCCL_KEYS = {
    "source", "arch", "intra", "nvlinks", "nics_per_node", "nvls", "cpu", "net_latency_s", "net_algorithms",
    "net_protocols", "tuner",
}  # fmt: skip
_NCCL_OPTIONAL = {"source", "net_latency_s", "net_algorithms", "net_protocols", "tuner"}


def nccl_system(raw: Any, where: str) -> NcclSystem | None:
    """``expected.nccl: {source, arch, intra, nvlinks, nics_per_node, nvls, cpu, net_latency_s,
    net_algorithms, net_protocols}`` as the system NCCL's model prices; each NIC's bandwidth is the
    entry's scale-out bandwidth per GPU times ``domain_size`` over ``nics_per_node`` (read at pricing
    time, so overrides reach it).
    Optional ``net_algorithms`` and ``net_protocols``: the NCCL_ALGO and NCCL_PROTO the platform's
    network plugin needs across nodes (lists of :data:`~analysis.book.nccl_cost.ALGOS` and ``PROTOS``);
    ``tuner``: the tuner plugin whose regions pick the pair (one of
    :data:`~analysis.book.ofi_tuner.TUNERS`)."""
    if raw is None:
        return None
    need = _NCCL_KEYS - _NCCL_OPTIONAL
    if not isinstance(raw, dict) or not need <= set(raw) <= _NCCL_KEYS:
        raise HardwareError(f"{where}: expected.nccl needs {', '.join(sorted(need))} (and source); got {raw!r}")
    arch, intra, cpu = str(raw["arch"]), str(raw["intra"]), str(raw["cpu"])
    try:
        nvlinks, nics = int(raw["nvlinks"]), int(raw["nics_per_node"])
    except (TypeError, ValueError) as err:
        raise HardwareError(f"{where}: expected.nccl.nvlinks and nics_per_node are whole numbers ({err})") from None
    if arch not in ARCHS or intra not in ("nvlink", "pci") or cpu not in ("intel", "amd", "arm"):
        raise HardwareError(
            f"{where}: expected.nccl: arch one of {', '.join(ARCHS)}, intra nvlink or pci, cpu intel, amd or arm"
        )
    if nvlinks < 0 or nics < 1 or not isinstance(raw["nvls"], bool):
        raise HardwareError(f"{where}: expected.nccl: nvlinks >= 0, nics_per_node >= 1, nvls true or false")
    latency = ranged(raw.get("net_latency_s", 0.0), "scaleout_latency_s", f"{where}: expected.nccl.net_latency_s")
    chosen = {}
    for key, allowed in (("net_algorithms", ALGOS), ("net_protocols", PROTOS)):
        given = raw.get(key) or []
        if not isinstance(given, list) or not set(map(str, given)) <= set(allowed):
            raise HardwareError(f"{where}: expected.nccl.{key} is a list of {', '.join(allowed)}; got {given!r}")
        chosen[key] = tuple(str(x) for x in given)
    tuner = "" if raw.get("tuner") is None else raw["tuner"]
    if not (tuner == "" or (isinstance(tuner, str) and tuner in TUNERS)):
        raise HardwareError(f"{where}: expected.nccl.tuner is one of {', '.join(TUNERS)} (or absent); got {tuner!r}")
    return NcclSystem(arch, intra, nvlinks, nics, 0.0, raw["nvls"], cpu, float(latency or 0.0), **chosen, tuner=tuner)


_RCCL_KEYS = {"source", "arch", "xgmi_links", "nics_per_node", "cpu", "ll128", "net_latency_s"}


def rccl_system(raw: Any, where: str) -> RcclSystem | None:
    """``expected.rccl: {source, arch, xgmi_links, nics_per_node, cpu, ll128, net_latency_s}`` as the
    system RCCL's model prices (each NIC's bandwidth as for ``expected.nccl``, at pricing time)."""
    if raw is None:
        return None
    need = _RCCL_KEYS - {"source", "net_latency_s"}
    if not isinstance(raw, dict) or not need <= set(raw) <= _RCCL_KEYS:
        raise HardwareError(f"{where}: expected.rccl needs {', '.join(sorted(need))} (and source); got {raw!r}")
    try:
        links, nics = int(raw["xgmi_links"]), int(raw["nics_per_node"])
    except (TypeError, ValueError) as err:
        raise HardwareError(f"{where}: expected.rccl.xgmi_links and nics_per_node are whole numbers ({err})") from None
    arch, cpu = str(raw["arch"]), str(raw["cpu"])
    if arch not in RCCL_ARCHS or cpu not in ("intel", "amd") or links < 1 or nics < 1:
        raise HardwareError(
            f"{where}: expected.rccl: arch one of {', '.join(RCCL_ARCHS)}, cpu intel or amd, "
            "xgmi_links and nics_per_node >= 1"
        )
    if not isinstance(raw["ll128"], bool):
        raise HardwareError(f"{where}: expected.rccl.ll128 is true or false")
    latency = ranged(raw.get("net_latency_s", 0.0), "scaleout_latency_s", f"{where}: expected.rccl.net_latency_s")
    return RcclSystem(arch, links, nics, 0.0, cpu, raw["ll128"], float(latency or 0.0))
