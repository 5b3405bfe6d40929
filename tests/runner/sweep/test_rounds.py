"""Adaptive rounds: a point stops after 2 rounds when they agree (Cochran's Q at 99%) and its
interval meets timing.target_rel_ci; it runs every round timing.rounds asks for only when they
disagree or the interval is wider. result.json (timing.rounds_rule), summary.csv and the
report say how many rounds each point took and why. (The loop estimator's rounds, timed again
only where round 1's disagreed with the source estimator: tests/runner/worker/test_timing.py.)

Later rounds by exact expectations (issue 30, round two's mutation check): the rounds rule's
words with two estimators at once and both sides of the early stop, a round appended by a
worker that is a stand-in (no JAX), and the order and log lines of the interleaved rounds.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import random

import numpy as np
import pytest
from scipy.special import stdtrit

from analysis.report.sweep_sections import _rounds_taken
from analysis.runs.record import ONE_ROUND, Estimate, Result, RoundsRule, Timing
from analysis.runs.rundir import ROUNDS_NAME, read_result, with_journal
from runner.sweep import rounds as rounds_mod
from runner.sweep.rounds import MIN_ROUNDS, rounds_rule
from runner.worker.estimators import summarise

TIMING = {"seed": 0, "estimator": "step", "target_rel_ci": 0.05}
TIGHT = (np.linspace(0.99, 1.01, 21) * 1e-3).tolist()  # median 1 ms, +-1%
WIDE = (np.linspace(0.5, 1.5, 21) * 1e-3).tolist()  # median 1 ms, spread +-50%


def _timing(*rounds: list[float], before: RoundsRule | None = None) -> Timing:
    """result.json's timing for step rounds with these samples (and the rule as it stood)."""
    t = Timing.from_json({"rounds": [{"round": i + 1, "step": {"samples_s": s}} for i, s in enumerate(rounds)]})
    t = summarise(t, TIMING, "cpu")
    return t.with_(rounds_rule=before) if before is not None else t


def test_two_agreeing_rounds_within_the_target_stop():
    t = _timing(TIGHT, TIGHT)
    rel = t.summary.rel_ci_halfwidth
    assert not t.summary.rounds_disagree and rel <= 0.01
    assert rounds_rule(t, 5, 0.05).to_json() == {
        "rounds": 2,
        "wanted": 5,
        "stopped": True,
        "why": f"stopped after 2 of 5 rounds: they agree (Cochran's Q, 99%) and the interval ±{100 * rel:.1f}% "
        "meets the target ±5%",
    }


def test_two_rounds_apart_by_more_than_their_own_intervals_disagree_though_their_interval_meets_the_target():
    # Cochran's Q with 2 rounds is a z-test of their log medians: rounds at 1 ms and 1.005 ms,
    # each known to +-0.05%, are 0.5% apart where their intervals allow about 0.1%; the
    # interval over the two, t(1) x 0.5% / 2 in log space, is +-3.2%, within the target
    tighter = (np.linspace(0.999, 1.001, 21) * 1e-3).tolist()
    t = _timing(tighter, [1.005 * x for x in tighter])
    rel = t.summary.rel_ci_halfwidth
    assert t.summary.rounds_disagree and rel == pytest.approx(math.sinh(stdtrit(1, 0.975) * math.log(1.005) / 2))
    assert rel <= 0.05
    rule = rounds_rule(t, 5, 0.05)
    assert rule.stopped is False
    assert rule.why == "2 of 5 rounds so far: the step rounds disagree (Cochran's Q, 99%)"


def test_two_rounds_a_tenth_apart_do_not_meet_a_5_percent_target():
    # two rounds 8% apart, each known to +-0.5%: the bootstrap over them spans about +-4%, but
    # two draws say little of the next (t with 1 degree of freedom: 12.7), so +-51%
    t = _timing(TIGHT, [1.08 * x for x in TIGHT])
    rel = t.summary.rel_ci_halfwidth
    assert rel == pytest.approx(math.sinh(stdtrit(1, 0.975) * math.log(1.08) / 2)) and 0.5 < rel < 0.52
    assert rounds_rule(t, 5, 0.05).stopped is False


