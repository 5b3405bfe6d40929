"""No silent fallback: where the *device* estimator is the one chosen (TPU, GPU, or
``timing.estimator=device``) and finds no execution of the point's collective, the point says so
on its console line, in result.json and in the report, and no other estimator's number is
shown as its time.

Planted on CPU: the worker (a spawned process) starts with a ``sitecustomize`` that makes
``runner.worker.trace_facts.target_instructions`` name an instruction the program does not have, as a
module whose collective hides in a shape the reader does not know would.
"""

from __future__ import annotations

import json
import logging
import os
import textwrap

import pandas as pd
import pytest

from analysis.runs.record import Timing
from analysis.runs.rundir import read_results
from analysis.runs.summary import summary_table
from runner import run
from runner.sweep.pool import discard_worker
from runner.sweep.progress import point_line

QUICK = ["timing.min_iters=5", "timing.budget_s=0.3", "trace.iters=3", "op.size_bytes=64KiB"]
ABSENT = "all-gather.absent"
REASON = f"no device time: the trace held no execution of {ABSENT}"

_PLANT = textwrap.dedent(f"""
    import importlib.abc, importlib.machinery, sys

    class _Plant(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "runner.worker.trace_facts":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            run_module = spec.loader.exec_module

            def exec_module(module):
                run_module(module)
                module.target_instructions = lambda *a, **k: {{{ABSENT!r}}}

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _Plant())
""")


@pytest.fixture
def planted_worker(tmp_path_factory, monkeypatch):
    """Workers started inside the test run with the plant (a fresh one before and after)."""
    plant = tmp_path_factory.mktemp("plant")
    (plant / "sitecustomize.py").write_text(_PLANT)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(plant), os.environ.get("PYTHONPATH")])))
    discard_worker()
    yield
    discard_worker()


def test_device_chosen_without_its_collective_has_no_time_and_says_why(planted_worker, compose_cfg, tmp_path, caplog):
    point = tmp_path / "0_x"
    with caplog.at_level(logging.INFO):
        r = run(compose_cfg([*QUICK, "timing.estimator=device", "timing.rounds=2"]), point)
    assert r["status"] == "ok", r.get("error")
    t = r["timing"]
    # the estimator stays device: no step number in its place
    assert (t["estimator"], t["summary"], t["missing_reason"]) == ("device", {"n": 0}, REASON)
    assert t["estimator_reason"] == f"timing.estimator=device; {REASON}"
    assert t["device"]["instructions"] == [ABSENT] and t["device"]["samples_s"] == []
    assert set(t["estimators"]) == {"step", "loop"}  # still there, under their own names
    assert [rd.get("device") for rd in t["rounds"][1:]] == [{"samples_s": []}]  # round 2 traced again
    on_disk = json.loads((point / "result.json").read_text())
    assert on_disk["timing"]["missing_reason"] == REASON and "median_s" not in on_disk["timing"]["summary"]

    # the console: a single run's line, and a sweep's line for the point
    assert f"no time (device estimator): {REASON}" in caplog.text
    assert point_line(1, 1, "op.size_bytes=64KiB", r) == f"[1/1] {'op.size_bytes=64KiB':<28} ok   no time  {REASON}"

    # summary.csv: no time, no bus bandwidth, the reason among the flags (fits leave it out)
    (row,) = summary_table(read_results(tmp_path)).to_dict(orient="records")
    assert row["status"] == "ok" and row["missing_reason"] == REASON and REASON in row["flags"]
    assert pd.isna(row["time_s"]) and pd.isna(row["busbw_Bps"])
    assert row["step_time_s"] > 0  # the step estimator's own column keeps its number
    assert "noisy" not in row["caveats"]  # it has no time, so no interval to be wide

    # the report lists the point under its own heading, with the reason
    from analysis.report import write_report

    md = (write_report(tmp_path).parent / "report.md").read_text()
    section = md.split("## Points without a time", 1)[1].split("\n## ", 1)[0]
    assert "| 0_x | all_gather | 64 KiB | device | " + REASON + " |" in section
    # the model table shows no time for it (its flags say why) and no figure plots it
    model = md.split("## Measured against the book's model", 1)[1].split("\n## ", 1)[0]
    (line,) = [ln for ln in model.splitlines() if ln.startswith("| all_gather ")]
    assert line.startswith("| all_gather | X | 64 KiB |  |  | ") and f"| {REASON} |" in line
    assert "## Figures" not in md
    assert "no point has a time (the report lists why, under Points without a time)" in md  # the headline

    # a comparison has nothing to hold it against: one clear error, not a figure of nothing
    from analysis.compare import CompareError
    from analysis.report import write_compare_report

    with pytest.raises(CompareError, match="^no point of these sweeps has a time"):
        write_compare_report([tmp_path, tmp_path], tmp_path / "cmp")


