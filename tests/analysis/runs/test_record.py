"""The record between runner and analysis (:mod:`analysis.runs.record`): what result.json holds,
read as typed sections. Old files (``format_version`` 1, written before a key existed) and
damaged ones load; each estimator's numbers land in that estimator's columns; what the worker
writes is what the readers read."""

from __future__ import annotations

import dataclasses
import json

import pytest
from imported_point import imported_point
from record_kinds import KINDS, real_records

from analysis.importers.sweep_writer import point_result
from analysis.runs import record_section
from analysis.runs.record import (
    DEVICE,
    ESTIMATORS,
    IMPORTED,
    LOOP,
    RECORD_ESTIMATORS,
    STEP,
    Estimate,
    Result,
    Samples,
    Spec,
    Timing,
    upgraded,
)
from analysis.runs.rundir import read_result
from analysis.runs.summary import _run_columns, summary_table
from analysis.statistics.resample import rounds_by_point

# A result.json as shardlab wrote it before the timing had rounds, estimators, adaptive rounds,
# a missing_reason or a ceiling with an interval (format_version 1 throughout): one AllGather
# point on CPU with only the step timed.
OLD_RESULT = {
    "format": "shardlab.result",
    "format_version": 1,
    "shardlab_version": "0.1.0",
    "status": "ok",
    "error": None,
    "error_type": None,
    "config": {"op": {"name": "all_gather", "axes": ["X"]}, "dtype": "float32", "timing": {"rounds": 1}},
    "environment": {"jax_version": "0.4.30", "backend": "cpu", "device_kind": "cpu", "device_count": 8},
    "experiment": {
        "op": "all_gather",
        "expr": "AllGather_X(A[I_X]) -> A[I]",
        "axes": ["X"],
        "size_bytes": 4096,
        "V_bytes": 4096,
        "dtype": "float32",
        "group_size": 8,
        "num_groups": 1,
        "mesh": {"name": "auto", "axes": {"X": 8}},
        "hardware": "cpu",
    },
    "compile": {"compile_s": 0.25},
    "check": {"passed": True, "max_rel_error": 0.0},
    "timing": {
        "source": "step",
        "summary": {
            "n": 40,
            "median_s": 2e-4,
            "p10_s": 1.5e-4,
            "p90_s": 3e-4,
            "ci_low_s": 1.9e-4,
            "ci_high_s": 2.1e-4,
            "cv": 0.2,
            "rel_ci_halfwidth": 0.08,
        },
        "samples_s": [2e-4] * 40,
    },
    "trace": {"profiler_slowdown": 2.5, "dispatch_share": -3.0},
    "ceiling": {"kind": "device_copy", "busbw_Bps": 5e9},
}

# every column of summary.csv that comes from result.json, for OLD_RESULT
OLD_COLUMNS = {
    "point": "000_old",
    "status": "ok",
    "error_type": None,
    "error": None,
    "op": "all_gather",
    "expr": "AllGather_X(A[I_X]) -> A[I]",
    "dtype": "float32",
    "precision": None,  # no precision before issue 37 (its matmuls ran at highest)
    "mesh": "auto",
    "mesh_axes": "X=8",
    "axes": "X",
    "axis_sizes": "8",
    "placement": None,
    "n_axes": 1,
    "group_size": 8,
    "num_groups": 1,
    "size_bytes": 4096,
    "V_bytes": 4096,
    "hardware": "cpu",
    "backend": "cpu",
    "device_kind": "cpu",
    "device_count": 8,
    "jax_version": "0.4.30",
    "estimator": "step",
    "missing_reason": None,
    "time_s": 2e-4,
    "time_p10_s": 1.5e-4,
    "time_p90_s": 3e-4,
    "time_p95_s": None,
    "time_p99_s": None,
    "time_max_s": None,
    "time_ci_low_s": 1.9e-4,
    "time_ci_high_s": 2.1e-4,
    "time_cv": 0.2,
    "time_rel_ci": 0.08,
    "time_n": 40,
    "time_rounds": None,
    "rounds_disagree": False,
    "rounds_wanted": None,
    "rounds_why": None,
    "noisy": False,  # +-8% is within 5 x the default target, 5% (config.timing has no target_rel_ci)
    **{f"{e}_{c}": None for e in ESTIMATORS for c in ("time_s", "ci_low_s", "ci_high_s")},
    "loop_K": None,
    "loop_empty_s": None,  # no empty loop before issue 37
    "loop_launch_bound": None,
    "loop_rounds": None,  # one loop round a point where round 1's agreed, from issue 38
    "loop_why": None,
    "page_faults_per_step": None,
    "checked": True,
    "compile_s": 0.25,
    "profiler_slowdown": 2.5,
    "dispatch_share": None,  # a negative share on cpu is no share
    "no_communication": None,
    "rewritten": None,
    "ceiling_kind": "device_copy",
    "ceiling_busbw_Bps": 5e9,
    "ceiling_ci_low_Bps": None,
    "ceiling_ci_high_Bps": None,
    "ceiling_inconsistent": None,
    "strategy": None,
    "flops": None,
    "grad": False,
    "dims": None,
}


