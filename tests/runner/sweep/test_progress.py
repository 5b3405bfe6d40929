"""What a sweep says on the console: a header, one line per point, a closing summary; and
Ctrl-C in the middle: two lines, a report marked incomplete, the exact resume command."""

from __future__ import annotations

import json
import re
import signal
import time

import pytest
from shardlab_cli import runner, start

FAST = ["timing.rounds=2", "timing.budget_s=0.2", "timing.min_iters=5", "trace.iters=2"]


def test_a_sweep_prints_one_line_per_point_and_a_summary(tmp_path):
    out = tmp_path / "sweep"
    proc = runner("+sweep=allgather_sizes", "op.size_bytes=1KiB,4KiB,16KiB", *FAST, f"hydra.sweep.dir={out}", expect=0)
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == f"shardlab: 3 points x 2 round(s) -> {out}"
    points = [line for line in lines if line.startswith("[")]
    assert [p.split("]")[0] for p in points] == ["[1/3", "[2/3", "[3/3"]
    # a time in a human unit (a small point's median is hundreds of us, or a few ms on a busy machine)
    assert all(" ok " in p and "busbw" in p and re.search(r"\d (us|ms) ±\d+%", p) for p in points), points
    assert "op.size_bytes=4KiB" in points[1] and "timing.rounds" not in points[1]  # only what varies
    assert lines[len(points) + 1] == "round 2 of 2: 3 point(s)"
    assert lines[len(points) + 2].startswith("done in ") and "3 ok, 0 failed" in lines[len(points) + 2]
    assert lines[len(points) + 3].startswith("  AllGather over X (8 devices, float32): latency floor about")
    assert lines[-2] == f"report: {out}/report/index.html" and lines[-1] == f"traces: python -m analysis view {out}"
    assert len(lines) == len(points) + 6
    # one line each, none running away; the headline is a sentence with its intervals (330
    # characters on a 17-point sweep; its length here depends on which parts the data allow)
    headline = lines[len(points) + 3]
    assert max(len(line) for line in lines if line is not headline) < 220 and len(headline) < 400
    assert "HYDRA" not in proc.stdout and "Launching" not in proc.stdout
    head = json.loads((out / "headline.json").read_text())
    assert head["incomplete"] is False and len(head["families"]) == 1


def test_ctrl_c_leaves_a_report_marked_incomplete_and_the_resume_command(tmp_path):
    out = tmp_path / "sweep"
    args = ["+sweep=allgather_sizes", "op.size_bytes=1KiB,2KiB,4KiB,8KiB,16KiB,32KiB", *FAST, f"hydra.sweep.dir={out}"]
    proc = start("runner", *args)
    try:
        for line in proc.stdout:  # wait for the second point, then Ctrl-C
            if line.startswith("[2/6]"):
                break
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    said = [line for line in err.splitlines() if line.strip()]
    assert len(said) == 2, err  # no traceback: what happened, and how to resume
    assert said[0].startswith(("interrupted at point", "interrupted before point")) and "(incomplete)" in said[0]
    assert said[1] == ("resume: python -m runner " + " ".join(args[:-1]) + f" hydra.sweep.dir={out} resume=true")
    report = (out / "report" / "report.md").read_text()
    assert report.startswith("# INCOMPLETE") and "## Missing points" in report
    head = json.loads((out / "headline.json").read_text())
    assert head["incomplete"] is True and head["missing_points"]
    assert "Traceback" not in err and "Traceback" not in rest


def test_time_left_grows_with_the_sizes_still_to_come():
    from runner.sweep.progress import ProgressCallback

    cb = ProgressCallback()
    cb.points = [[f"op.size_bytes={s}MiB"] for s in (1, 2, 4, 8, 16)]
    cb.rounds = 1
    # three points measured, bandwidth-bound (the step doubles with V): 1 s outside the timed
    # steps, 0.5 s of timed steps, a step of 1 ms per MiB
    cb.done = [(float(s << 20), 1.5, 0.5, 1e-3 * s) for s in (1, 2, 4)]
    # 8 MiB: 1 s + timed max(0.5, 100 x 8 ms) + 60 x 8 ms = 2.28 s; 16 MiB: 1 + 1.6 + 0.96 = 3.56 s
    # (the mean of the measured, 1.5 s a point, would say 3 s)
    assert cb.time_left(2) == pytest.approx(2.28 + 3.56, rel=1e-9)
    cb.rounds = 3  # two more rounds of every point's timed steps: 2 x (3 x 0.5 + 0.8 + 1.6)
    assert cb.time_left(2) == pytest.approx(2.28 + 3.56 + 2 * 3.9, rel=1e-9)
    # a size already measured (the next op of collectives_sizes starts small again) costs what
    # that size cost, not what the largest did: 1 s + 0.5 s + 60 x 1 ms
    cb.points += [["op=all_reduce", "op.size_bytes=1MiB"]]
    cb.rounds = 1
    assert cb.time_left(4) == pytest.approx(1.56, rel=1e-9)


def test_time_left_does_not_leap_from_noise_at_the_smallest_sizes():
    from runner.sweep.progress import estimate_left

    # the first six points of a default sweep here, (V, wall s, timed s, step s): their wall
    # times wander 0.19-0.61 s while the step stays flat; a linear fit of wall on V then said
    # "about 41:19 left" for the 11 points and 4 rounds to come (47 s in all)
    done = [
        (1024, 0.608, 0.306, 291e-6),
        (2048, 0.25, 0.15, 284e-6),
        (4096, 0.233, 0.144, 283e-6),
        (8192, 0.188, 0.09, 319e-6),
        (16384, 0.199, 0.097, 292e-6),
        (32768, 0.529, 0.348, 284e-6),
    ]
    remaining = [float(1 << e) for e in range(16, 27)]  # 64 KiB .. 64 MiB
    left = estimate_left(done, remaining, rounds=5, timing_cap_s=3.0)
    assert 20 < left < 90  # 42 s were left in fact
    # the step time is extrapolated at least as sqrt(V): the last point costs more than the first
    first, last = (estimate_left(done, [v], rounds=1, timing_cap_s=3.0) for v in (remaining[0], remaining[-1]))
    assert last > 5 * first


def test_a_single_run_prints_one_line_and_no_warnings(tmp_path):
    proc = runner("op.size_bytes=1KiB", *FAST, f"hydra.run.dir={tmp_path}", expect=0)
    assert proc.stderr == ""  # no Hydra callback warnings, no JAX chatter
    (line,) = proc.stdout.strip().splitlines()
    assert line.startswith("AllGather_X(A[I_X]) -> A[I] 1KiB: median ") and line.endswith(f"-> {tmp_path}")
