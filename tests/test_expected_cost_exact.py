"""The expected time (analysis.book.expected_cost) by exact expectations (issue 30, round two's
mutation check): a made-up entry whose factors differ per level and collective, predictions with
one and two levels, each of the three terms winning (floor, low-latency, bulk), a level or both
without factors, a group of one, and the dictionary ``predict --json`` prints.

Every number is worked out by hand from the formula in the module's docstring:
``max(floor, min(floor + B / small_share, setup + B / share))``, B each level's bandwidth time
(the slowest after its share counts), floor and setup the outer level's."""

from __future__ import annotations

import pytest

from analysis.book.collective_cost import CollectivePrediction
from analysis.book.expected_cost import ExpectedTime, expected_time, expected_time_s
from analysis.book.hardware import ExpectedFactor, Hardware

US = 1e-6
LAB = Hardware(
    name="lab",
    kind="gpu",
    expected=(
        # all_reduce: every field set, and different per level
        ExpectedFactor("inside", "all_reduce", bw_share=0.5, floor_s=10 * US, setup_s=40 * US, small_bw_share=0.125),
        ExpectedFactor("across", "all_reduce", bw_share=0.25, floor_s=100 * US, setup_s=300 * US),
        # all_gather inside: a setup below the floor, so the floor can win over the bulk term
        ExpectedFactor("inside", "all_gather", bw_share=0.5, floor_s=10 * US, setup_s=2 * US),
        # reduce_scatter: across only; no setup and no small share (both fall back)
        ExpectedFactor("across", "reduce_scatter", bw_share=0.5, floor_s=60 * US),
    ),
    expected_source="lab bench, 2026",
)


def pred(kind: str, *level_bw_s: float, bw_s: float = 0.0, latency_s: float = 7 * US, time_s: float = 1.0):
    """A prediction with the given levels' bandwidth times (none: a one-level prediction whose
    own ``bandwidth_time_s`` is ``bw_s``); ``latency_s`` is the roofline's latency term."""
    levels = tuple({"bandwidth_time_s": b} for b in level_bw_s)
    return CollectivePrediction(
        kind=kind,
        V_bytes=1.0,
        axis_sizes=(16,),
        wraparound=(True,),
        topology="ring",
        hops=1.0,
        latency_time_s=latency_s,
        bandwidth_time_s=bw_s,
        time_s=time_s,
        regime="bandwidth",
        formula="-",
        levels=levels,
    )


def check(e: ExpectedTime, time_s, level, floor_s, bandwidth_time_s, shares, source):
    assert e.time_s == pytest.approx(time_s, rel=1e-12)
    assert e.level == level
    assert e.floor_s == pytest.approx(floor_s, rel=1e-12)
    assert e.bandwidth_time_s == pytest.approx(bandwidth_time_s, rel=1e-12)
    assert e.bw_shares == shares
    assert e.source == source


def test_one_level_large_takes_the_bulk_protocol_after_its_setup():
    # B = 80 us: bulk 40 + 80 / 0.5 = 200 us; low latency 10 + 80 / 0.125 = 650 us
    e = expected_time(pred("all_reduce", bw_s=80 * US), LAB)
    check(e, 200 * US, "inside", 10 * US, 160 * US, (0.5,), "lab bench, 2026")
    assert expected_time_s(pred("all_reduce", bw_s=80 * US), LAB) == e.time_s


def test_one_level_mid_size_takes_the_low_latency_protocol_at_its_small_share():
    # B = 2 us: bulk 40 + 4 = 44 us; low latency 10 + 2 / 0.125 = 26 us
    e = expected_time(pred("all_reduce", bw_s=2 * US), LAB)
    check(e, 26 * US, "inside", 10 * US, 4 * US, (0.5,), "lab bench, 2026")


def test_a_setup_below_the_floor_never_gives_less_than_the_floor():
    # all_gather inside: B = 2 us; bulk 2 + 2 / 0.5 = 6 us; low latency (small share = the
    # share, 0.5) 10 + 4 = 14 us; the faster, 6 us, is below the floor 10 us
    e = expected_time(pred("all_gather", bw_s=2 * US), LAB)
    check(e, 10 * US, "inside", 10 * US, 4 * US, (0.5,), "lab bench, 2026")
    # B = 20 us: bulk 2 + 40 = 42 us, low latency 10 + 40 = 50 us: bulk, above the floor
    assert expected_time_s(pred("all_gather", bw_s=20 * US), LAB) == pytest.approx(42 * US, rel=1e-12)


