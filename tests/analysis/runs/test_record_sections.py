"""The typed record (:mod:`analysis.runs.record`) read exactly: every key of every section lands
in its own field, a damaged value reads as an empty section, format_version 1's names are
renamed everywhere they occur (and only there), and the estimator's rounds are floats in order
(issue 30: the record was scored by the mutation check)."""

from __future__ import annotations

import copy

import pytest

from analysis.runs.record import (
    DEVICE,
    LOOP,
    STEP,
    Ceiling,
    Check,
    Compile,
    Config,
    Environment,
    Estimate,
    LoopCheck,
    LoopRule,
    Mesh,
    Named,
    OpConfig,
    Placement,
    Process,
    Result,
    Round,
    RoundsRule,
    Samples,
    Spec,
    Timing,
    TimingConfig,
    Trace,
    either,
    upgraded,
)

# every key each section declares, with a value no other key has
ESTIMATE = {
    "n": 11,
    "median_s": 1.5,
    "mean_s": 1.6,
    "min_s": 1.1,
    "max_s": 2.9,
    "std_s": 0.3,
    "p10_s": 1.2,
    "p90_s": 2.1,
    "p95_s": 2.4,
    "p99_s": 2.8,
    "ci_low_s": 1.4,
    "ci_high_s": 1.7,
    "cv": 0.2,
    "rel_ci_halfwidth": 0.1,
    "rounds": 3,
    "round_medians_s": [1.4, 1.5, 1.6],
    "within_round_rel_ci": 0.05,
    "rounds_disagree": False,
    "K": 64,
}
SPEC = {
    "op": "all_gather",
    "expr": "AllGather_X(A[I_X]) -> A[I]",
    "axes": ["X"],
    "size_bytes": 4096,
    "V_bytes": 4096.0,
    "dtype": "bfloat16",
    "group_size": 4,
    "num_groups": 2,
    "mesh": {
        "name": "grid",
        "axes": {"X": 4, "Y": 2},
        "device_ids": [0, 1, 2, 3, 4, 5, 6, 7],
        "devices": ["d0", "d1"],
        "physical": {"X": {"extent": 4}},
    },
    "hardware": "tpu-v5e",
    "placement": {
        "process_count": 2,
        "cross_process_axes": ["Y"],
        "processes_per_group": 1,
        "crosses_processes": False,
    },
    "no_communication": "a group of 1",
    "strategy": "fsdp",
    "dims": {"I": 8},
    "flops": 1e9,
    "grad": True,
    "sharding": "X",
}
FULL = {
    "status": "ok",
    "error_type": "E",
    "error": "e",
    "point": "007_p",
    "point_dir": "/s/007_p",
    "format_version": 2,
    "config": {
        "op": {"name": "all_gather", "expr": "x", "axes": ["X"], "grad": False, "dims": {"J": 2}},
        "dtype": "float32",
        "mesh": {"name": "line", "axes": {"X": 8}},
        "hardware": {"name": "cpu", "W": 1},
        "timing": {"estimator": "auto", "rounds": 5, "target_rel_ci": 0.02, "seed": 9},
    },
    "environment": {
        "backend": "tpu",
        "device_kind": "TPU v5e",
        "device_count": 8,
        "local_device_count": 4,
        "process_count": 2,
        "process_index": 1,
        "host": "h1",
        "jax_version": "0.10.2",
    },
    "spec": SPEC,
    "timing": {
        "estimator": LOOP,
        "estimator_reason": "auto: loop",
        "missing_reason": "none found",
        "summary": ESTIMATE,
        "estimators": {STEP: {"median_s": 3.0}, LOOP: {"median_s": 2.0, "K": 32}, "wall": {"median_s": 9.0}},
        "rounds": [
            {
                "round": 1,
                STEP: {"samples_s": [3, 4]},
                LOOP: {"samples_s": [2.0], "stop_reason": "ci", "K": 32, "Ks": [16, 32]},
                DEVICE: {"samples_s": [1.0], "what": "collective", "instructions": ["all-gather.1"]},
                "page_faults_per_step": 0.5,
            }
        ],
        DEVICE: {"samples_s": [0.5], "what": "program"},
        "rounds_rule": {"wanted": 4, "why": "noisy", "stopped": True, "rounds": 2},
        "loop_rule": {"rerun": False, "why": "agreed", "source": "step", "loop_over_source": 0.5},
        "loop_check": {"ok": True},
        "page_faults_per_step": 1.5,
        "seed": 7,
    },
    "trace": {"profiler_slowdown": 2.5, "dispatch_share": 0.25, "traced_step_median_s": 3.5, "error": "t"},
    "check": {"passed": False, "unchecked": True, "why": "w", "max_rel_error": 1.0},
    "compile": {"lower_s": 0.5, "compile_s": 1.25},
    "ceiling": {
        "kind": "link",
        "busbw_Bps": 4e10,
        "ci_low_Bps": 3e10,
        "ci_high_Bps": 5e10,
        "inconsistent": "i",
        "what": "w",
    },
    "files": {"xplane": "trace.xplane.pb"},
    "process": {
        "process_id": 1,
        "host": "h1",
        "device_ids": [4, 5],
        "xplane": "p1.pb",
        "status": "ok",
        "error": None,
        "timing_summary": {"median_s": 2.5},
    },
    "processes": [{"process_id": 0, "host": "h0"}, "damaged", {"process_id": 1, "timing_summary": {"n": 3}}],
    "hardware": {"name": "tpu-v5e"},
    "prediction": {"time_s": 1e-3},
    "bandwidth": {"busbw_Bps": 2e10},
    "unknown": 1,
}