def test_rounds_that_disagree_run_on_and_the_last_says_why():
    slow = [2 * x for x in TIGHT]  # a round at 2 ms beside one at 1 ms: drift, not noise
    t = _timing(TIGHT, slow)
    assert t.summary.rounds_disagree
    rule = rounds_rule(t, 5, 0.05)
    rel = t.summary.rel_ci_halfwidth
    why = f"the step rounds disagree (Cochran's Q, 99%); interval ±{100 * rel:.1f}%, wider than the target ±5%"
    assert rule.to_json() == {
        "rounds": 2,
        "wanted": 5,
        "stopped": False,
        "after_min": why,
        "why": f"2 of 5 rounds so far: {why}",
    }
    # judged once: rounds 3 and 4 that agree with round 1 do not stop it (no optional stopping)
    later = rounds_rule(_timing(TIGHT, slow, TIGHT, TIGHT, before=rule), 5, 0.05)
    assert later.stopped is False and later.why == f"4 of 5 rounds so far: {why}"
    done = rounds_rule(_timing(TIGHT, slow, TIGHT, TIGHT, TIGHT, before=later), 5, 0.05)
    # the last round's sentence keeps why the point ran on after 2, whatever the 5 rounds say
    assert done.stopped is False and done.why == f"all 5 rounds: after 2, {why}"


def test_agreeing_rounds_with_a_wide_interval_run_on():
    t = _timing(WIDE, WIDE)
    rel = t.summary.rel_ci_halfwidth
    assert not t.summary.rounds_disagree and rel > 0.05
    rule = rounds_rule(t, 5, 0.05)
    assert rule.stopped is False
    assert rule.why == f"2 of 5 rounds so far: interval ±{100 * rel:.1f}%, wider than the target ±5%"
    # a target the interval meets stops the same rounds
    assert rounds_rule(t, 5, rel).stopped is True


def test_no_early_stop_before_two_rounds_or_when_two_are_all_asked_for():
    assert MIN_ROUNDS == 2
    one = rounds_rule(_timing(TIGHT), 5, 0.05)
    assert one.to_json() == {"rounds": 1, "wanted": 5, "stopped": False, "why": "1 of 5 rounds so far"}
    two = rounds_rule(_timing(TIGHT, TIGHT), 2, 0.05)
    assert two.to_json() == {
        "rounds": 2,
        "wanted": 2,
        "stopped": False,
        "why": "timing.rounds=2: every round asked for",
    }
    # three asked for: two that agree stop one round short
    assert rounds_rule(_timing(TIGHT, TIGHT), 3, 0.05).stopped is True


def test_a_point_without_a_headline_time_runs_every_round():
    t = _timing(TIGHT, TIGHT)
    t = t.with_(summary=Estimate.of(n=0))  # device source and no device samples: nothing to judge by
    rule = rounds_rule(t, 5, 0.05)
    assert rule.stopped is False and "no interval" in rule.why


def _read(point) -> dict:
    """The point's record as every reader sees it: result.json with its journal's rounds."""
    return with_journal(json.loads((point / "result.json").read_text()), point)


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
    monkeypatch.setattr(
        rounds_mod, "add_round", lambda d, r, spec=None, specs=None, records=None: calls.append((d.name, r)) or True
    )
    assert rounds_mod.interleave([done, going, failed], 5, seed=0) == 6
    assert sorted(calls) == sorted([(n, 2) for n in ("0_a", "1_b", "2_c")] + [("1_b", r) for r in (3, 4, 5)])


def test_summary_and_report_say_how_many_rounds_a_point_took():
    why = "stopped after 2 of 5 rounds: they agree (Cochran's Q, 99%) and the interval ±1.0% meets the target ±5%"
    r = {"timing": {"rounds": [{}, {}], "rounds_rule": {"rounds": 2, "wanted": 5, "stopped": True, "why": why}}}
    assert (
        _rounds_taken(Result.from_json(r))
        == "2 of 5: they agree (Cochran's Q, 99%) and the interval ±1.0% meets the target ±5%"
    )
    # one round and no rule (timing=quick): the report says what one round leaves out
    assert _rounds_taken(Result.from_json({"timing": {"rounds": [{}]}})) == f"1: {ONE_ROUND}"


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


