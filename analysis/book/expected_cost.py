"""The expected time of a collective on a real cluster, beside the book's roofline.

The roofline (:func:`analysis.book.collective_cost.predict_collective`) is what the links allow:
``max(T_min * hops, bytes / W)`` per level at full line rate. Published measurements fall short
of it in two ways the roofline leaves out on purpose (tests/data/published, SOURCES.md):

* the share of link bandwidth a library's usual algorithm reaches (NCCL's ring about 80% of
  NVLink's line rate; in-switch reductions - NVLink SHARP, InfiniBand SHARP - near or above 1.0
  because they move fewer bytes than the ring the roofline prices);
* a launch and protocol floor per collective: about 15-50 us inside a GPU node, 40-250 us across
  nodes, against the roofline's 1 us per hop.

``expected_time_s = max(floor, min(floor + B / small_bw_share, setup + B / bw_share))`` with B the
roofline's bandwidth time at each level (the slowest level counts): NCCL's low-latency protocols
start at the floor but reach a small share of the links, its bulk protocol starts later (setup)
and reaches the full share. Floor and setup are the outer level's (``across`` when the group
leaves its domain, else ``inside``); shares are per level. The factors
come from the hardware entry's ``expected:`` block, each with its source. Where an entry has no
factor for a collective and level, the roofline's own terms stand in (share 1, floor = its
latency term), and the result says so.

On a GPU entry whose ``expected:`` block has an ``nccl:`` part the expected time is NCCL's own
instead (:mod:`analysis.book.nccl_cost`): every algorithm and protocol NCCL would consider for the
group's ranks and nodes, priced from NCCL's tuning constants, the cheapest taken; the result names
it (``ring/LL128``, ``nvls/Simple``) with its latency, bandwidth term and channels. Where the entry
names a tuner plugin (``nccl.tuner``: aws-ofi-nccl's on p5) and its regions hold the point, the
pair it picks is taken instead, at NCCL's price, and the result says so. An AMD GPU entry
with an ``rccl:`` part is priced alike by RCCL's model (:mod:`analysis.book.rccl_cost`). TPU entries
and GPU entries without either part keep the factors above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from analysis.book.collective_cost import CollectivePrediction
from analysis.book.hardware import Hardware
from analysis.book.nccl_cost import Choice, nccl_time, tuner_pick
from analysis.book.ofi_tuner import TUNERS
from analysis.book.rccl_cost import rccl_time


@dataclass(frozen=True)
class ExpectedTime:
    """The expected time and what it took: the level whose floor applies, the floor, the
    bandwidth term after the shares, and the factors' source (or why there were none)."""

    time_s: float
    level: str
    floor_s: float
    bandwidth_time_s: float
    bw_shares: tuple[float, ...]
    source: str
    # NCCL's model only: the pair taken and every pair priced (analysis.book.nccl_cost), the ranks
    # and nodes it priced
    algorithm: Choice | None = None
    candidates: tuple[Choice, ...] = ()
    ranks: int = 0
    nodes: int = 0
    library: str = "NCCL"  # whose model priced it: NCCL or RCCL
    # the NCCL_ALGO / NCCL_PROTO the platform set for this price (across nodes), in words; "" for none
    settings: str = ""
    # the tuner plugin whose region picked the pair, in words (analysis.book.ofi_tuner); "" where NCCL chose
    tuner: str = ""

    def to_dict(self) -> dict:
        out = {
            "expected_time_s": self.time_s,
            "expected_level": self.level,
            "expected_floor_s": self.floor_s,
            "expected_bandwidth_time_s": self.bandwidth_time_s,
            "expected_bw_shares": list(self.bw_shares),
            "expected_source": self.source,
        }
        if self.algorithm is not None:  # the NCCL keys only where NCCL's model priced it
            out["expected_algorithm"] = self.algorithm.name
            out["expected_channels"] = self.algorithm.channels
            out["expected_ranks"], out["expected_nodes"] = self.ranks, self.nodes
            out["expected_candidates"] = {c.name: c.time_s for c in self.candidates}
            if self.settings:
                out["expected_settings"] = self.settings
            if self.tuner:
                out["expected_tuner"] = self.tuner
        return out


def _factor(hw: Hardware, level: str, op: str):
    return next((f for f in hw.expected if f.level == level and f.op == op), None)


def ranks_and_nodes(pred: CollectivePrediction) -> tuple[int, int]:
    """The group's ranks and how many nodes (NVLink domains) they span: the across level's
    devices where the roofline priced one, else one node."""
    ranks = math.prod(pred.axis_sizes) if pred.axis_sizes else 1
    across = [lv for lv in pred.levels or () if str(lv.get("where", "")).startswith("across")]
    nodes = int(across[-1]["devices"]) if across else 1
    return ranks, max(1, min(nodes, ranks))