def test_every_key_of_every_section_lands_in_its_own_field():
    r = Result.from_json(copy.deepcopy(FULL))
    assert r == Result(
        status="ok",
        error_type="E",
        error="e",
        point="007_p",
        point_dir="/s/007_p",
        format_version=2,
        config=Config(
            op=OpConfig(name="all_gather", expr="x", axes=["X"], grad=False, dims={"J": 2}),
            dtype="float32",
            mesh=Named(name="line"),
            hardware=Named(name="cpu"),
            timing=TimingConfig(estimator="auto", rounds=5, target_rel_ci=0.02),
            tree=FULL["config"],  # the whole config, keys no field reads included
        ),
        environment=Environment("tpu", "TPU v5e", 8, 4, 2, 1, "h1", "0.10.2"),
        spec=Spec(
            **{k: v for k, v in SPEC.items() if k not in ("mesh", "placement")},
            mesh=Mesh("grid", {"X": 4, "Y": 2}, [0, 1, 2, 3, 4, 5, 6, 7], ["d0", "d1"], {"X": {"extent": 4}}),
            placement=Placement(2, ["Y"], 1, False),
        ),
        timing=Timing(
            estimator=LOOP,
            estimator_reason="auto: loop",
            missing_reason="none found",
            summary=Estimate(**ESTIMATE),
            estimators={STEP: Estimate(median_s=3.0), LOOP: Estimate(median_s=2.0, K=32)},  # "wall" kept out
            rounds=(
                Round(
                    round=1,
                    step=Samples(samples_s=[3, 4]),
                    loop=Samples(samples_s=[2.0], stop_reason="ci", K=32, Ks=[16, 32]),
                    device=Samples(samples_s=[1.0], what="collective", instructions=["all-gather.1"]),
                    page_faults_per_step=0.5,
                ),
            ),
            device=Samples(samples_s=[0.5], what="program"),
            rounds_rule=RoundsRule(wanted=4, why="noisy", stopped=True, rounds=2),
            loop_rule=LoopRule(rerun=False, why="agreed", source="step", loop_over_source=0.5),
            loop_check=LoopCheck(ok=True),
            page_faults_per_step=1.5,
            seed=7,
        ),
        trace=Trace(2.5, 0.25, 3.5, "t"),
        check=Check(passed=False, unchecked=True, why="w", max_rel_error=1.0),
        compile=Compile(lower_s=0.5, compile_s=1.25),
        ceiling=Ceiling("link", 4e10, 3e10, 5e10, "i", what="w"),
        files={"xplane": "trace.xplane.pb"},
        process=Process(1, "h1", [4, 5], "p1.pb", "ok", None, Estimate(median_s=2.5)),
        # a damaged entry reads as an empty process, in its place
        processes=(Process(process_id=0, host="h0"), Process(), Process(process_id=1, timing_summary=Estimate(n=3))),
        hardware={"name": "tpu-v5e"},
        prediction={"time_s": 1e-3},
        bandwidth={"busbw_Bps": 2e10},
    )
    assert r.ok and r.timing.estimate(LOOP) == Estimate(median_s=2.0, K=32)
    assert r.timing.estimate(DEVICE) == Estimate()  # the point has none
    assert FULL["timing"]["estimators"]["wall"] == {"median_s": 9.0}  # the file is not changed