def _t(n: int, rel, disagree=(), agree=("step",), before: dict | None = None) -> Timing:
    """A timing record of ``n`` rounds whose headline interval is ``rel`` (None: none) and
    whose estimators named in ``disagree`` have rounds that disagree."""
    est = {name: {"rounds_disagree": False} for name in agree}
    est.update({name: {"rounds_disagree": True} for name in disagree})
    t = {"rounds": [{}] * n, "summary": {} if rel is None else {"rel_ci_halfwidth": rel}, "estimators": est}
    if before is not None:
        t["rounds_rule"] = before
    return Timing.from_json(t)


def test_two_estimators_that_disagree_are_named_in_order_and_a_missing_interval_says_so():
    rule = rounds_rule(_t(2, None, disagree=("step", "loop"), agree=("device",)), 6, 0.05)
    why = "the loop and step rounds disagree (Cochran's Q, 99%); interval no interval, wider than the target ±5%"
    assert rule.to_json() == {
        "rounds": 2,
        "wanted": 6,
        "stopped": False,
        "after_min": why,
        "why": f"2 of 6 rounds so far: {why}",
    }


def test_the_stop_sentence_shows_the_interval_to_a_tenth_of_a_percent():
    # 0.303 and a target of 0.5: both sides of the target's comparison are wide, the words exact
    rule = rounds_rule(_t(2, 0.303), 4, 0.5)
    assert rule.to_json() == {
        "rounds": 2,
        "wanted": 4,
        "stopped": True,
        "why": "stopped after 2 of 4 rounds: they agree (Cochran's Q, 99%) and the interval ±30.3% meets the "
        "target ±50%",
    }
    # exactly at the target stops; just above does not
    assert rounds_rule(_t(2, 0.05), 4, 0.05).stopped is True
    assert rounds_rule(_t(2, 0.0501), 4, 0.05).stopped is False
    # judged after round 2 only: a third round that meets everything does not stop a point then
    assert rounds_rule(_t(3, 0.01), 4, 0.05).stopped is False


def test_a_later_round_without_the_rule_of_round_two_gives_every_reason_now():
    # round 4 of a file whose rule never recorded after_min (an older file): today's reasons, joined
    rule = rounds_rule(_t(4, 0.2, disagree=("step",)), 5, 0.05)
    why = "the step rounds disagree (Cochran's Q, 99%); interval ±20.0%, wider than the target ±5%"
    assert rule.to_json() == {
        "rounds": 4,
        "wanted": 5,
        "stopped": False,
        "after_min": why,
        "why": f"4 of 5 rounds so far: {why}",
    }
    # round 5, with round 2's reason kept: the last sentence says why it ran on then
    last = rounds_rule(_t(5, 0.01, before={"after_min": "then"}), 5, 0.05)
    assert last.why == "all 5 rounds: after 2, then" and last.after_min == "then"
    # an older file with no judgement kept, whose rounds meet the rule now, says so
    assert rounds_rule(_t(4, 0.01), 5, 0.05).why == "4 of 5 rounds so far: no judgement after round 2 recorded"


def _write(root, name: str, status: str = "ok", rounds: int = 1, **extra) -> object:
    d = root / name
    d.mkdir()
    timing = {"rounds": [{"round": r + 1, "step": {"samples_s": [1e-3] * 5}} for r in range(rounds)], **extra}
    (d / "result.json").write_text(json.dumps({"status": status, "timing": timing}))
    return d


@pytest.mark.parametrize("status,rounds,round_no", [("failed", 1, 2), ("ok", 3, 3), ("ok", 4, 3)])
def test_a_failed_point_or_one_with_the_round_already_takes_none(tmp_path, status, rounds, round_no):
    point = _write(tmp_path, "p", status, rounds)
    before = (point / "result.json").read_text()
    # spec={} fails at its first key if the worker were asked
    assert rounds_mod.add_round(point, round_no, spec={}) is False
    assert (point / "result.json").read_text() == before


class _Worker:
    def __init__(self, reply):
        self.reply, self.calls = reply, []

    def run(self, spec, point_dir, timeout, **kw):
        self.calls.append((timeout, kw))
        return self.reply


