"""The timing loops and the estimators' summary by exact expectations (issue 30, round two's
mutation check): seeded samples and a fake clock, so every count, stop reason and second is
known by hand; both sides of each threshold (the warm-up's 10%, min_iters, the target, the
budget, the loop's half budget), and summaries of rounds with the three estimators at once."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.statistics.stats import combine_rounds
from runner.worker.timing import given_Ks, summarise, time_loop, time_step, warm_up


class Clock:
    """A clock that moves only when a sample or a call says so."""

    def __init__(self, start: float = 0.0):
        self.now = start

    def __call__(self) -> float:
        return self.now


def _samples(values, clock: Clock | None = None, tick: float = 0.0, calls: list | None = None):
    """A sampler that returns ``values`` in turn, records its arguments and moves ``clock``."""
    it = iter(values)

    def sample(step, k=1):
        if calls is not None:
            calls.append((step, k))
        if clock is not None:
            clock.now += tick
        return next(it)

    return sample


DOUBLING = [2.0**i for i in range(60)]  # never within 10% of the two before


# ---------------------------------------------------------------- warm-up
def test_warm_up_settles_at_exactly_ten_percent_and_not_before_min_iters():
    # medians of the last 2 against the 2 before: 11 against 10 is 10% exactly: settled
    assert len(warm_up("s", 4, 1e9, sample=_samples([10, 10, 11, 11, 11]), clock=Clock())) == 4
    # 11.5 against 10 is not; then 11.5 against 10.75 is
    assert len(warm_up("s", 4, 1e9, sample=_samples([10, 10, 11.5, 11.5, 11.5]), clock=Clock())) == 5
    # settled at 4, but min_iters 5 asks for one more
    assert len(warm_up("s", 5, 1e9, sample=_samples([10, 10, 11, 11, 11, 11]), clock=Clock())) == 5


def test_warm_up_stops_once_the_clock_is_past_its_limit_and_hands_the_step_on():
    clock, calls = Clock(), []
    # one second a sample, never settled: past 5 s at the 6th sample (5 s is not past)
    warm = warm_up("the step", 1, 5.0, sample=_samples(DOUBLING, clock, 1.0, calls), clock=clock)
    assert len(warm) == 6 and calls == [("the step", 1)] * 6


# ---------------------------------------------------------------- the step estimator
TIMING = {
    "warmup_min_iters": 1,
    "warmup_max_s": 1e9,
    "min_iters": 10,
    "max_iters": 100,
    "target_rel_ci": 0.05,
    "budget_s": 1e9,
    "iters_per_sample": 3,
}


def test_every_timed_sample_gets_the_step_and_iters_per_sample_and_the_phases_are_timed():
    clock, calls = Clock(100.0), []
    # warm-up: never settled, first checked at its 4th sample, 4 s in: past its 2.5 s; then
    # equal samples: an interval of 0 at the first check at min_iters (10)
    values = DOUBLING[:4] + [1.0] * 100
    out = time_step("S", dict(TIMING, warmup_max_s=2.5), sample=_samples(values, clock, 1.0, calls), clock=clock)
    assert calls == [("S", 1)] * 4 + [("S", 3)] * 10
    assert out["warmup_iters"] == 4 and out["warmup_s"] == 4.0 and out["timed_s"] == 10.0
    assert out["samples_s"] == [1.0] * 10 and out["stop_reason"] == "ci_tight"


def test_a_given_warm_up_runs_exactly_its_steps_however_unsettled():
    # a later round of a kept point (runner.worker.measure.retime): one warm-up step, then samples,
    # where the settling warm-up would have run until its 2.5 s were spent
    clock, calls = Clock(100.0), []
    out = time_step(
        "S",
        dict(TIMING, warmup_max_s=2.5),
        sample=_samples(DOUBLING[:1] + [1.0] * 100, clock, 1.0, calls),
        clock=clock,
        warm_iters=1,
    )
    assert calls == [("S", 1)] + [("S", 3)] * 10
    assert out["warmup_iters"] == 1 and out["warmup_s"] == 1.0 and out["samples_s"] == [1.0] * 10


def test_an_interval_exactly_at_the_target_stops_at_min_iters():
    # ten equal samples: an interval of 0, and a target of 0 is met (<=) at n = 10, not 15
    out = time_step("S", dict(TIMING, target_rel_ci=0.0), sample=_samples([1.0] * 200), clock=Clock())
    assert out["stop_reason"] == "ci_tight" and len(out["samples_s"]) == 10


@pytest.mark.parametrize(
    "min_iters,budget_s,n,reason",
    [(20, 3.0, 5, "budget (before min_iters)"), (5, 3.0, 5, "budget"), (10, 7.0, 10, "budget")],
)
def test_the_budget_stops_at_a_check_and_says_whether_min_iters_was_reached(min_iters, budget_s, n, reason):
    clock = Clock()
    noisy = [1.0] * 4 + [float(x) for x in np.tile([1, 100], 100)]
    timing = dict(TIMING, min_iters=min_iters, budget_s=budget_s)
    out = time_step("S", timing, sample=_samples(noisy, clock, 1.0), clock=clock)
    # the warm-up took 4 s; the budget counts from its end, checked every 5 samples
    assert (out["stop_reason"], len(out["samples_s"]), out["timed_s"]) == (reason, n, float(n))


# ---------------------------------------------------------------- the loop estimator
def _loop(budget_s: float, max_samples: int = 8, target: float = 0.0, kept: bool = False):
    """time_loop over calls that move the clock: the K1 call 1 s, the j-th K2 call 2 + j s
    (the warm-up's is the 0th), so the slopes (K2 - K1 = 2) are 2/2, 3/2, 4/2, ... and never
    agree."""
    clock, order, long_calls = Clock(), [], [0]

    def short():
        order.append("K1")
        clock.now += 1.0

    def long_():
        order.append("K2")
        clock.now += 2.0 + long_calls[0]
        long_calls[0] += 1

    timing = {"loop_max_samples": max_samples, "target_rel_ci": target, "budget_s": budget_s}
    return time_loop([short, long_], [2, 4], timing, clock=clock, kept=kept), order


def test_the_loop_stops_when_half_its_budget_is_spent_counting_from_after_the_warm_up():
    # the pairs take 4, 5, 6, 7 s: 4, 9, 15, 22 s after the warm-up's 3 s
    out, order = _loop(30.0)  # half is 15 s: reached (>=) at the 3rd pair
    assert (out["stop_reason"], out["samples_s"], out["timed_s"]) == ("budget", [1.0, 1.5, 2.0], 15.0)
    assert out["warmup_s"] == 3.0  # the warm-up's K1 (1 s) and K2 (2 s) calls, counted apart
    assert out["call_s"] == [[1.0, 3.0], [1.0, 4.0], [1.0, 5.0]]
    assert order == ["K1", "K2", "K1", "K2", "K2", "K1", "K1", "K2"]
    out, _ = _loop(36.0)  # half is 18 s: not at 15, at 22
    assert (out["stop_reason"], len(out["samples_s"]), out["timed_s"]) == ("budget", 4, 22.0)


def test_a_kept_points_later_round_warms_the_loop_up_with_its_short_call_only():
    out, order = _loop(30.0, kept=True)
    assert out["warmup_s"] == 1.0 and out["warmup_calls"] == 1 and order[:3] == ["K1", "K1", "K2"]
    # the long call's first timing is now a pair's: 2 s, then 3, 4, 5 s; the pairs (3, 4, 5, 6 s)
    # reach half the budget (15 s) at the 4th
    assert out["call_s"] == [[1.0, 2.0], [1.0, 3.0], [1.0, 4.0], [1.0, 5.0]]
    assert out["samples_s"] == [0.5, 1.0, 1.5, 2.0] and out["timed_s"] == 18.0


def test_the_loop_runs_to_its_sample_limit_when_neither_rule_stops_it():
    out, _ = _loop(1e9, max_samples=5)
    assert (out["stop_reason"], out["samples_s"]) == ("max_samples", [1.0, 1.5, 2.0, 2.5, 3.0])


def test_loop_slopes_that_agree_exactly_meet_a_target_of_zero():
    clock = Clock()

    def tick(s):
        def call():
            clock.now += s

        return call

    timing = {"loop_max_samples": 10, "target_rel_ci": 0.0, "budget_s": 1e9}
    out = time_loop([tick(1.0), tick(3.0)], [2, 4], timing, clock=clock)
    assert out["stop_reason"] == "ci_tight" and out["samples_s"] == [1.0, 1.0, 1.0]


def test_a_single_old_K_gives_a_whole_K1():
    assert given_Ks(10) == [2, 10] and isinstance(given_Ks(10)[0], int)
    assert given_Ks(22) == [5, 22] and isinstance(given_Ks(22)[0], int)


# ---------------------------------------------------------------- summarise
_RNG = np.random.default_rng(11)
# rounds that overlap: their bootstrap interval depends on the seed (well-apart rounds' would not)
A, B, C = ((_RNG.lognormal(0, 0.3, 15) * m * 1e-3).tolist() for m in (1.0, 1.1, 1.2))


def _record():
    rounds = [
        {"step": {"samples_s": A}, "loop": {"samples_s": B, "K": 8}, "page_faults_per_step": 10.0},
        {"step": {"samples_s": B}, "device": {"samples_s": C}, "page_faults_per_step": 0.0},
        {"step": {"samples_s": C}, "loop": {"samples_s": A, "K": 8}, "device": {}},
        {
            "step": {"samples_s": A},
            "loop": {"samples_s": C, "K": 16},
            "device": {"samples_s": B},
            "page_faults_per_step": 30.0,
        },
    ]
    return {"rounds": rounds, "device": {"samples_s": A}}


def test_every_estimator_combines_its_own_rounds_with_the_recorded_seed():
    out = summarise(_record(), {"seed": 7, "estimator": "loop"}, "cpu")
    est = out["estimators"]
    assert est["step"] == combine_rounds([A, B, C, A], 7)
    # the loop's rounds are those with a loop; its K is the last round's
    assert est["loop"] == dict(combine_rounds([B, A, C], 7), K=16)
    # round 1's device samples are the point's own trace's; later rounds' where they have some
    assert est["device"] == combine_rounds([A, C, B], 7)
    assert out["estimator"] == "loop" and out["summary"] == est["loop"]
    # the seed matters: the same rounds with seed 0 give another interval
    for name, rounds in (("step", [A, B, C, A]), ("loop", [B, A, C]), ("device", [A, C, B])):
        zero = combine_rounds(rounds, 0)
        assert (zero["ci_low_s"], zero["ci_high_s"]) != (est[name]["ci_low_s"], est[name]["ci_high_s"]), name
    # a fault count of 0 counts: the median of 10, 0 and 30
    assert out["page_faults_per_step"] == 10.0
    # a last round without a loop (XLA kept none): K stays that of the last round with one
    record = _record()
    record["rounds"].append({"step": {"samples_s": B}})
    assert summarise(record, {"seed": 7}, "cpu")["estimators"]["loop"] == dict(combine_rounds([B, A, C], 7), K=16)


def test_without_a_seed_or_an_estimator_it_is_seed_0_and_auto():
    out = summarise(_record(), {}, "cpu")
    assert out["estimators"]["step"] == combine_rounds([A, B, C, A], 0)
    assert out["estimators"]["device"] == combine_rounds([A, C, B], 0)
    assert (out["estimator"], out["estimator_reason"]) == ("step", "timing.estimator=auto on cpu")
    tpu = summarise(_record(), {"seed": None}, "tpu")
    assert (tpu["estimator"], tpu["estimator_reason"]) == ("device", "timing.estimator=auto on tpu")
    assert tpu["summary"] == combine_rounds([A, C, B], 0) and tpu["missing_reason"] is None
    bare = summarise({"rounds": [{"step": {"samples_s": A}}]}, {}, "cpu")
    assert bare["page_faults_per_step"] is None


def test_why_an_estimator_is_missing_names_four_instructions_then_counts_the_rest():
    def why(names):
        record = {"rounds": [{"step": {"samples_s": A}}], "device": {"samples_s": [], "instructions": names}}
        return summarise(record, {"estimator": "device"}, "cpu")["missing_reason"]

    assert why(["a", "b", "c", "d"]) == "no device time: the trace held no execution of a, b, c, d"
    assert why(["a", "b", "c", "d", "e"]) == "no device time: the trace held no execution of a, b, c, d and 1 more"
    loop = summarise({"rounds": [{"step": {"samples_s": A}}]}, {"estimator": "loop"}, "cpu")
    assert loop["estimator_reason"] == "timing.estimator=loop; no loop samples (timing.loop=false), so step"