def _write(tmp_path, name: str, result: dict):
    point = tmp_path / name
    point.mkdir()
    (point / "result.json").write_text(json.dumps(result))
    return read_result(point)


def test_an_old_format_result_gives_every_column_it_can_and_none_for_the_rest(tmp_path):
    r = _write(tmp_path, "000_old", OLD_RESULT)
    assert _run_columns(r) == OLD_COLUMNS
    row = summary_table([r]).iloc[0]
    assert (row["time_s"], row["busbw_over_ceiling"] > 0, row["flags"], row["caveats"]) == (2e-4, True, "", "")


def test_a_format_2_result_reads_as_its_format_1_twin(tmp_path):
    """format_version 2 renamed ``experiment`` to ``spec`` (and the reader's ``job``, ``job_dir``
    to ``point``, ``point_dir``): the same point written either way gives the same columns, and
    the reader names the folder it read, not the one the file recorded."""
    new = {("spec" if k == "experiment" else k): v for k, v in OLD_RESULT.items()}
    new.update(format_version=2, point="elsewhere", point_dir="/moved/away")
    r = _write(tmp_path, "000_old", new)
    assert (r.point, r.point_dir) == ("000_old", str(tmp_path / "000_old"))
    assert _run_columns(r) == OLD_COLUMNS
    old = _write(tmp_path, "001_v1", OLD_RESULT)  # the record holds a v1 file's experiment as its spec
    assert old.spec == Spec.from_json(OLD_RESULT["experiment"]) and old.spec.op == "all_gather"


def test_format_1_keys_read_under_their_format_2_names():
    spec = {"op": "all_reduce", "mesh": {"axes": {"X": 4}}}
    v1 = {"format_version": 1, "status": "ok", "job": "003_x", "job_dir": "/s/003_x", "experiment": spec}
    assert upgraded(v1) == {
        "format_version": 1,
        "status": "ok",
        "point": "003_x",
        "point_dir": "/s/003_x",
        "spec": spec,
    }
    r = Result.from_json(v1)
    assert (r.point, r.point_dir, r.spec.op, r.spec.mesh.axes) == ("003_x", "/s/003_x", "all_reduce", {"X": 4})
    both = dict(v1, spec={"op": "all_gather"})  # a key under its new name wins over the old one
    assert Result.from_json(both).spec.op == "all_gather" and "experiment" not in upgraded(both)
    assert upgraded(r := {"status": "ok"}) is r  # nothing to rename: the dict itself


def test_format_1_timing_source_reads_as_the_estimator():
    """*source* is a hardware entry's citation; a format_version 1 file (and a format_version
    2 file written before the rename) named the chosen estimator ``timing.source``."""
    v1 = {
        "format_version": 1,
        "status": "ok",
        "experiment": {"op": "all_gather"},
        "config": {"timing": {"source": "loop", "rounds": 3}},
        "timing": {"source": "loop", "source_reason": "timing.source=loop", "summary": {"median_s": 2e-4}},
    }
    assert upgraded(v1) == {
        "format_version": 1,
        "status": "ok",
        "spec": {"op": "all_gather"},
        "config": {"timing": {"estimator": "loop", "rounds": 3}},
        "timing": {"estimator": "loop", "estimator_reason": "timing.source=loop", "summary": {"median_s": 2e-4}},
    }
    r = Result.from_json(v1)
    assert (r.timing.estimator, r.timing.estimator_reason, r.config.timing.estimator) == (
        "loop",
        "timing.source=loop",
        "loop",
    )
    assert (_run_columns(r)["estimator"], _run_columns(r)["time_s"]) == ("loop", 2e-4)
    # a key under its new name wins; the file given is left as it was
    both = dict(v1, timing={"estimator": "device", "source": "loop"})
    assert upgraded(both)["timing"] == {"estimator": "device"}
    assert v1["timing"]["source"] == "loop" and "estimator" not in v1["timing"]
    assert upgraded(r := {"status": "ok", "timing": {"estimator": STEP}, "config": {}}) is r