def _ok_point(tmp_path):
    d = tmp_path / "p"
    d.mkdir()
    result = {
        "status": "ok",
        "config": {"timeout_s": 42, "timing": {"rounds": 5, "target_rel_ci": 0.05, "estimator": "step", "seed": 0}},
        "spec": {"op": "all_gather", "V_bytes": 8000, "group_size": 8},
        "environment": {"backend": "cpu"},
        "timing": {
            "rounds": [
                {
                    "round": 1,
                    "step": {"samples_s": [1e-3, 1e-3, 1e-3]},
                    "loop": {"Ks": [5, 20], "K": 20, "samples_s": [1e-3] * 3},
                }
            ]
        },
        "bandwidth": {},
        "phases_s": {"rounds_timing": 1.5},
    }
    (d / "result.json").write_text(json.dumps(result))
    return d


def test_a_round_is_appended_with_the_rule_the_bandwidth_and_the_phases(tmp_path, monkeypatch):
    point = _ok_point(tmp_path)
    loop = {"Ks": [5, 20], "K": 20, "samples_s": [5e-3] * 3}
    rnd = {"round": 2, "step": {"samples_s": [3e-3] * 3}, "loop": loop, "phases_s": {"timing": 0.25}}
    reply = {"status": "ok", "round": rnd}
    worker = _Worker(reply)
    spec = {"hardware": "h", "distributed": "d", "trace": {"gpu_command_buffers": "g"}}
    monkeypatch.setattr(rounds_mod, "process_env", lambda *a: a)
    monkeypatch.setattr(rounds_mod, "get_worker", lambda env: worker if env == ("h", "d", "g") else None)
    assert rounds_mod.add_round(point, 2, spec=spec) is True
    # round 1's trip counts, the point's timeout and the round's number go to the worker; a
    # file written before timing.loop_rule times the loop in every round
    assert worker.calls == [(42.0, {"kind": "retime", "round": 2, "K": [5, 20], "loop": True})]
    # round 2 of 5, not the point's last: result.json keeps round 1, the journal has the round
    # as one line, and a reader of the point sees the record with it
    assert [x["round"] for x in json.loads((point / "result.json").read_text())["timing"]["rounds"]] == [1]
    assert [json.loads(x)["round"]["round"] for x in (point / ROUNDS_NAME).read_text().splitlines()] == [2]
    r = _read(point)
    t = r["timing"]
    assert [x["round"] for x in t["rounds"]] == [1, 2] and "phases_s" not in t["rounds"][1]
    # the median of the rounds' medians (1 ms and 3 ms): 2 ms
    assert t["estimator"] == "step" and t["summary"]["median_s"] == pytest.approx(2e-3)
    assert t["estimators"]["loop"]["median_s"] == pytest.approx(3e-3) and t["estimators"]["loop"]["K"] == 20
    # judged after round 2: the rounds (3 equal samples each) are apart by far more than their
    # intervals allow, and the interval over 2 rounds is t(1) x ln(3) / 2 = 6.98 in log space
    # around 2 ms (the bootstrap alone spans 1 ms to 3 ms): sinh(6.98) = 537.242
    why = "the loop and step rounds disagree (Cochran's Q, 99%); interval ±53724.2%, wider than the target ±5%"
    assert t["rounds_rule"] == {
        "rounds": 2,
        "wanted": 5,
        "stopped": False,
        "after_min": why,
        "why": f"2 of 5 rounds so far: {why}",
    }
    # round 1's loop and step read the same: the rule the file now keeps times no more loops
    assert t["loop_rule"] == {
        "source": "step",
        "loop_over_source": 1.0,
        "rerun": False,
        "why": "round 1's loop interval overlaps the step's (loop/step 1.00): round 1 only",
    }
    # AllGather over 8: S = V = 8000 B, algbw = S / 2 ms, busbw x 7/8
    assert r["bandwidth"]["algbw_Bps"] == pytest.approx(4e6) and r["bandwidth"]["busbw_Bps"] == pytest.approx(3.5e6)
    # later rounds' phases add up under rounds_*
    assert r["phases_s"] == {"rounds_timing": 1.75}


