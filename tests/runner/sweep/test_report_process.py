"""The sweep's report process (runner.sweep.report_process): it imports the report's modules on
idle CPU while the points run, writes the report it is sent, and never outlives the sweep."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from shardlab_cli import alive, gone_within
from small_sweep import small_sweep

from runner.sweep import report_process
from runner.sweep.callbacks import report_and_summary
from runner.sweep.report_process import ReportProcess


def _when_ready(helper: ReportProcess, timeout_s: float = 120) -> None:
    deadline = time.time() + timeout_s
    while not helper.ready():
        assert helper.proc.poll() is None, "the report process died before it was ready"
        assert time.time() < deadline, "the report process was not ready in time"
        time.sleep(0.1)


def test_it_imports_on_idle_cpu_then_writes_the_report_it_is_sent(tmp_path, compose_cfg):
    root = small_sweep(tmp_path / "sweep", compose_cfg, sizes=("1KiB", "16KiB"))
    helper = ReportProcess()
    try:
        # while it waits it is in the idle class: it takes no CPU from a point being timed
        assert os.sched_getscheduler(helper.proc.pid) in (os.SCHED_IDLE, os.SCHED_OTHER)
        _when_ready(helper)
        assert os.sched_getscheduler(helper.proc.pid) == os.SCHED_IDLE
        out = helper.write_report(root, time.time())
    finally:
        helper.close()
    assert out is not None and out["index"] == str(root / "report" / "index.html")
    assert (root / "report" / "index.html").is_file() and (root / "summary.csv").is_file()
    assert helper.answered and helper.proc.poll() is not None  # and it is gone


# what a report may not import once the process said ready: a package not loaded yet (the slow ones
# take seconds of CPU here; a loaded one's own lazy submodules, pandas' CSV writer, milliseconds) or
# a module of the report


def test_once_ready_writing_the_report_imports_nothing_slow(tmp_path, compose_cfg):
    """Every module writing a report imports is imported while the points run, not after the
    last round (the report's protos for TensorBoard once came after it: 0.2-0.3 s)."""
    root = small_sweep(tmp_path / "sweep", compose_cfg, sizes=("1KiB", "16KiB"))
    code = (
        "import json, sys, time\n"
        "from pathlib import Path\n"
        "from runner.sweep.report_process import answer, import_the_report\n"
        "import_the_report()\n"
        "before = set(sys.modules)\n"
        f"out = answer(Path({str(root)!r}), time.time())\n"
        "new = set(sys.modules) - before\n"
        "late = [m for m in new if m.split('.')[0] not in before or m.startswith('analysis.report')]\n"
        "print(json.dumps({'index': out.get('index'), 'late': sorted(late)}))\n"
    )
    found = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert found["index"] == str(root / "report" / "index.html")
    assert found["late"] == []


def test_the_summary_is_the_same_whoever_writes_the_report(tmp_path, compose_cfg, caplog):
    root = small_sweep(tmp_path / "sweep", compose_cfg, sizes=("1KiB", "16KiB"))
    caplog.set_level(logging.INFO, logger="shardlab")
    here = report_and_summary(root)
    said_here = [r.getMessage() for r in caplog.records if r.name == "shardlab"]
    caplog.clear()
    helper = ReportProcess()
    _when_ready(helper)
    there = report_and_summary(root, helper=helper)
    said_there = [r.getMessage() for r in caplog.records if r.name == "shardlab"]
    assert helper.answered  # the report process wrote it
    assert here == there == root / "report" / "index.html"
    # how many points read noisy (interval wider than +-25%) is the machine's doing that minute: a
    # busy CI machine made one of these one-round points noisy; what is asserted is that both
    # writers say the same
    assert said_here == said_there
    assert re.fullmatch(r"done: 2 ok, 0 failed; \d noisy, 0 flagged, 0 unchecked", said_here[0])


def test_a_report_process_still_importing_is_let_out_of_the_idle_class_and_waited_for(
    tmp_path, compose_cfg, monkeypatch
):
    """At the end of a sweep whose worker kept every CPU busy, its imports are part done: it
    finishes them (the CPU is free now) rather than the sweep importing everything again."""
    root = small_sweep(tmp_path / "sweep", compose_cfg, sizes=("1KiB",))
    # A test machine running two test workers can leave the helper without a CPU tick for STALL_S
    # (2 s) while it reads its imports from a busy disk, and the sweep then rightly writes the
    # report itself (once on CI). What is asserted here is the waiting, so the stall window is the
    # whole answer time; the give-up is the next test's.
    monkeypatch.setattr(report_process, "STALL_S", report_process.ANSWER_S)
    helper = ReportProcess()  # its imports take a second or more: it cannot be ready yet
    assert not helper.ready()
    out = helper.write_report(root, time.time())
    waited = getattr(helper, "waited_s", None)
    said = f"waited {waited} s, may leave idle {helper.can_leave_idle}, exit {helper.proc.returncode}"
    assert out is not None, said
    assert out["index"] == str(root / "report" / "index.html") and helper.answered


def test_a_report_process_that_never_gets_ready_is_given_up(tmp_path, monkeypatch):
    helper = ReportProcess()
    os.kill(helper.proc.pid, signal.SIGSTOP)  # stalled half way through its imports: it takes no CPU
    monkeypatch.setattr(report_process, "STALL_S", 0.5)
    t0 = time.perf_counter()
    assert helper.write_report(tmp_path, time.time()) is None  # the sweep writes the report itself
    assert time.perf_counter() - t0 < 5
    assert not helper.answered and helper.proc.returncode == -signal.SIGKILL


def test_an_idle_class_process_still_importing_on_busy_cpus_is_not_waited_for(tmp_path, monkeypatch):
    helper = ReportProcess()
    monkeypatch.setattr(report_process, "_unidle", lambda pid=0: False)  # a user without CAP_SYS_NICE
    monkeypatch.setattr(report_process, "idle_cpu", lambda: False)
    t0 = time.perf_counter()
    assert helper.write_report(tmp_path, time.time()) is None
    assert time.perf_counter() - t0 < 1
    assert not helper.answered and helper.proc.returncode == -signal.SIGKILL


def test_a_report_process_that_does_not_answer_is_given_up(tmp_path, compose_cfg):
    root = small_sweep(tmp_path / "sweep", compose_cfg, sizes=("1KiB",))
    helper = ReportProcess()
    _when_ready(helper)
    os.kill(helper.proc.pid, signal.SIGSTOP)  # as an idle-class process on a machine with no idle CPU
    t0 = time.perf_counter()
    assert helper.write_report(root, time.time(), answer_s=1.0) is None
    assert time.perf_counter() - t0 < 10 and helper.proc.returncode == -signal.SIGKILL


def test_a_mixed_sweep_is_refused_alike_by_the_report_process(tmp_path, compose_cfg, caplog):
    root = small_sweep(tmp_path / "sweep", compose_cfg, sizes=("1KiB", "16KiB"))
    odd = root / "1_op.size_bytes=16KiB" / "result.json"
    r = json.loads(odd.read_text())
    r["environment"]["jax_version"] = "0.9.0"  # as if copied in from another machine's sweep
    odd.write_text(json.dumps(r))
    caplog.set_level(logging.INFO, logger="shardlab")
    helper = ReportProcess()
    _when_ready(helper)
    assert report_and_summary(root, helper=helper) is None and helper.answered
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert line.startswith("no report: ") and "environment.jax_version" in line
    assert line.endswith(f"(python -m analysis report {root} --allow-mixed)")


def test_a_report_bug_is_said_with_its_traceback_and_how_to_rebuild(tmp_path, monkeypatch, caplog):
    import analysis.report

    def broken(sweep_dir, **kw):
        raise RuntimeError("a planted report bug")

    monkeypatch.setattr(analysis.report, "write_report", broken)
    out = report_process.answer(tmp_path, time.time())  # what the report process answers
    assert out["exception"].startswith("Traceback (most recent call last)")
    assert out["exception"].rstrip().endswith("RuntimeError: a planted report bug")
    caplog.set_level(logging.INFO, logger="shardlab")
    assert report_and_summary(tmp_path) is None
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert line.startswith(f"could not write the report; rebuild it with `python -m analysis report {tmp_path}`\n")
    assert line.endswith("RuntimeError: a planted report bug")


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_it_dies_with_the_sweep(how):
    code = (
        "from runner.sweep import report_process as r; r.start(); "
        "print(r._current.proc.pid, flush=True); import time; time.sleep(120)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
        assert alive(pid)
        parent.send_signal(how)
        parent.wait(timeout=30)
        # at once, even while it is still importing (the kernel kills it: PR_SET_PDEATHSIG)
        assert gone_within({pid}, 1.0) == set()
    finally:
        parent.kill()
        parent.wait()


def test_stop_kills_it_and_take_hands_it_over_once():
    report_process.start()
    helper = report_process.take()
    assert helper is not None and report_process.take() is None
    helper.close()
    report_process.start()
    pid = report_process._current.proc.pid
    report_process.stop()
    assert report_process._current is None and not alive(pid)


def test_a_free_cpu_is_read_from_the_running_tasks():
    cpus = os.cpu_count()
    assert report_process.idle_cpu(f"0.50 0.40 0.30 {cpus}/300 4242\n")  # the asker and cpus-1 others
    assert not report_process.idle_cpu(f"3.10 2.00 1.00 {cpus + 1}/300 4242\n")  # every CPU taken besides
    assert report_process.idle_cpu("junk")  # unreadable: as without the check


def test_an_idle_class_process_is_not_sent_the_report_when_no_cpu_is_free(tmp_path, monkeypatch):
    helper = ReportProcess()
    _when_ready(helper)
    if os.geteuid() == 0:
        assert helper.can_leave_idle  # root may leave the idle class for the report itself
    helper.can_leave_idle = False  # as for a user without CAP_SYS_NICE
    monkeypatch.setattr(report_process, "idle_cpu", lambda: False)
    assert helper.write_report(tmp_path, time.time()) is None  # the sweep writes it at its own priority
    assert not helper.answered and helper.proc.returncode == -signal.SIGKILL