def test_a_result_missing_its_sections_falls_back_to_its_config(tmp_path):
    """A point that failed before it ran: no spec, timing, environment or check; the
    config says what was asked for."""
    failed = {
        "format_version": 1,
        "status": "failed",
        "error_type": "ConfigError",
        "error": "mesh X=3 does not divide 8 devices",
        "config": {
            "op": {"name": "matmul", "expr": "A[I, J_X] * B[J, K] -> C[I, K]", "axes": ["X"], "grad": True},
            "dtype": "bfloat16",
            "mesh": {"name": "line"},
            "hardware": {"name": "cpu"},
            "timing": {"target_rel_ci": 0.02},
        },
        "experiment": None,  # damaged: null where an object belongs
        "timing": [],
    }
    cols = _run_columns(_write(tmp_path, "001_failed", failed))
    assert {k: cols[k] for k in ("status", "error_type", "op", "expr", "dtype", "mesh", "hardware", "axes")} == {
        "status": "failed",
        "error_type": "ConfigError",
        "op": "matmul",
        "expr": "A[I, J_X] * B[J, K] -> C[I, K]",
        "dtype": "bfloat16",
        "mesh": "line",
        "hardware": "cpu",
        "axes": "X",
    }
    assert (cols["grad"], cols["mesh_axes"], cols["axis_sizes"], cols["n_axes"]) == (True, "", "", 0)
    assert (cols["time_s"], cols["estimator"], cols["noisy"], cols["checked"], cols["rounds_disagree"]) == (
        None,
        None,
        False,
        None,
        False,
    )
    assert all(cols[f"{e}_time_s"] is None for e in ESTIMATORS)


def _estimate(median: float, **more) -> dict:
    return {"n": 10, "median_s": median, "ci_low_s": median * 0.9, "ci_high_s": median * 1.1, **more}


def test_each_estimator_fills_its_own_columns():
    timing = {
        "estimator": "loop",
        "summary": _estimate(2e-4),
        "estimators": {STEP: _estimate(3e-4), LOOP: _estimate(2e-4, K=64), DEVICE: _estimate(1e-4)},
    }
    cols = _run_columns(Result.from_json({"point": "0", "status": "ok", "timing": timing}))
    columns = [f"{e}_{c}" for e in ESTIMATORS for c in ("time_s", "ci_low_s", "ci_high_s")] + ["loop_K"]
    assert {k: cols[k] for k in columns} == {
        "step_time_s": 3e-4,
        "step_ci_low_s": pytest.approx(2.7e-4),
        "step_ci_high_s": pytest.approx(3.3e-4),
        "loop_time_s": 2e-4,
        "loop_ci_low_s": pytest.approx(1.8e-4),
        "loop_ci_high_s": pytest.approx(2.2e-4),
        "loop_K": 64,
        "device_time_s": 1e-4,
        "device_ci_low_s": pytest.approx(0.9e-4),
        "device_ci_high_s": pytest.approx(1.1e-4),
    }
    assert (cols["estimator"], cols["time_s"]) == ("loop", 2e-4)


def test_malformed_sections_read_as_empty_ones():
    r = Result.from_json({"status": "ok", "spec": [], "timing": {"summary": None, "rounds": "x"}, "check": {}})
    assert r.spec.op is None and r.spec.mesh.axes is None
    assert r.timing.summary == Estimate() and r.timing.rounds == ()
    assert r.check is None and r.ok
    assert Result.from_json(None) == Result()


def test_an_unknown_estimator_name_is_an_error_naming_the_three():
    with pytest.raises(ValueError, match=r"estimator 'wall': not one of step, loop, device"):
        Timing().estimate("wall")


def test_a_record_names_a_timed_estimator_or_imported_which_has_no_samples_of_ours():
    assert RECORD_ESTIMATORS == (*ESTIMATORS, IMPORTED)
    t = Timing.from_json({"estimator": IMPORTED, "summary": {"median_s": 1e-5, "n": 1, "rounds": 1}})
    assert t.summary.median_s == 1e-5 and t.estimator_rounds() == []
    with pytest.raises(ValueError, match=r"^estimator 'imported': not one of step, loop, device$"):
        t.estimate(IMPORTED)


