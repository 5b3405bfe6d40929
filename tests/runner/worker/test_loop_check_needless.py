"""Round 1 leaves the *loop* cross-check out where the blocked step is the source estimator and
its round-1 median is at least ``timing.loop_check_below_s`` (runner.worker.estimators.loop_check_needless):
there all the loop can read off the step is a call's fixed cost, lost in a long step. On TPU and
GPU (the device estimator the source) the loop always runs. Exact expectations: the rule on
its inputs, the worker's round on a stand-in point, and one real point's record and summary row."""

from __future__ import annotations

import pandas as pd
import pytest
from round_point import TIMING as ROUND_TIMING
from round_point import Point

from runner.worker.estimators import loop_check_needless

CPU = {"estimator": "auto", "loop": True, "loop_check_below_s": 0.02}


def test_a_step_at_or_over_the_limit_on_cpu_leaves_the_loop_out_and_says_why():
    assert loop_check_needless(0.025, CPU, "cpu") == (
        "left out: round 1's step took 25 ms, at least timing.loop_check_below_s = 20 ms, and a call's "
        "fixed cost, all the loop could read off the step, is lost in it"
    )
    assert loop_check_needless(0.02, CPU, "cpu").startswith("left out: round 1's step took 20 ms")
    assert loop_check_needless(0.0199, CPU, "cpu") is None


@pytest.mark.parametrize(
    "timing, backend",
    [
        (CPU, "gpu"),  # the device estimator is the source: the loop checks what the trace counts
        (CPU, "tpu"),
        ({**CPU, "estimator": "device"}, "cpu"),
        ({**CPU, "estimator": "loop"}, "cpu"),  # the loop is the source: never left out
        ({**CPU, "loop_check_below_s": None}, "cpu"),  # null: the cross-check on every point
        ({**CPU, "loop": False}, "cpu"),  # no loop asked for: nothing to leave out
    ],
)
def test_the_loop_stays_where_the_step_is_not_the_source_or_the_limit_is_off(timing, backend):
    assert loop_check_needless(10.0, timing, backend) is None


def test_an_explicit_step_estimator_on_a_gpu_leaves_a_long_steps_loop_out():
    assert loop_check_needless(0.5, {**CPU, "estimator": "step"}, "gpu").startswith(
        "left out: round 1's step took 500 ms"
    )


# the timing keys a round reads, with the loop asked for and the auto estimator (step on CPU)
TIMING = {**ROUND_TIMING, "estimator": "auto", "loop": True}


def test_round_1_asks_nothing_of_the_loop_programs_once_its_step_is_long():
    from runner.worker.point_round import time_round

    # a stand-in step takes microseconds: a limit of a picosecond makes it long
    point = Point()
    out = time_round(point, {"timing": {**TIMING, "loop_check_below_s": 1e-12}}, 1)
    assert point.loop.asked == [] and "loop" not in out.to_json() and "loop_compile_s" not in out.to_json()
    assert point.loop_check["ok"] is None and point.loop_check["why"].startswith("left out: round 1's step took ")
    # under the limit, and with it off, round 1 asks the loop programs for its trip counts
    for limit in (10.0, None):
        point = Point()
        time_round(point, {"timing": {**TIMING, "loop_check_below_s": limit}}, 1)
        assert len(point.loop.asked) == 1, limit
    # a later round follows the parent's word (loop_rule) whatever its step took
    point = Point()
    time_round(point, {"timing": {**TIMING, "loop_check_below_s": 1e-12}}, 2, K=[2, 8])
    assert point.loop.asked == [[2, 8]]


def test_a_real_point_with_a_long_step_records_why_its_loop_was_left_out(tmp_path):
    from shardlab_cli import runner

    out = tmp_path / "sweep"
    # a limit of a microsecond: every real step on 8 CPU devices is longer
    runner(
        "-m",
        "op=all_gather",
        "op.size_bytes=4KiB",
        "timing.rounds=2",
        "timing.budget_s=0.05",
        "timing.loop_check_below_s=1e-6",
        "trace.iters=2",
        f"hydra.sweep.dir={out}",
        expect=0,
        timeout=600,
    )
    import json

    (result,) = out.glob("*/result.json")
    t = json.loads(result.read_text())["timing"]
    why = t["loop_check"]["why"]
    assert why.startswith("left out: round 1's step took ") and "timing.loop_check_below_s = 0.001 ms" in why
    assert ["loop" in r for r in t["rounds"]] == [False, False] and "loop" not in t["estimators"]
    assert t["loop_rule"]["rerun"] is False and t["loop_rule"]["why"] == f"round 1 has no loop samples ({why})"
    assert t["estimator"] == "step" and t["summary"]["median_s"] > 0
    row = pd.read_csv(out / "summary.csv").query("is_target").iloc[0]
    assert row["loop_why"] == t["loop_rule"]["why"] and row["status"] == "ok"
    md = (out / "report" / "report.md").read_text()
    assert "Round 1 left the loop out at 1 point(s) whose step took at least timing.loop_check_below_s" in md