def test_two_levels_take_the_outer_floor_and_setup_and_the_slowest_level_after_its_share():
    # inside 80 us / 0.5 = 160 us, across 50 us / 0.25 = 200 us: B' = 200 us (the across level);
    # bulk: across setup 300 + 200 = 500 us; low latency: inside 80 / 0.125 = 640 us, across
    # 50 / 0.25 (no small share: the share) = 200 us, so 100 + 640 = 740 us
    e = expected_time(pred("all_reduce", 80 * US, 50 * US), LAB)
    check(e, 500 * US, "across", 100 * US, 200 * US, (0.5, 0.25), "lab bench, 2026")
    # the inside level the slower after its share: 120 / 0.5 = 240 us against 10 / 0.25 = 40 us;
    # bulk 300 + 240 = 540 us; low latency 100 + max(960, 40) = 1060 us
    e = expected_time(pred("all_reduce", 120 * US, 10 * US), LAB)
    check(e, 540 * US, "across", 100 * US, 240 * US, (0.5, 0.25), "lab bench, 2026")
    # tiny: bulk 300 + max(0.0625 / 0.5, 0.1 / 0.25) = 300.4 us; low latency 100 +
    # max(0.0625 / 0.125, 0.1 / 0.25) = 100.5 us (the inside level's small share limits)
    e = expected_time(pred("all_reduce", 0.0625 * US, 0.1 * US), LAB)
    check(e, 100.5 * US, "across", 100 * US, 0.4 * US, (0.5, 0.25), "lab bench, 2026")


def test_a_level_without_factors_runs_at_the_roofline_and_the_source_names_it():
    # reduce_scatter: no inside factor (share 1), across share 0.5, floor 60 us, no setup (the
    # floor); inside 100 us / 1 = 100 us, across 30 / 0.5 = 60 us: bulk 60 + 100 = 160 us, low
    # latency the same (no small share): 160 us
    e = expected_time(pred("reduce_scatter", 100 * US, 30 * US), LAB)
    why = "lab has no expected factors for reduce_scatter inside: the roofline's own terms stand in there"
    check(e, 160 * US, "across", 60 * US, 100 * US, (1.0, 0.5), why)
    # one level, inside: no factor there, so the roofline's latency term is the floor and setup:
    # 7 + 30 = 37 us
    e = expected_time(pred("reduce_scatter", bw_s=30 * US), LAB)
    check(e, 37 * US, "inside", 7 * US, 30 * US, (1.0,), why)


def test_a_collective_without_any_factor_is_the_roofline_at_both_levels_and_names_both():
    # all_to_all: floor = setup = the latency term 7 us; 7 + max(20, 30) = 37 us
    e = expected_time(pred("all_to_all", 20 * US, 30 * US), LAB)
    why = "lab has no expected factors for all_to_all across and inside: the roofline's own terms stand in there"
    check(e, 37 * US, "across", 7 * US, 30 * US, (1.0, 1.0), why)


def test_an_entry_without_a_source_says_so_where_every_factor_is_there():
    bare = Hardware(name="lab", kind="gpu", expected=LAB.expected)
    e = expected_time(pred("all_reduce", bw_s=80 * US), bare)
    check(e, 200 * US, "inside", 10 * US, 160 * US, (0.5,), "no expected factors")


def test_a_group_of_one_moves_nothing_and_names_its_outer_level():
    zero = dict(latency_s=0.0, time_s=0.0)
    check(expected_time(pred("all_reduce", **zero), LAB), 0.0, "inside", 0.0, 0.0, (), "no communication")
    check(expected_time(pred("all_reduce", 0.0, 0.0, **zero), LAB), 0.0, "across", 0.0, 0.0, (), "no communication")


def test_the_dictionary_predict_prints_names_every_field():
    e = expected_time(pred("all_reduce", 80 * US, 50 * US), LAB)
    d = e.to_dict()
    assert d == {
        "expected_time_s": e.time_s,
        "expected_level": "across",
        "expected_floor_s": e.floor_s,
        "expected_bandwidth_time_s": e.bandwidth_time_s,
        "expected_bw_shares": [0.5, 0.25],
        "expected_source": "lab bench, 2026",
    }
    assert (d["expected_floor_s"], d["expected_bandwidth_time_s"]) == pytest.approx((100 * US, 200 * US), rel=1e-12)