def test_the_estimator_rounds_come_from_the_chosen_estimator():
    rounds = [
        {"round": 1, STEP: {"samples_s": [1.0, 2.0]}, LOOP: {"samples_s": [0.5]}},
        {"round": 2, STEP: {"samples_s": [3.0]}, LOOP: {"samples_s": []}, DEVICE: {"samples_s": [0.2]}},
    ]
    device_round_1 = {"samples_s": [0.1, 0.3]}

    def got(estimator):
        return Timing.from_json({"estimator": estimator, "rounds": rounds, DEVICE: device_round_1}).estimator_rounds()

    assert got(STEP) == [[1.0, 2.0], [3.0]]
    assert got(LOOP) == [[0.5]]  # the empty round is dropped
    assert got(DEVICE) == [[0.1, 0.3], [0.2]]  # round 1 from the point's own trace
    assert got(None) == got(STEP)
    assert got("imported") == []
    results = [
        {"point": "a", "status": "ok", "timing": {"estimator": LOOP, "rounds": rounds}},
        {"point": "b", "status": "failed", "timing": {"estimator": STEP, "rounds": rounds}},
        {"point": "c", "status": "ok", "timing": {"estimator": "imported"}},
    ]
    assert rounds_by_point([Result.from_json(r) for r in results]) == {"a": [[0.5]]}


def test_what_the_worker_summarises_is_what_the_readers_read():
    """runner.worker.timing writes the record's estimator keys; analysis.runs.record reads them back."""
    from runner.worker.estimators import summarise

    record = {
        "rounds": [
            {STEP: {"samples_s": [3e-4] * 20}, LOOP: {"samples_s": [2e-4] * 10, "K": 32}},
            {STEP: {"samples_s": [3e-4] * 20}, LOOP: {"samples_s": [2e-4] * 10, "K": 32}},
        ],
        DEVICE: {"samples_s": [1e-4] * 5},
    }
    written = summarise(Timing.from_json(record), {"estimator": "auto", "seed": 0}, "tpu").to_json()
    t = Timing.from_json(json.loads(json.dumps(written)))
    assert sorted(t.estimators) == sorted(ESTIMATORS)
    assert [(e, t.estimate(e).n, t.estimate(e).median_s) for e in ESTIMATORS] == [
        (STEP, 40, 3e-4),
        (LOOP, 20, 2e-4),
        (DEVICE, 5, 1e-4),
    ]
    assert (t.estimator, t.summary.median_s, t.estimate(LOOP).K, t.missing_reason) == (DEVICE, 1e-4, 32, None)


def test_a_point_the_runner_measures_fills_every_section_the_readers_read(tmp_path, compose_cfg):
    """A writer that renames a key (``estimators``, ``compile_s``, ``busbw_Bps``, ...) leaves
    the readers with None; one real AllGather point shows every field they read is written."""
    from runner import run

    run(compose_cfg(["op.size_bytes=4KiB", "timing.rounds=1", "timing.budget_s=0.2", "timing.min_iters=5"]), tmp_path)
    r = read_result(tmp_path)
    exp, t = r.spec, r.timing
    read = {
        "status": r.status,
        "format_version": r.format_version,
        "config.op.name": r.config.op.name,
        "config.timing": (r.config.timing.estimator, r.config.timing.target_rel_ci),
        "environment": (r.environment.backend, r.environment.device_count, r.environment.process_index),
        "spec": (exp.op, exp.axes, exp.dtype, exp.group_size, exp.V_bytes, exp.mesh.name, exp.mesh.axes),
        "spec.placement.process_count": exp.placement.process_count,
        "timing.estimator": (t.estimator, t.estimator_reason),
        "timing.summary": (t.summary.n > 0, t.summary.median_s > 0, t.summary.rel_ci_halfwidth is not None),
        "timing.estimators": {e: t.estimate(e).median_s > 0 for e in ESTIMATORS},
        "timing.estimators.loop.K": t.estimate(LOOP).K > 0,
        "timing.rounds": [(x.round, len(x.samples(STEP)) > 0, len(x.samples(LOOP)) > 0) for x in t.rounds],
        "timing.device": len(t.device.samples_s) > 0,
        "check.passed": r.check.passed,
        "compile.compile_s": r.compile.compile_s > 0,
        "ceiling": (r.ceiling.kind, r.ceiling.busbw_Bps > 0, r.ceiling.ci_low_Bps > 0),
        "trace.profiler_slowdown": r.trace.profiler_slowdown > 0,
        "process.device_ids": r.process.device_ids,
        "files": sorted(r.files),
    }
    assert read == {
        "status": "ok",
        "format_version": 2,
        "config.op.name": "all_gather",
        "config.timing": ("auto", 0.05),
        "environment": ("cpu", 8, 0),
        "spec": ("all_gather", ["X"], "float32", 8, 4096, "auto", {"X": 8}),
        "spec.placement.process_count": 1,
        "timing.estimator": (STEP, "timing.estimator=auto on cpu"),
        "timing.summary": (True, True, True),
        "timing.estimators": {STEP: True, LOOP: True, DEVICE: True},
        "timing.estimators.loop.K": True,
        "timing.rounds": [(1, True, True)],
        "timing.device": True,
        "check.passed": True,
        "compile.compile_s": True,
        "ceiling": ("device_copy", True, True),
        "trace.profiler_slowdown": True,
        "process.device_ids": list(range(8)),
        "files": ["hlo_compiled", "hlo_lowered", "xplane"],
    }


