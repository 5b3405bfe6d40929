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
"""

from __future__ import annotations

from dataclasses import dataclass

from analysis.book.collective_cost import CollectivePrediction
from analysis.book.hardware import Hardware


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

    def to_dict(self) -> dict:
        return {
            "expected_time_s": self.time_s,
            "expected_level": self.level,
            "expected_floor_s": self.floor_s,
            "expected_bandwidth_time_s": self.bandwidth_time_s,
            "expected_bw_shares": list(self.bw_shares),
            "expected_source": self.source,
        }


def _factor(hw: Hardware, level: str, op: str):
    return next((f for f in hw.expected if f.level == level and f.op == op), None)


def expected_time(pred: CollectivePrediction, hw: Hardware) -> ExpectedTime:
    """The expected time of the collective ``pred`` prices on ``hw`` (module docstring)."""
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
