"""The timing loops and the estimators' summary by exact expectations (issue 30, round two's
mutation check): seeded samples and a fake clock, so every count, stop reason and second is
known by hand; both sides of each threshold (the warm-up's 10%, min_iters, the target, the
budget, the loop's half budget), and summaries of rounds with the three estimators at once.

The loop estimator as a cross-check (issue 38): it runs in round 1, and in later rounds only
where round 1's loop disagreed with the source estimator (their 95% intervals do not overlap);
result.json's timing.loop_rule, summary.csv's loop_rounds and loop_why say so per point. Exact
rules with injected rounds, a round sent to a stand-in worker, a round timed without its loop,
and one real small sweep.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from round_point import TIMING as ROUND_TIMING
from round_point import Point

from analysis.runs.record import LoopCheck, Round, Samples, Timing
from analysis.statistics.stats import combine_rounds, median_ci
from runner.sweep import rounds as rounds_mod
from runner.worker.estimators import loop_rule, summarise
from runner.worker.timing import given_Ks, time_loop, time_step, warm_up


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
    # a later round of a kept point (runner.worker.point_round.retime): one warm-up step, then samples,
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
# three different rounds with one median: the spread between their medians (none) leaves the
# interval to the bootstrap, which depends on the seed (stats.few_rounds_halfwidth, t over the
# rounds' medians, is deterministic and would set it for rounds apart)
_BASE = _RNG.lognormal(0, 0.3, 401) * 1e-3  # many samples: bootstrap percentiles fall between order statistics
_MID = float(np.median(_BASE))
A = _BASE.tolist()
B = [x * 1.5 if x > _MID else x for x in A]
C = [x * 0.7 if x < _MID else x for x in A]


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
    return Timing.from_json({"rounds": rounds, "device": {"samples_s": A}})


def test_every_estimator_combines_its_own_rounds_with_the_recorded_seed():
    out = summarise(_record(), {"seed": 7, "estimator": "loop"}, "cpu")
    est = {name: e.to_json() for name, e in out.estimators.items()}
    assert est["step"] == combine_rounds([A, B, C, A], 7)
    # the loop's rounds are those with a loop; its K is the last round's
    assert est["loop"] == dict(combine_rounds([B, A, C], 7), K=16)
    # round 1's device samples are the point's own trace's; later rounds' where they have some
    assert est["device"] == combine_rounds([A, C, B], 7)
    assert out.estimator == "loop" and out.summary.to_json() == est["loop"]
    # the seed matters: the same rounds with seed 0 give another interval
    for name, rounds in (("step", [A, B, C, A]), ("loop", [B, A, C]), ("device", [A, C, B])):
        zero = combine_rounds(rounds, 0)
        assert (zero["ci_low_s"], zero["ci_high_s"]) != (est[name]["ci_low_s"], est[name]["ci_high_s"]), name
    # a fault count of 0 counts: the median of 10, 0 and 30
    assert out.page_faults_per_step == 10.0
    # a last round without a loop (XLA kept none): K stays that of the last round with one
    record = _record()
    record = record.with_(rounds=(*record.rounds, Round.of(step=Samples.of(samples_s=B))))
    loop = summarise(record, {"seed": 7}, "cpu").estimate("loop")
    assert loop.to_json() == dict(combine_rounds([B, A, C], 7), K=16)


def test_without_a_seed_or_an_estimator_it_is_seed_0_and_auto():
    out = summarise(_record(), {}, "cpu")
    assert out.estimate("step").to_json() == combine_rounds([A, B, C, A], 0)
    assert out.estimate("device").to_json() == combine_rounds([A, C, B], 0)
    assert (out.estimator, out.estimator_reason) == ("step", "timing.estimator=auto on cpu")
    tpu = summarise(_record(), {"seed": None}, "tpu")
    assert (tpu.estimator, tpu.estimator_reason) == ("device", "timing.estimator=auto on tpu")
    assert tpu.summary.to_json() == combine_rounds([A, C, B], 0) and tpu.missing_reason is None
    bare = summarise(Timing.from_json({"rounds": [{"step": {"samples_s": A}}]}), {}, "cpu")
    assert bare.page_faults_per_step is None


def test_why_an_estimator_is_missing_names_four_instructions_then_counts_the_rest():
    def why(names):
        record = {"rounds": [{"step": {"samples_s": A}}], "device": {"samples_s": [], "instructions": names}}
        return summarise(Timing.from_json(record), {"estimator": "device"}, "cpu").missing_reason

    assert why(["a", "b", "c", "d"]) == "no device time: the trace held no execution of a, b, c, d"
    assert why(["a", "b", "c", "d", "e"]) == "no device time: the trace held no execution of a, b, c, d and 1 more"
    loop = summarise(Timing.from_json({"rounds": [{"step": {"samples_s": A}}]}), {"estimator": "loop"}, "cpu")
    assert loop.estimator_reason == "timing.estimator=loop; no loop samples (timing.loop=false), so step"


STEP_1MS = (np.linspace(0.98, 1.02, 21) * 1e-3).tolist()  # round 1's steps: 0.98-1.02 ms


def _rule_record(loop: list[float] | None, step=STEP_1MS, device=None, later: int = 0) -> Timing:
    """A timing record whose round 1 has these step and loop samples (``device``: the point's
    own trace's), and ``later`` more rounds of steps alone."""
    first = {"round": 1, "step": {"samples_s": step}}
    if loop is not None:
        first["loop"] = {"samples_s": loop, "K": 8, "Ks": [2, 8]}
    out = {"rounds": [first] + [{"round": r + 2, "step": {"samples_s": step}} for r in range(later)]}
    if device is not None:
        out["device"] = {"samples_s": device}
    return Timing.from_json(out)


def _step_round(r: int, samples: list[float], **more) -> Round:
    return Round.of(round=r, step=Samples.of(samples_s=samples), **more)


def test_a_loop_whose_interval_overlaps_the_steps_runs_in_round_1_only():
    # the loop's slopes 0.97-1.01 ms overlap the step's interval: they agree
    loop = (np.linspace(0.97, 1.01, 9) * 1e-3).tolist()
    ratio = float(np.median(loop) / np.median(STEP_1MS))
    assert loop_rule(_rule_record(loop), "step").to_json() == {
        "source": "step",
        "loop_over_source": pytest.approx(ratio),
        "rerun": False,
        "why": f"round 1's loop interval overlaps the step's (loop/step {ratio:.2f}): round 1 only",
    }


@pytest.mark.parametrize("scale,side", [(0.4, "below"), (1.5, "above")])
def test_a_loop_apart_from_the_step_runs_again_in_round_2_and_says_on_which_side(scale, side):
    loop = [scale * 1e-3] * 6
    rule = loop_rule(_rule_record(loop), "step")
    assert rule.rerun is True and rule.last_round == 2
    assert rule.why == f"round 1's loop interval lies {side} the step's (loop/step {scale:.2f}): timed again in round 2"


def test_intervals_that_touch_overlap():
    # the loop's highest order statistic is exactly the step's lowest: one point in common
    lo, _ = median_ci(STEP_1MS)
    loop = [lo * 0.9] * 4 + [lo] * 2  # 6 slopes: their interval is (min, max) ranks 0 and 5
    assert median_ci(loop)[1] == lo
    assert loop_rule(_rule_record(loop), "step").rerun is False
    nudged = loop[:-2] + [lo * 0.999] * 2
    assert loop_rule(_rule_record(nudged), "step").rerun is True


def test_on_a_tpu_the_loop_is_held_to_round_1s_device_samples():
    loop = [0.5e-3] * 6
    # the point's own trace (record["device"]) agrees with the loop; the step does not
    agree = _rule_record(loop, device=[0.5e-3] * 8)
    assert loop_rule(agree, "device").rerun is False
    assert loop_rule(agree, "device").why.endswith("overlaps the device's (loop/device 1.00): round 1 only")
    # a later round's device samples do not count: the rule is round 1's
    agree = agree.with_(rounds=(*agree.rounds, _step_round(2, STEP_1MS, device=Samples.of(samples_s=[2e-3] * 8))))
    assert loop_rule(agree, "device").rerun is False
    # no device time in round 1 (no execution in the trace): nothing to check the loop against
    assert loop_rule(_rule_record(loop, device=[]), "device").to_json() == {
        "source": "device",
        "rerun": True,
        "last_round": None,
        "why": "round 1 has no device time to check the loop against: timed in every round",
    }


def test_the_loop_as_the_source_or_without_samples():
    loop = [0.5e-3] * 6
    assert loop_rule(_rule_record(loop), "loop").to_json() == {
        "source": "loop",
        "rerun": True,
        "last_round": None,
        "why": "the loop is the source estimator: timed in every round",
    }
    # timing.loop=false: no loop in round 1, none later
    assert loop_rule(_rule_record(None), "step").to_json() == {
        "source": "step",
        "rerun": False,
        "why": "round 1 has no loop samples (timing.loop=false)",
    }
    # a loop XLA did not keep: the check's words
    kept_none = _rule_record(None).with_(loop_check=LoopCheck.of(why="XLA unrolled the loop"))
    assert loop_rule(kept_none, "step").why == "round 1 has no loop samples (XLA unrolled the loop)"


def test_summarise_decides_on_round_1_whatever_the_later_rounds_show():
    loop = [0.4e-3] * 6
    one = summarise(_rule_record(loop), {"seed": 0}, "cpu")
    # later step rounds at 0.4 ms would make the combined step overlap the loop: the rule stays
    drifted = _rule_record(loop)
    drifted = drifted.with_(rounds=(*drifted.rounds, *(_step_round(r, [0.4e-3] * 21) for r in (2, 3, 4))))
    assert summarise(drifted, {"seed": 0}, "cpu").loop_rule.to_json() == one.loop_rule.to_json()
    assert one.loop_rule.rerun is True
    # the source the rule names is the one summarise picks: auto on a GPU is device
    gpu = summarise(_rule_record(loop, device=[0.4e-3] * 8), {"seed": 0}, "gpu")
    assert gpu.estimator == "device" and gpu.loop_rule.source == "device"
    assert gpu.loop_rule.rerun is False


def test_a_loop_in_round_1_only_is_that_rounds_interval_beside_every_round_of_the_step():
    rng = np.random.default_rng(5)
    loop1 = (rng.lognormal(0, 0.05, 12) * 1e-3).tolist()
    steps = [(rng.lognormal(0, 0.05, 20) * m * 1e-3).tolist() for m in (1.0, 1.3, 1.1)]
    record = {
        "rounds": [
            {"step": {"samples_s": steps[0]}, "loop": {"samples_s": loop1, "K": 8, "empty_loop_s": 1e-6}},
            {"step": {"samples_s": steps[1]}},
            {"step": {"samples_s": steps[2]}},
        ]
    }
    out = summarise(Timing.from_json(record), {"seed": 3}, "cpu")
    loop = out.estimate("loop")
    # one round: its own order-statistic interval, not a bootstrap over rounds it was not in
    assert loop.rounds == 1 and loop.n == 12 and loop.K == 8
    assert (loop.ci_low_s, loop.ci_high_s) == median_ci(loop1)
    assert loop.median_s == pytest.approx(float(np.median(loop1)))
    assert loop.empty_loop_s == 1e-6
    assert out.estimate("step").to_json() == combine_rounds(steps, 3) and out.estimate("step").rounds == 3
    # timed again in round 3: combined over the two rounds that have it
    loop3 = [1.2 * x for x in loop1]
    record["rounds"][2]["loop"] = {"samples_s": loop3, "K": 8}
    again = summarise(Timing.from_json(record), {"seed": 3}, "cpu").estimate("loop")
    assert again.rounds == 2 and {
        k: v for k, v in again.to_json().items() if k not in ("K", "empty_loop_s", "empty_loop_share", "launch_bound")
    } == combine_rounds([loop1, loop3], 3)


def test_the_report_says_at_how_many_points_the_loop_was_timed_again():
    from analysis.report.measurement import loop_rounds_text

    pts = pd.DataFrame(
        {
            "loop_rounds": [5, 1, 2, 1, None],  # the last point has no loop (timing.loop=false)
            "time_rounds": [5, 5, 2, 1, 5],  # the fourth had no later round: not counted
        }
    )
    assert loop_rounds_text(pts, "step") == (
        "The loop is a cross-check of the *step*: timed in round 1, and again in round 2 at 2 of 3 "
        "point(s), those where round 1's loop interval and the step's did not overlap (`loop_why` in "
        "summary.csv says which way)."
    )
    # the loop as the estimator, one round everywhere, or a summary from before the columns: nothing
    assert loop_rounds_text(pts, "loop") == ""
    assert loop_rounds_text(pts.assign(time_rounds=1), "step") == ""
    assert loop_rounds_text(pts.drop(columns="loop_rounds"), "step") == ""
    # points whose long step left the loop out in round 1 (loop_why names the key) are counted apart
    why = [None, None, None, None, "round 1 has no loop samples (left out: round 1's step took 35 ms, at least "
           "timing.loop_check_below_s = 20 ms, and ...)"]  # fmt: skip
    assert loop_rounds_text(pts.assign(loop_why=why), "step").endswith(
        "(`loop_why` in summary.csv says which way). Round 1 left the loop out at 1 point(s) whose step took at "
        "least timing.loop_check_below_s: all a loop can read off a step that long is a call's fixed cost, lost in it."
    )
    only_long = pd.DataFrame({"loop_rounds": [None, None], "time_rounds": [5, 5], "loop_why": [why[-1]] * 2})
    assert loop_rounds_text(only_long, "step") == (
        "Round 1 left the loop out at 2 point(s) whose step took at least timing.loop_check_below_s: all a loop "
        "can read off a step that long is a call's fixed cost, lost in it."
    )


# ---------------------------------------------------------------- the parent sends the decision
class _Worker:
    def __init__(self):
        self.calls = []

    def run(self, spec, point_dir, timeout, **kw):
        self.calls.append((point_dir.name, kw["round"], kw["loop"]))
        rnd = {"round": kw["round"], "step": {"samples_s": [kw["round"] * 1e-3] * 5}}
        if kw["loop"]:
            rnd["loop"] = {"samples_s": [0.3e-3] * 3, "K": 8, "Ks": [2, 8]}
        return {"status": "ok", "round": rnd}


def _point(root, name: str, loop: list[float]) -> object:
    d = root / name
    d.mkdir()
    t = summarise(_rule_record(loop, step=[1e-3] * 5), {"seed": 0, "estimator": "auto"}, "cpu").to_json()
    result = {
        "status": "ok",
        "config": {"timing": {"rounds": 3, "target_rel_ci": 0.05, "estimator": "auto", "seed": 0}},
        "environment": {"backend": "cpu"},
        "timing": t,
    }
    (d / "result.json").write_text(json.dumps(result))
    return d


def test_later_rounds_time_the_loop_only_for_the_points_whose_round_1_disagreed(tmp_path, monkeypatch):
    agreed = _point(tmp_path, "0_agreed", [1e-3] * 3)
    apart = _point(tmp_path, "1_apart", [0.3e-3] * 3)
    worker = _Worker()
    monkeypatch.setattr(
        rounds_mod,
        "build_spec",
        lambda cfg: {"hardware": "h", "distributed": "d", "trace": {"gpu_command_buffers": False}},
    )
    monkeypatch.setattr(rounds_mod, "process_env", lambda *a: a)
    monkeypatch.setattr(rounds_mod, "get_worker", lambda env: worker)
    monkeypatch.setattr(rounds_mod, "discard_worker", lambda: None)
    # rounds of 1, 2, 3 and 4 ms (_Worker): they disagree, so both points run all 4
    assert rounds_mod.interleave([agreed, apart], 4) == 6
    # the loop apart from the step in round 1 is timed again in round 2 (estimators.LOOP_LAST_ROUND), no later
    assert sorted(worker.calls) == [
        ("0_agreed", 2, False),
        ("0_agreed", 3, False),
        ("0_agreed", 4, False),
        ("1_apart", 2, True),
        ("1_apart", 3, False),
        ("1_apart", 4, False),
    ]
    for d, rerun in ((agreed, False), (apart, True)):
        t = json.loads((d / "result.json").read_text())["timing"]
        assert t["loop_rule"]["rerun"] is rerun
        assert [("loop" in r) for r in t["rounds"]] == [True, rerun, False, False]
        assert t["estimators"]["loop"]["rounds"] == (2 if rerun else 1)


# ---------------------------------------------------------------- the worker's round
def test_a_round_without_its_loop_asks_nothing_of_the_loop_programs():
    from runner.worker.point_round import time_round

    point = Point()
    out = time_round(point, {"timing": ROUND_TIMING}, 2, K=[2, 8], loop=False)
    assert point.loop.asked == [] and "loop" not in out.to_json() and "loop_compile_s" not in out.to_json()
    assert len(out.step.samples_s) == 5
    # the default (and loop=True) asks the loop programs for round 1's trip counts
    out = time_round(point, {"timing": ROUND_TIMING}, 3, K=[2, 8])
    assert point.loop.asked == [[2, 8]] and out.loop_compile_s == 0.125


def test_the_worker_leaves_the_loop_out_of_a_later_round_when_the_parent_says_so(compose_cfg, tmp_path):
    # the parent's word reaches the worker process's round (serve -> retime -> time_round)
    from runner.config.jaxenv import process_env
    from runner.config.spec import build_spec
    from runner.sweep.pool import get_worker

    spec = build_spec(compose_cfg(["op.size_bytes=4KiB", "timing.budget_s=0.1", "trace.iters=2"]))
    worker = get_worker(process_env(spec["hardware"], spec["distributed"], spec["trace"]["gpu_command_buffers"]))
    first = worker.run(spec, tmp_path, 300.0, kind="measure")
    assert first["status"] == "ok", first.get("error")
    K = first["record"]["timing"]["rounds"][0]["loop"]["Ks"]
    without = worker.run(spec, tmp_path, 300.0, kind="retime", round=2, K=K, loop=False)["round"]
    again = worker.run(spec, tmp_path, 300.0, kind="retime", round=3, K=K, loop=True)["round"]
    assert "loop" not in without and len(without["step"]["samples_s"]) >= 5
    assert again["loop"]["Ks"] == K and len(again["loop"]["samples_s"]) >= 3
    # round 1 settles its warm-up (at least 2 + 2 steps); a later round of the kept point takes one
    assert first["record"]["timing"]["rounds"][0]["step"]["warmup_iters"] >= 4
    assert without["inputs"]["placed"] == again["inputs"]["placed"] == "kept"
    assert without["step"]["warmup_iters"] == again["step"]["warmup_iters"] == 1
    # and its loop warms up with the short call alone, where round 1 warmed up with both
    assert (first["record"]["timing"]["rounds"][0]["loop"]["warmup_calls"], again["loop"]["warmup_calls"]) == (2, 1)


# ---------------------------------------------------------------- one real sweep
def test_a_real_sweep_times_the_loop_again_only_where_round_1_disagreed(tmp_path):
    from shardlab_cli import runner

    out = tmp_path / "sweep"
    # 1 KiB: on CPU the step holds a dispatch the loop cancels (loop/step about 0.4 here), so
    # their intervals are usually apart; 32 MiB: the two usually overlap. The test holds the
    # rule to whichever way round 1 went.
    runner(
        "-m",
        "op=all_gather",
        "op.size_bytes=1KiB,32MiB",
        f"hydra.sweep.dir={out}",
        "timing.rounds=3",
        "timing.budget_s=0.2",
        "trace.iters=2",
        "timing.loop_check_below_s=null",  # a 32 MiB step may pass 20 ms: its loop must run here
        expect=0,
        timeout=600,
    )
    summary = pd.read_csv(out / "summary.csv")
    summary = summary[summary["is_target"]].set_index("size_bytes")  # a point's row, not its other collectives
    seen = set()
    for f in sorted(out.glob("*/result.json")):
        r = json.loads(f.read_text())
        t = r["timing"]
        rule = t["loop_rule"]
        # the rule on disk is the one round 1's samples give, against the source summarise picked
        assert t["estimator"] == "step" and rule == loop_rule(Timing.from_json(t), "step").to_json()
        step1, loop1 = (median_ci(t["rounds"][0][k]["samples_s"]) for k in ("step", "loop"))
        assert rule["rerun"] is (loop1[0] > step1[1] or loop1[1] < step1[0])
        # a loop in round 2 exactly where round 1 disagreed, in no round after it
        assert ["loop" in x for x in t["rounds"][1:]] == [rule["rerun"]] + [False] * (len(t["rounds"]) - 2), rule
        row = summary.loc[r["spec"]["size_bytes"]]
        assert row["loop_why"] == rule["why"] and row["rounds_why"] == t["rounds_rule"]["why"]
        assert row["loop_rounds"] == (min(2, row["time_rounds"]) if rule["rerun"] else 1)
        seen.add(rule["rerun"])
    md = (out / "report" / "report.md").read_text()
    assert "rounds of the 3 asked for" in md or "3 round(s)" in md
    again = sum(1 for x in out.glob("*/result.json") if json.loads(x.read_text())["timing"]["loop_rule"]["rerun"])
    assert f"timed in round 1, and again in round 2 at {again} of 2 point(s)" in md
    print("loop re-run:", seen)  # which branches this run took (pytest -s shows it)