# --- the record written back: Result.from_json(d).to_json() == d --------------------------


@pytest.fixture(scope="module")
def real_points(tmp_path_factory, compose_cfg) -> dict:
    """One real point of every kind the runner writes a record for (tests/helpers/record_kinds.py:
    a collective over 2 rounds, the rounds' journal folded in; one timed with timing=quick; one
    untraced; a matmul; a transformer block; a user's program; a point whose config fails; one
    that fails in the worker; a distributed=local point merged from 2 processes), read as the
    file holds them."""
    dirs = real_records(tmp_path_factory.mktemp("kinds"), compose_cfg)
    return {name: json.loads((d / "result.json").read_text()) for name, d in dirs.items()}


def _round_trip_gaps(d: dict) -> list[str]:
    """Where ``Result.from_json(d).to_json()`` differs from ``d``: ``path: what``."""
    gaps: list[str] = []

    def walk(a, b, path):
        if isinstance(a, dict) and isinstance(b, dict):
            gaps.extend(f"{path}.{k}: dropped" for k in a if k not in b)
            gaps.extend(f"{path}.{k}: added" for k in b if k not in a)
            for k in a.keys() & b.keys():
                walk(a[k], b[k], f"{path}.{k}")
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b)):
                walk(x, y, f"{path}[{i}]")
        elif a != b or type(a) is not type(b):
            gaps.append(f"{path}: {a!r} -> {b!r}")

    walk(d, Result.from_json(d).to_json(), "")
    return gaps


def test_every_real_record_is_written_back_exactly(real_points):
    """Every key the runner writes is declared: each kind of point's result.json, read into the
    typed record and written back, is the same JSON, key for key (order included) and value for
    value, null where the file has null and absent where it has none."""
    assert set(real_points) == set(KINDS)
    assert {k: r["status"] for k, r in real_points.items() if r["status"] != "ok"} == {
        "fails_config": "failed",
        "fails_in_worker": "failed",
    }
    for name, d in real_points.items():
        assert _round_trip_gaps(d) == [], name
        assert json.dumps(Result.from_json(d).to_json()) == json.dumps(d), name  # the keys' order too
    # the kinds hold what makes them kinds: the later round, the merge, the partial failure
    assert len(real_points["collective_rounds"]["timing"]["rounds"]) == 2
    assert len(real_points["distributed"]["processes"]) == 2
    assert "traceback" in real_points["fails_in_worker"] and "spec" not in real_points["fails_config"]


def test_a_key_the_record_does_not_declare_fails_the_round_trip(real_points, monkeypatch):
    """The round trip finds a key the writer writes that the record drops (here ``Samples.timed_s``
    and ``Result.wall_s`` taken out of the declaration, as a writer's new key would be missing)."""
    for cls, name in ((Samples, "timed_s"), (Result, "wall_s")):
        keyed = record_section._keyed
        monkeypatch.setattr(
            record_section,
            "_keyed",
            lambda c, keyed=keyed, cls=cls, name=name: [f for f in keyed(c) if not (c is cls and f.name == name)],
        )
        gaps = _round_trip_gaps(real_points["collective_rounds"])
        assert any(g.endswith(f".{name}: dropped") for g in gaps), gaps
        monkeypatch.undo()


def test_importers_records_and_format_1_files_read_and_write_back(tmp_path):
    """An imported point (analysis.importers) writes back as it was; a format_version 1 file reads
    under today's names and writes back with them."""
    point = imported_point()
    for wrong in (0, 5):
        d = json.loads(json.dumps(point_result(dataclasses.replace(point, wrong=wrong), "h100", "why", "cmd")))
        assert _round_trip_gaps(d) == [] and json.dumps(Result.from_json(d).to_json()) == json.dumps(d)
    # a format_version 1 file writes back under today's names; the one key no runner writes now
    # (timing.samples_s, before rounds) is not declared, and goes
    old = upgraded(OLD_RESULT)
    timing = {k: v for k, v in old["timing"].items() if k != "samples_s"}
    assert Result.from_json(OLD_RESULT).to_json() == dict(old, timing=timing)
    r = _write(tmp_path, "000_old", OLD_RESULT)
    assert r.spec.op == "all_gather" and r.to_json()["spec"] == OLD_RESULT["experiment"]