def test_a_round_the_worker_fails_leaves_the_file_as_it_was(tmp_path, monkeypatch, caplog):
    point = _ok_point(tmp_path)
    before = (point / "result.json").read_text()
    monkeypatch.setattr(rounds_mod, "process_env", lambda *a: a)
    monkeypatch.setattr(rounds_mod, "get_worker", lambda env: _Worker({"status": "failed", "error": "boom"}))
    spec = {"hardware": "h", "distributed": "d", "trace": {"gpu_command_buffers": "g"}}
    with caplog.at_level(logging.WARNING, logger="shardlab"):
        assert rounds_mod.add_round(point, 2, spec=spec) is False
    assert (point / "result.json").read_text() == before
    assert [m.getMessage() for m in caplog.records] == ["round 2 of p failed: boom"]


def test_interleave_shuffles_each_round_by_the_seed_and_logs_each_round(tmp_path, monkeypatch, caplog):
    names = [f"{i}_p" for i in range(6)]
    dirs = [_write(tmp_path, n, rounds=1, rounds_rule={"stopped": n == "0_p"}) for n in names]
    calls = []
    monkeypatch.setattr(
        rounds_mod, "add_round", lambda d, r, spec=None, specs=None, records=None: calls.append((r, d.name)) or True
    )
    with caplog.at_level(logging.INFO, logger="shardlab"):
        assert rounds_mod.interleave(dirs, 4) == 6 + 5 + 5
    # the default seed is 0: random.Random(0)'s shuffles, one per round, the stopped point left
    # out from round 3 on (its place in the shuffle still drawn)
    rng, want = random.Random(0), []
    for r in (2, 3, 4):
        order = list(names)
        rng.shuffle(order)
        want += [(r, n) for n in order if r < 3 or n != "0_p"]
    assert calls == want
    assert [m.getMessage() for m in caplog.records] == [
        "round 2 of 4: 6 point(s)",
        "round 3 of 4: 5 point(s)",
        "round 4 of 4: 5 point(s)",
    ]


def test_a_round_of_a_bare_result_reads_its_defaults(tmp_path, monkeypatch):
    # no timing.rounds, no timeout, no estimator (auto) on TPU, no phases yet, one K from an old file
    d = tmp_path / "p"
    d.mkdir()
    round1 = {"round": 1, "step": {"samples_s": [1e-3] * 3}, "loop": {"K": 20, "samples_s": [1e-3] * 3}}
    result = {
        "status": "ok",
        "config": {"timing": {"target_rel_ci": 0.05, "seed": 0}},
        "environment": {"backend": "tpu"},
        "timing": {"rounds": [round1]},
    }
    (d / "result.json").write_text(json.dumps(result))
    loop = {"K": 20, "samples_s": [3e-3] * 3}
    worker = _Worker({"status": "ok", "round": {"round": 2, "step": {"samples_s": [3e-3] * 3}, "loop": loop}})
    spec = {"hardware": "h", "distributed": "d", "trace": {"gpu_command_buffers": "g"}}
    monkeypatch.setattr(rounds_mod, "process_env", lambda *a: a)
    monkeypatch.setattr(rounds_mod, "get_worker", lambda env: worker)
    seen = []
    worker.run = lambda s, p, timeout, **kw: seen.append((s, p, timeout, kw)) or worker.reply
    assert rounds_mod.add_round(d, 2, spec=spec) is True
    assert seen == [(spec, d, 600.0, {"kind": "retime", "round": 2, "K": 20, "loop": True})]
    r = json.loads((d / "result.json").read_text())
    # auto on TPU is the device estimator, which has no samples here: no headline time
    assert r["timing"]["estimator"] == "device" and r["timing"]["summary"] == {"n": 0}
    # one round asked for (the default): every round it asks for
    assert r["timing"]["rounds_rule"]["why"] == "timing.rounds=1: every round asked for"
    # a reply without phases adds none
    assert r["phases_s"] == {}


