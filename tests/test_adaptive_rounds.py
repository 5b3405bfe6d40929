"""Adaptive rounds: a point stops after 2 rounds when they agree (Cochran's Q at 99%) and its
interval meets timing.target_rel_ci; it runs every round timing.rounds asks for only when they
disagree or the interval is wider. result.json (timing.rounds_rule), summary.csv and the
report say how many rounds each point took and why. (The loop estimator's rounds, timed again
only where round 1's disagreed with the source estimator: tests/test_loop_rule.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

from runner.sweep import rounds as rounds_mod
from runner.sweep.rounds import MIN_ROUNDS, rounds_rule
from runner.worker.timing import summarise

TIMING = {"seed": 0, "estimator": "step", "target_rel_ci": 0.05}
TIGHT = (np.linspace(0.99, 1.01, 21) * 1e-3).tolist()  # median 1 ms, +-1%
WIDE = (np.linspace(0.5, 1.5, 21) * 1e-3).tolist()  # median 1 ms, spread +-50%


def _timing(*rounds: list[float], before: dict | None = None) -> dict:
    """result.json's timing for step rounds with these samples (and the rule as it stood)."""
    t = {"rounds": [{"round": i + 1, "step": {"samples_s": s}} for i, s in enumerate(rounds)]}
    t.update(summarise(t, TIMING, "cpu"))
    if before is not None:
        t["rounds_rule"] = before
    return t


def test_two_agreeing_rounds_within_the_target_stop():
    t = _timing(TIGHT, TIGHT)
    rel = t["summary"]["rel_ci_halfwidth"]
    assert not t["summary"]["rounds_disagree"] and rel <= 0.01
    assert rounds_rule(t, 5, 0.05) == {
        "rounds": 2,
        "wanted": 5,
        "stopped": True,
        "why": f"stopped after 2 of 5 rounds: they agree (Cochran's Q, 99%) and the interval ±{100 * rel:.1f}% "
        "meets the target ±5%",
    }


def test_two_rounds_a_tenth_apart_disagree_though_their_interval_meets_the_target():
    # Cochran's Q with 2 rounds is a z-test of their log medians: rounds at 1 ms and 1.08 ms,
    # each known to +-1%, are 8% apart where their intervals allow about 3.6%
    t = _timing(TIGHT, [1.08 * x for x in TIGHT])
    rel = t["summary"]["rel_ci_halfwidth"]
    assert t["summary"]["rounds_disagree"] and rel <= 0.05
    rule = rounds_rule(t, 5, 0.05)
    assert rule["stopped"] is False
    assert rule["why"] == "2 of 5 rounds so far: the step rounds disagree (Cochran's Q, 99%)"


def test_rounds_that_disagree_run_on_and_the_last_says_why():
    slow = [2 * x for x in TIGHT]  # a round at 2 ms beside one at 1 ms: drift, not noise
    t = _timing(TIGHT, slow)
    assert t["summary"]["rounds_disagree"]
    rule = rounds_rule(t, 5, 0.05)
    rel = t["summary"]["rel_ci_halfwidth"]
    why = f"the step rounds disagree (Cochran's Q, 99%); interval ±{100 * rel:.1f}%, wider than the target ±5%"
    assert rule == {"rounds": 2, "wanted": 5, "stopped": False, "after_min": why, "why": f"2 of 5 rounds so far: {why}"}
    # judged once: rounds 3 and 4 that agree with round 1 do not stop it (no optional stopping)
    later = rounds_rule(_timing(TIGHT, slow, TIGHT, TIGHT, before=rule), 5, 0.05)
    assert later["stopped"] is False and later["why"] == f"4 of 5 rounds so far: {why}"
    done = rounds_rule(_timing(TIGHT, slow, TIGHT, TIGHT, TIGHT, before=later), 5, 0.05)
    # the last round's sentence keeps why the point ran on after 2, whatever the 5 rounds say
    assert done["stopped"] is False and done["why"] == f"all 5 rounds: after 2, {why}"