def nccl_expected(pred: CollectivePrediction, hw: Hardware) -> ExpectedTime:
    """NCCL's own price of ``pred`` on ``hw`` (``hw.nccl`` set), or RCCL's (``hw.rccl`` set; module
    docstring)."""
    ranks, nodes = ranks_and_nodes(pred)
    ppn = max(1, ranks // nodes)
    level = "across" if nodes > 1 else "inside"
    if pred.time_s == 0 or ranks <= 1:
        return ExpectedTime(0.0, level, 0.0, 0.0, (), "no communication")
    # each NIC's bandwidth: the entry's scale-out bandwidth per GPU over a full domain's NICs
    library, model = ("RCCL", hw.rccl) if hw.rccl is not None else ("NCCL", hw.nccl)
    nic_GBps = float(hw.scaleout_bw_unidir_Bps or 0.0) * (hw.domain_size or ppn) / model.nics_per_node / 1e9
    system = replace(model, nic_bw_GBps=nic_GBps)
    size = pred.V_bytes / ranks if pred.kind == "all_to_all" else pred.V_bytes  # the library's nBytes
    price = rccl_time if library == "RCCL" else nccl_time
    best, priced = price(pred.kind, size, ranks, nodes, system)
    bw_time = best.time_s - best.latency_s
    share = pred.bandwidth_time_s / bw_time if bw_time > 0 else 1.0
    source = hw.expected_source or f"{library}'s tuning model (analysis/book/{library.lower()}_cost.py)"
    settings = ""
    if library == "NCCL" and nodes > 1 and (model.net_algorithms or model.net_protocols):
        settings = (
            f"NCCL_ALGO={','.join(model.net_algorithms) or 'any'} NCCL_PROTO={','.join(model.net_protocols) or 'any'}"
            " across nodes, as the platform's network plugin sets them (the entry's net_algorithms, net_protocols)"
        )
    tuner = ""
    if library == "NCCL" and tuner_pick(model, pred.kind, size, ranks, nodes, priced) is best:
        cheapest = min(priced, key=lambda c: c.time_s).name
        tuner = f"{TUNERS[model.tuner]} runs {best.name} here, " + (
            "NCCL's cheapest pair too" if cheapest == best.name else f"not NCCL's cheapest pair ({cheapest})"
        )
    return ExpectedTime(
        best.time_s, level, best.latency_s, bw_time, (share,), source, best, tuple(priced), ranks, nodes, library,
        settings, tuner,
    )  # fmt: skip


def expected_time(pred: CollectivePrediction, hw: Hardware) -> ExpectedTime:
    """The expected time of the collective ``pred`` prices on ``hw`` (module docstring)."""
    if hw.kind == "gpu" and (hw.nccl is not None or hw.rccl is not None):
        return nccl_expected(pred, hw)
    # a level is "across" when it runs over the scale-out network (not the domain's links)
    levels = [(("inside" if i == 0 else "across"), lv) for i, lv in enumerate(pred.levels or ())]
    if not levels:
        levels = [("inside", {"bandwidth_time_s": pred.bandwidth_time_s})]
    outer = levels[-1][0]
    if pred.time_s == 0:  # a group of one moves nothing and launches nothing worth pricing
        return ExpectedTime(0.0, outer, 0.0, 0.0, (), "no communication")
    missing, bulk_terms, small_terms, shares = [], [], [], []
    for level, lv in levels:
        f = _factor(hw, level, pred.kind)
        missing += [] if f else [level]
        share = f.bw_share if f else 1.0
        small = (f.small_bw_share or f.bw_share) if f else 1.0
        shares.append(share)
        bulk_terms.append(float(lv["bandwidth_time_s"]) / share)
        small_terms.append(float(lv["bandwidth_time_s"]) / small)
    f = _factor(hw, outer, pred.kind)
    floor = f.floor_s if f else float(pred.latency_time_s)
    setup = f.setup_s if f and f.setup_s is not None else floor
    # the library picks the faster protocol: low latency (from the floor, at its small share) or
    # bulk (after its setup, at the full share); nothing is faster than the floor
    bulk, small = setup + max(bulk_terms), floor + max(small_terms)
    t = max(floor, min(bulk, small))
    source = hw.expected_source or "no expected factors"
    if missing:
        source = (
            f"{hw.name} has no expected factors for {pred.kind} {' and '.join(sorted(set(missing)))}: "
            "the roofline's own terms stand in there"
        )
    return ExpectedTime(t, outer, floor, max(bulk_terms), tuple(shares), source)


def expected_time_s(pred: CollectivePrediction, hw: Hardware) -> float:
    """Just the expected time in seconds (:func:`expected_time`)."""
    return expected_time(pred, hw).time_s