def test_round_two_of_five_judges_by_the_configs_target(tmp_path, monkeypatch):
    d = tmp_path / "p"
    d.mkdir()
    rounds = [{"round": 1, "step": {"samples_s": [1e-3, 1e-3, 1e-3]}}]
    result = {
        "status": "ok",
        "config": {"timing": {"rounds": 5, "target_rel_ci": 0.5, "seed": 0, "estimator": "step"}},
        "timing": {"rounds": rounds},
    }
    (d / "result.json").write_text(json.dumps(result))
    reply = {"status": "ok", "round": {"round": 2, "step": {"samples_s": [1e-3] * 3}, "phases_s": {"timing": 0.5}}}
    monkeypatch.setattr(rounds_mod, "process_env", lambda *a: a)
    monkeypatch.setattr(rounds_mod, "get_worker", lambda env: _Worker(reply))
    spec = {"hardware": "h", "distributed": "d", "trace": {"gpu_command_buffers": "g"}}
    assert rounds_mod.add_round(d, 2, spec=spec) is True
    r = json.loads((d / "result.json").read_text())
    # two equal rounds agree, their interval is 0: stopped against the target of 50%
    assert r["timing"]["rounds_rule"]["why"] == (
        "stopped after 2 of 5 rounds: they agree (Cochran's Q, 99%) and the interval ±0.0% meets the target ±50%"
    )
    # and round 3 is asked of no worker (spec={} would fail at its first key)
    assert rounds_mod.add_round(d, 3, spec={}) is False
    # the first later round's phases start from 0
    assert r["phases_s"] == {"rounds_timing": 0.5}


def test_interleave_builds_each_points_spec_once_for_all_its_rounds(tmp_path, monkeypatch):
    # two points, rounds 2 and 3: each round reads the point's result.json again, but its spec (the
    # config does not change between rounds) is built once per point and reused
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    dirs = [_ok_point(tmp_path / name) for name in ("a", "b")]
    built, sent = [], []

    def build_spec(cfg):
        built.append(cfg["timeout_s"])
        return {"hardware": "h", "distributed": "d", "trace": {"gpu_command_buffers": "g"}, "n": len(built)}

    def run(spec, point_dir, timeout, **kw):
        sent.append((point_dir.parent.name, kw["round"], spec["n"]))
        # round r at r ms: round 2 disagrees with round 1, so no point stops after it
        return {"status": "ok", "round": {"round": kw["round"], "step": {"samples_s": [kw["round"] * 1e-3] * 3}}}

    worker = _Worker(None)
    worker.run = run
    monkeypatch.setattr(rounds_mod, "build_spec", build_spec)
    monkeypatch.setattr(rounds_mod, "process_env", lambda *a: a)
    monkeypatch.setattr(rounds_mod, "get_worker", lambda env: worker)
    assert rounds_mod.interleave(dirs, 3) == 4
    assert built == [42, 42]
    # every round of a point went out with the one spec built for that point
    first = {d: n for d, _, n in sent[:2]}
    assert sorted(sent) == sorted((d, r, first[d]) for d in ("a", "b") for r in (2, 3))
    assert sorted(first.values()) == [1, 2]


def test_interleave_reads_each_record_once_and_writes_it_once_when_its_rounds_end(tmp_path, monkeypatch):
    # three later rounds of one point whose rounds never agree: result.json is read once for the
    # whole sweep (then kept as the last round left it); each round goes to the journal, one
    # line, and result.json is written once, whole, after the last round, the journal removed
    point = _ok_point(tmp_path)
    on_disk, reads = [], []

    class Worker:
        def run(self, spec, point_dir, timeout, round, **kw):
            journal = point / ROUNDS_NAME
            lines = journal.read_text().splitlines() if journal.exists() else []
            on_disk.append((len(json.loads((point / "result.json").read_text())["timing"]["rounds"]), len(lines)))
            step = {"samples_s": [float(round) * 1e-3] * 5}  # 2, 3, 4 ms: apart every round
            return {"status": "ok", "round": {"round": round, "step": step, "phases_s": {}}}

    monkeypatch.setattr(rounds_mod, "build_spec", lambda cfg: SPEC)
    monkeypatch.setattr(rounds_mod, "process_env", lambda *a: a)
    monkeypatch.setattr(rounds_mod, "get_worker", lambda env: Worker())
    read = rounds_mod.upgraded
    monkeypatch.setattr(rounds_mod, "upgraded", lambda r: reads.append(1) or read(r))
    writes = []
    write = rounds_mod.write_json_atomic
    monkeypatch.setattr(rounds_mod, "write_json_atomic", lambda path, data: writes.append(path) or write(path, data))
    assert rounds_mod.interleave([point], 4) == 3
    # before rounds 2, 3, 4: result.json has round 1 throughout, the journal 0, 1, 2 rounds
    assert len(reads) == 1 and on_disk == [(1, 0), (1, 1), (1, 2)]
    assert writes == [point / "result.json"] and not (point / ROUNDS_NAME).exists()
    t = json.loads((point / "result.json").read_text())["timing"]
    assert [x["round"] for x in t["rounds"]] == [1, 2, 3, 4] and t["rounds_rule"]["rounds"] == 4