def test_agreeing_rounds_with_a_wide_interval_run_on():
    t = _timing(WIDE, WIDE)
    rel = t["summary"]["rel_ci_halfwidth"]
    assert not t["summary"]["rounds_disagree"] and rel > 0.05
    rule = rounds_rule(t, 5, 0.05)
    assert rule["stopped"] is False
    assert rule["why"] == f"2 of 5 rounds so far: interval ±{100 * rel:.1f}%, wider than the target ±5%"
    # a target the interval meets stops the same rounds
    assert rounds_rule(t, 5, rel)["stopped"] is True


def test_no_early_stop_before_two_rounds_or_when_two_are_all_asked_for():
    assert MIN_ROUNDS == 2
    one = rounds_rule(_timing(TIGHT), 5, 0.05)
    assert one == {"rounds": 1, "wanted": 5, "stopped": False, "why": "1 of 5 rounds so far"}
    two = rounds_rule(_timing(TIGHT, TIGHT), 2, 0.05)
    assert two == {"rounds": 2, "wanted": 2, "stopped": False, "why": "timing.rounds=2: every round asked for"}
    # three asked for: two that agree stop one round short
    assert rounds_rule(_timing(TIGHT, TIGHT), 3, 0.05)["stopped"] is True


def test_a_point_without_a_headline_time_runs_every_round():
    t = _timing(TIGHT, TIGHT)
    t["summary"] = {"n": 0}  # device source and no device samples: nothing to judge by
    rule = rounds_rule(t, 5, 0.05)
    assert rule["stopped"] is False and "no interval" in rule["why"]


def _point(root, name: str, stopped: bool, status: str = "ok"):
    d = root / name
    d.mkdir()
    t = {"rounds": [{"round": r} for r in (1, 2)], "rounds_rule": {"stopped": stopped}}
    (d / "result.json").write_text(json.dumps({"status": status, "timing": t}))
    return d


def test_a_stopped_point_takes_no_more_rounds(tmp_path):
    point = _point(tmp_path, "0_a", stopped=True)
    # no worker is asked: the point is done (spec={} would fail if it were)
    assert rounds_mod.add_round(point, 3, spec={}) is False


def test_interleave_runs_rounds_after_the_second_only_for_points_that_need_them(tmp_path, monkeypatch):
    done, going = _point(tmp_path, "0_a", True), _point(tmp_path, "1_b", False)
    failed = _point(tmp_path, "2_c", False, "failed")
    calls = []
    monkeypatch.setattr(rounds_mod, "add_round", lambda d, r, spec=None, specs=None, records=None: calls.append((d.name, r)) or True)
    assert rounds_mod.interleave([done, going, failed], 5, seed=0) == 6
    assert sorted(calls) == sorted([(n, 2) for n in ("0_a", "1_b", "2_c")] + [("1_b", r) for r in (3, 4, 5)])


def test_summary_and_report_say_how_many_rounds_a_point_took():
    from analysis.report.sweep_sections import _rounds_taken

    why = "stopped after 2 of 5 rounds: they agree (Cochran's Q, 99%) and the interval ±1.0% meets the target ±5%"
    r = {"timing": {"rounds": [{}, {}], "rounds_rule": {"rounds": 2, "wanted": 5, "stopped": True, "why": why}}}
    assert _rounds_taken(r) == "2 of 5: they agree (Cochran's Q, 99%) and the interval ±1.0% meets the target ±5%"
    from analysis.runs.record import ONE_ROUND

    # one round and no rule (timing=quick): the report says what one round leaves out
    assert _rounds_taken({"timing": {"rounds": [{}]}}) == f"1: {ONE_ROUND}"


@pytest.mark.parametrize("n", [2, 5])
def test_the_measurement_text_counts_the_points_that_stopped_early(n):
    import pandas as pd

    from analysis.report.measurement import _rounds_words

    pts = pd.DataFrame({"time_rounds": [2, n, 5], "rounds_wanted": [5, 5, 5]})
    words = _rounds_words(pts, pts["time_rounds"])
    stopped = 2 if n == 2 else 1
    assert words.startswith(f"2 to 5 rounds of the 5 asked for ({stopped} point(s) stopped after 2,")
    # a sweep written when points stopped after 3 says 3
    old = pd.DataFrame({"time_rounds": [3, 5], "rounds_wanted": [5, 5]})
    assert "(1 point(s) stopped after 3," in _rounds_words(old, old["time_rounds"])
