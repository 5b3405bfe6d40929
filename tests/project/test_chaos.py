"""Chaos: a small sweep whose main process or worker is killed at random moments, over
several trials, then resumed. Afterwards every point is ok exactly once, no ok result was lost
or rewritten (later rounds may only be appended), and nothing of the sweep is left running or
listening. Seeded, so a failure can be replayed."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

from shardlab_cli import alive, descendants, gone_within, runner, start

SIZES = ["1KiB", "2KiB", "4KiB", "8KiB", "16KiB"]
ARGS = [
    "+sweep=allgather_sizes",
    f"op.size_bytes={','.join(SIZES)}",
    "timing.rounds=2",
    "timing.budget_s=0.2",
    "timing.min_iters=5",
    "trace.iters=2",
]
TRIALS = 4


def listeners(pids: set[int]) -> set[int]:
    """The inodes of TCP sockets in LISTEN state that ``pids`` hold open."""
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        listening |= {r.split()[9] for r in rows if r.split()[3] == "0A"}
    held = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:[") and target[8:-1] in listening:
                    held.add(target)
        except OSError:
            continue
    return held


def snapshot(out: Path) -> dict[str, dict]:
    """Every ok result now: its first round and when it started (what must never change)."""
    snap = {}
    for p in out.glob("*/result.json"):
        try:
            r = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if r.get("status") == "ok":
            snap[p.parent.name] = {"started_at": r["started_at"], "round1": r["timing"]["rounds"][0]}
    return snap


def test_random_kills_then_resume_lose_nothing_and_leave_nothing(tmp_path):
    rng = random.Random(20261123)
    out = tmp_path / "sweep"
    seen: dict[str, dict] = {}
    everyone: set[int] = set()
    for trial in range(TRIALS):
        resume = ["resume=true"] if trial else []
        quiet = subprocess.DEVNULL
        main = start("runner", *ARGS, f"hydra.sweep.dir={out}", *resume, stdout=quiet, stderr=quiet, new_session=True)
        time.sleep(rng.uniform(2.0, 7.0))
        procs = descendants(main.pid)
        everyone |= procs | {main.pid}
        victim = "worker" if procs and rng.random() < 0.4 else "main"
        if victim == "worker":
            for pid in procs:
                os.kill(pid, signal.SIGKILL)  # a crash inside XLA, the OOM killer ...
            time.sleep(rng.uniform(0.5, 2.0))
            everyone |= descendants(main.pid)
        os.kill(main.pid, rng.choice([signal.SIGKILL, signal.SIGTERM]))
        main.wait(timeout=60)
        assert gone_within(everyone, 10) == set(), f"trial {trial}: a process of the sweep outlived it"
        now = snapshot(out)
        for point, first in seen.items():  # an ok result stays as it was
            assert now.get(point) == first, f"trial {trial}: the ok result of {point} was lost or rewritten"
        seen.update(now)

    runner(*ARGS, f"hydra.sweep.dir={out}", "resume=true", expect=0)
    results = {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/result.json")}
    sizes = sorted(r["config"]["op"]["size_bytes"] for r in results.values())
    assert sizes == sorted(SIZES), sizes  # every point exactly once
    assert all(r["status"] == "ok" and len(r["timing"]["rounds"]) == 2 for r in results.values())
    for point, first in seen.items():
        assert snapshot(out)[point] == first, f"the ok result of {point} was rewritten by the resume"
    assert not any(alive(p) for p in everyone)
    assert listeners(everyone) == set()
    report = (out / "report" / "report.md").read_text()
    assert not report.startswith("# INCOMPLETE")