SPEC = {"hardware": "h", "distributed": "d", "trace": {"gpu_command_buffers": "g"}}


def _disagreeing_worker(monkeypatch, fail: tuple = ()) -> list:
    """A stand-in worker whose round r reads r ms (so no point's rounds agree); it fails the
    rounds in ``fail``. The rounds it is asked for, in order."""
    asked = []

    class Worker:
        def run(self, spec, point_dir, timeout, round, **kw):
            asked.append(round)
            if round in fail:
                return {"status": "failed", "error": "boom"}
            step = {"samples_s": [float(round) * 1e-3] * 5}
            return {"status": "ok", "round": {"round": round, "step": step, "phases_s": {"timing": 0.5}}}

    monkeypatch.setattr(rounds_mod, "build_spec", lambda cfg: SPEC)
    monkeypatch.setattr(rounds_mod, "process_env", lambda *a: a)
    monkeypatch.setattr(rounds_mod, "get_worker", lambda env: Worker())
    return asked


def test_a_sweep_killed_between_rounds_reads_back_every_round_and_its_resume_runs_only_the_rest(tmp_path, monkeypatch):
    # rounds 2 and 3 of 5 ran, then the sweep was killed (kill -9: no finally, nothing flushed):
    # result.json is round 1's, the journal holds the two rounds
    point = _ok_point(tmp_path)
    _disagreeing_worker(monkeypatch)
    records: dict = {}
    assert rounds_mod.add_round(point, 2, records=records) and rounds_mod.add_round(point, 3, records=records)
    assert [x["round"] for x in json.loads((point / "result.json").read_text())["timing"]["rounds"]] == [1]
    # every reader sees the record as the sweep held it: the typed reader the report and
    # load_sweep use, and the runner's own (a resume)
    kept = json.loads(json.dumps(records[point].to_json()))
    assert _read(point) == kept
    r = read_result(point)
    assert [x.round for x in r.timing.rounds] == [1, 2, 3]
    # the median of the rounds' medians (1, 2, 3 ms), and the rule and phases as round 3 left them
    assert r.timing.summary.median_s == pytest.approx(2e-3)
    assert r.timing.rounds_rule.why == kept["timing"]["rounds_rule"]["why"]
    assert r.timing.rounds_rule.rounds == 3 and kept["phases_s"] == {"rounds_timing": 2.5}
    # a resume: only rounds 4 and 5 go to the worker; then result.json holds all five, no journal
    asked = _disagreeing_worker(monkeypatch)
    assert rounds_mod.interleave([point], 5) == 2 and asked == [4, 5]
    t = json.loads((point / "result.json").read_text())["timing"]
    assert [x["round"] for x in t["rounds"]] == [1, 2, 3, 4, 5] and not (point / ROUNDS_NAME).exists()
    assert t["summary"]["median_s"] == pytest.approx(3e-3) and t["rounds_rule"]["rounds"] == 5


def test_a_torn_last_journal_line_is_skipped_and_the_next_round_lands_on_a_line_of_its_own(tmp_path, monkeypatch):
    point = _ok_point(tmp_path)
    _disagreeing_worker(monkeypatch)
    assert rounds_mod.add_round(point, 2) is True
    journal = point / ROUNDS_NAME
    whole = journal.read_text()
    torn = '{"result_started_at":null,"round":{"round":3,"step":{"samples_s":[0.0'  # killed mid-write
    journal.write_text(whole + torn)
    assert [x["round"] for x in _read(point)["timing"]["rounds"]] == [1, 2]
    assert [x.round for x in read_result(point).timing.rounds] == [1, 2]
    # round 3 again (a resume): appended after the torn line, which stays a line of its own
    assert rounds_mod.add_round(point, 3) is True
    assert journal.read_text().splitlines()[:2] == [whole.rstrip("\n"), torn]
    assert [x["round"] for x in _read(point)["timing"]["rounds"]] == [1, 2, 3]
    assert _read(point)["timing"]["summary"]["median_s"] == pytest.approx(2e-3)