def test_without_a_trace_the_device_estimator_says_it_was_not_traced(compose_cfg, tmp_path):
    r = run(compose_cfg([*QUICK, "timing.estimator=device", "trace.enabled=false", "timing.rounds=1"]), tmp_path)
    assert r["status"] == "ok" and r["timing"]["estimator"] == "device"
    assert r["timing"]["missing_reason"] == (
        "no device time: the point was not traced (trace.enabled=false, or its trace failed: see result.json's trace)"
    )


# ---------------------------------------------------------------- summarise, by hand
STEPS = [{"step": {"samples_s": [1e-3, 1.1e-3, 0.9e-3, 1e-3, 1e-3]}}]


@pytest.mark.parametrize(
    "device, why",
    [
        (None, "the point was not traced (trace.enabled=false, or its trace failed: see result.json's trace)"),
        (
            {"samples_s": [], "instructions": []},
            "the compiled program runs no instruction of the collective",
        ),
        ({"samples_s": [], "instructions": None}, "the trace held no device op of the program"),
        (
            {"samples_s": [], "instructions": ["all-gather-done.1", "all-gather-start.1"]},
            "the trace held no execution of all-gather-done.1, all-gather-start.1",
        ),
        ({"samples_s": [], "instructions": list("abcdef")}, "the trace held no execution of a, b, c, d and 2 more"),
    ],
)
def test_on_tpu_a_missing_device_time_stays_missing(device, why):
    from runner.worker.estimators import summarise

    record = {"rounds": STEPS, **({"device": device} if device is not None else {})}
    out = summarise(Timing.from_json(record), {"estimator": "auto", "seed": 0}, "tpu")
    assert (out.estimator, out.summary.to_json(), out.missing_reason) == ("device", {"n": 0}, f"no device time: {why}")
    assert out.estimator_reason == f"timing.estimator=auto on tpu; no device time: {why}"
    assert set(out.estimators) == {"step"}


def test_a_device_time_is_the_summary_and_a_missing_loop_still_falls_back_to_step():
    from runner.worker.estimators import summarise

    traced = Timing.from_json({"rounds": STEPS, "device": {"samples_s": [2e-4] * 5}})
    found = summarise(traced, {"estimator": "device"}, "cpu")
    assert found.estimator == "device" and found.missing_reason is None
    assert found.summary == found.estimate("device") and found.summary.median_s == pytest.approx(2e-4)
    # loop: the user asked for the in-program loop, which XLA did not keep: step, and it says so
    unrolled = Timing.from_json({"rounds": STEPS, "loop_check": {"why": "XLA unrolled it"}})
    loop = summarise(unrolled, {"estimator": "loop"}, "cpu")
    assert (loop.estimator, loop.missing_reason) == ("step", None)
    assert loop.estimator_reason == "timing.estimator=loop; no loop samples (XLA unrolled it), so step"
    assert loop.summary == loop.estimate("step")


def test_a_group_of_one_has_the_copys_device_time(compose_cfg, tmp_path):
    # XLA runs a collective over one device as a copy: no collective to find, so the device
    # estimator times the whole program, and the point is flagged as no communication
    over = [*QUICK, "timing.estimator=device", "timing.rounds=1", "mesh=xy_4x2", "mesh.axes.X=8", "mesh.axes.Y=1"]
    r = run(compose_cfg([*over, "op.axes=[Y]"]), tmp_path)
    t = r["timing"]
    assert r["status"] == "ok" and r["spec"]["group_size"] == 1, r.get("error")
    assert (t["estimator"], t["missing_reason"], t["device"]["instructions"]) == ("device", None, None)
    assert t["device"]["what"] == "the program's device time" and t["summary"]["median_s"] > 0