@pytest.mark.parametrize("bad", [None, [], [1, 2], "x", 3, True])
def test_a_damaged_value_reads_as_an_empty_section_everywhere(bad):
    d = {
        k: bad
        for k in ("config", "environment", "spec", "timing", "trace", "compile", "ceiling", "process")
        + ("files", "hardware", "prediction", "bandwidth", "processes")
    }
    # a list of damaged processes keeps one empty process for each
    processes = tuple(Process() for _ in bad) if isinstance(bad, list) else ()
    assert Result.from_json(dict(d, status="failed")) == Result(status="failed", processes=processes)
    t = {"summary": bad, "estimators": bad, "rounds": bad, DEVICE: bad, "rounds_rule": bad, "loop_rule": bad}
    assert Timing.from_json(t) == Timing(rounds=tuple(Round() for _ in processes))
    assert Timing.from_json({"rounds": [bad, {"round": 2, STEP: bad}]}).rounds == (Round(), Round(round=2))
    assert Spec.from_json({"mesh": bad, "placement": bad, "op": "x"}) == Spec(op="x")
    assert Result.from_json(bad) == Result()


def test_a_result_is_ok_only_when_its_status_says_so():
    assert [Result.from_json({"status": s}).ok for s in ("ok", "failed", "OK", None)] == [True, False, False, False]


@pytest.mark.parametrize(
    "check, want",
    [
        ({"passed": False}, Check(passed=False)),
        ({"unchecked": True, "why": "int8"}, Check(unchecked=True, why="int8")),
        ({}, None),  # an empty check is none
        (None, None),
    ],
)
def test_check_is_none_only_where_the_file_has_none(check, want):
    assert Result.from_json({"status": "ok", "check": check}).check == want
    assert Result.from_json({"status": "ok"}).check is None


def test_either_keeps_a_recorded_zero_or_false():
    assert [either(v, "asked") for v in (0, False, "", [], None)] == [0, False, "", [], "asked"]
    assert either(None, None) is None


def test_upgraded_renames_format_1_keys_in_the_three_places_only():
    v1 = {
        "job": "001_a",
        "status": "ok",
        "experiment": {"op": "x", "source": "kept"},  # source is renamed inside timing only
        "timing": {"seed": 1, "source": "step", "source_reason": "r"},
        "config": {"dtype": "f32", "timing": {"source": "loop"}, "hardware": {"source": "book"}},
        "hardware": {"source": "a citation"},
    }
    before = copy.deepcopy(v1)
    out = upgraded(v1)
    assert out == {
        "point": "001_a",
        "status": "ok",
        "spec": {"op": "x", "source": "kept"},
        "timing": {"seed": 1, "estimator": "step", "estimator_reason": "r"},
        "config": {"dtype": "f32", "timing": {"estimator": "loop"}, "hardware": {"source": "book"}},
        "hardware": {"source": "a citation"},
    }
    assert list(out) == ["point", "status", "spec", "timing", "config", "hardware"]  # the order kept
    assert list(out["timing"]) == ["seed", "estimator", "estimator_reason"]
    assert v1 == before  # the given dict and its sections are left as they were