def test_a_journal_left_by_an_earlier_run_of_the_folder_is_not_this_records(tmp_path, monkeypatch):
    point = _ok_point(tmp_path)
    _disagreeing_worker(monkeypatch)
    assert rounds_mod.add_round(point, 2) is True  # the journal of the record started at null
    result = json.loads((point / "result.json").read_text())
    (point / "result.json").write_text(json.dumps(dict(result, started_at="2026-11-27T10:00:00.000+00:00")))
    assert [x["round"] for x in _read(point)["timing"]["rounds"]] == [1]
    assert [x.round for x in read_result(point).timing.rounds] == [1]


def test_a_point_whose_last_round_fails_is_written_whole_at_the_end_of_the_rounds(tmp_path, monkeypatch):
    # round 5 fails: the point's rounds end without a last round; interleave writes result.json
    # with rounds 1 to 4 all the same, and removes the journal
    point = _ok_point(tmp_path)
    _disagreeing_worker(monkeypatch, fail=(5,))
    assert rounds_mod.interleave([point], 5) == 3
    t = json.loads((point / "result.json").read_text())["timing"]
    assert [x["round"] for x in t["rounds"]] == [1, 2, 3, 4] and not (point / ROUNDS_NAME).exists()
    assert t["rounds_rule"]["why"].startswith("4 of 5 rounds so far: ")


def test_a_normal_sweep_leaves_result_json_with_every_round_as_each_round_computed_it(tmp_path, monkeypatch):
    # three points, five rounds, none agreeing: what ends on disk is the record the rounds built,
    # the same as rewriting result.json after every round gave (the summary over every round)
    points = []
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
        points.append(_ok_point(tmp_path / name))
    _disagreeing_worker(monkeypatch)
    assert rounds_mod.interleave(points, 5, seed=3) == 12
    for point in points:
        assert not (point / ROUNDS_NAME).exists()
        r = json.loads((point / "result.json").read_text())
        t = r["timing"]
        assert [x["round"] for x in t["rounds"]] == [1, 2, 3, 4, 5]
        # summarising its rounds again changes nothing of it
        assert summarise(Timing.from_json(t), r["config"]["timing"], "cpu").to_json() == t
        assert t["summary"]["median_s"] == pytest.approx(3e-3) and t["rounds_rule"]["rounds"] == 5
        assert r["phases_s"] == {"rounds_timing": 1.5 + 4 * 0.5}


def test_a_full_disk_ends_the_later_rounds_with_one_warning_and_keeps_every_round_finished(
    tmp_path, monkeypatch, caplog
):
    # round 3's line cannot be written (ENOSPC): one warning, no traceback, no more rounds
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    points = [_ok_point(tmp_path / name) for name in ("a", "b")]
    _disagreeing_worker(monkeypatch)
    append = rounds_mod.append_round

    def full_from_round_3(point_dir, line):
        if line["round"]["round"] >= 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(point_dir / ROUNDS_NAME))
        append(point_dir, line)

    monkeypatch.setattr(rounds_mod, "append_round", full_from_round_3)
    with caplog.at_level(logging.WARNING, logger=rounds_mod.log.name):
        assert rounds_mod.interleave(points, 5) == 2
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and said[0].startswith("the later rounds stop at round 3: cannot write ")
    assert "No space left on device" in said[0] and "resume=true" in said[0]
    # the point whose round-3 line failed keeps round 3 too: it was measured, and result.json is
    # written whole at the end of the rounds (where the disk has room for it)
    kept = sorted(
        tuple(x["round"] for x in json.loads((p / "result.json").read_text())["timing"]["rounds"]) for p in points
    )
    assert kept == [(1, 2), (1, 2, 3)]
    assert not any((p / ROUNDS_NAME).exists() for p in points)