def test_upgraded_renames_inside_timing_without_top_level_keys_and_leaves_the_rest_itself():
    only_timing = {"status": "ok", "timing": {"source": DEVICE}, "config": {"timing": {"rounds": 2}}}
    out = upgraded(only_timing)
    assert out == {"status": "ok", "timing": {"estimator": DEVICE}, "config": {"timing": {"rounds": 2}}}
    assert out["config"] is only_timing["config"]  # nothing renamed there: the same object
    only_config = {"config": {"timing": {"source_reason": "asked"}, "dtype": "f32"}, "timing": {"seed": 3}}
    out = upgraded(only_config)
    assert out == {"config": {"timing": {"estimator_reason": "asked"}, "dtype": "f32"}, "timing": {"seed": 3}}
    assert out["timing"] is only_config["timing"]
    # a damaged config or timing is passed on as it is
    damaged = {"experiment": {"op": "x"}, "config": ["x"], "timing": "t"}
    assert upgraded(damaged) == {"spec": {"op": "x"}, "config": ["x"], "timing": "t"}
    assert upgraded(c := {"config": {"timing": None}}) is c
    for not_a_dict in (None, [("job", 1)], "job"):
        assert upgraded(not_a_dict) is not_a_dict


def test_a_key_under_its_new_name_wins_over_each_old_one():
    both = {
        "job": "old",
        "point": "new",
        "job_dir": "/old",
        "timing": {"source": "step", "estimator": "loop", "source_reason": "old", "estimator_reason": "new"},
    }
    assert upgraded(both) == {
        "point": "new",
        "point_dir": "/old",
        "timing": {"estimator": "loop", "estimator_reason": "new"},
    }
    r = Result.from_json(both)
    assert (r.point, r.point_dir, r.timing.estimator, r.timing.estimator_reason) == ("new", "/old", LOOP, "new")


def test_the_estimator_rounds_are_floats_round_by_round():
    rounds = [
        {STEP: {"samples_s": [1, 2]}, DEVICE: {"samples_s": [9]}},  # round 1's device samples are not these
        {STEP: {"samples_s": []}, DEVICE: {"samples_s": [3]}},
        {STEP: {"samples_s": [5]}, DEVICE: {"samples_s": [4, 6]}},
    ]
    step = Timing.from_json({"estimator": STEP, "rounds": rounds}).estimator_rounds()
    assert step == [[1.0, 2.0], [5.0]] and all(type(x) is float for r in step for x in r)
    device = Timing.from_json({"estimator": DEVICE, "rounds": rounds, DEVICE: {"samples_s": [7]}}).estimator_rounds()
    assert device == [[7.0], [3.0], [4.0, 6.0]] and type(device[0][0]) is float
    # no trace of its own: round 1 has no device samples, the later rounds keep theirs
    assert Timing.from_json({"estimator": DEVICE, "rounds": rounds}).estimator_rounds() == [[3.0], [4.0, 6.0]]
    assert Timing.from_json({"estimator": LOOP, "rounds": rounds}).estimator_rounds() == []
    assert Timing.from_json({"estimator": "", "rounds": rounds}).estimator_rounds() == [[1.0, 2.0], [5.0]]
    assert Round.from_json(rounds[0]).samples(DEVICE) == [9]
    assert Round.from_json({}).samples(LOOP) == []


def test_an_unknown_estimator_is_an_error_naming_it_and_the_three():
    with pytest.raises(ValueError) as e:
        Round().samples("Step")
    assert str(e.value) == "estimator 'Step': not one of step, loop, device"
    with pytest.raises(ValueError) as e:
        Timing().estimate(None)
    assert str(e.value) == "estimator None: not one of step, loop, device"
