"""Several JAX processes as one mesh: config checks and the ``local`` launcher.

``distributed=local`` starts ``num_processes`` workers (:class:`runner.sweep.workers.Worker`) on this
machine, each with ``devices_per_process`` CPU devices, joined through a coordinator on
127.0.0.1 and a free port; JAX's gloo collectives carry the data between them. Every point
goes to all of them (multi-controller JAX: every process runs the same program), each
measures and traces its own devices, and :class:`ProcessGroup` merges the replies into one
record: process 0's, plus a ``processes`` list with every process's devices, timing and trace.

Failures end the whole group, never half of it: if a process dies, fails, or does not finish
within ``distributed.timeout_s`` of the first one that did, every process is killed (each is
its own process group) and the next point starts a fresh group.

``distributed=auto`` needs no launcher: the cluster starts the processes, and each one's
worker calls ``jax.distributed.initialize()`` (:mod:`runner.config.jaxenv`).
"""

from __future__ import annotations

import os
import socket
import time
from multiprocessing.connection import wait
from pathlib import Path

from analysis.runs.rundir import log_name
from runner.config.jaxenv import COORDINATOR_ENV, NUM_PROCESSES_ENV, PROCESS_ID_ENV, TIMEOUT_ENV
from runner.errors import WorkerDied
from runner.sweep.workers import Worker, _tail

# Import and JAX start before a process can join: allowed on top of distributed.timeout_s.
START_GRACE_S = 60
# Test-only: the index of a process the group does not start (a peer that never joins).
TEST_SKIP_PROCESS_ENV = "SHARDLAB_TEST_SKIP_PROCESS"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the coordinator binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ProcessGroup:
    """``num_processes`` workers that form one JAX mesh; the interface of one Worker."""

    def __init__(self, env: dict):
        self.env = env  # the key the worker pool compares: no port, no process id
        self.n = int(env[NUM_PROCESSES_ENV])
        self.timeout_s = float(env[TIMEOUT_ENV])
        self.coordinator = f"127.0.0.1:{free_port()}"
        self.points = 0
        self.start_s: float | None = None
        self.broken = False
        skip = os.environ.get(TEST_SKIP_PROCESS_ENV)
        self.workers: dict[int, Worker] = {
            i: Worker(dict(env, **{PROCESS_ID_ENV: str(i), COORDINATOR_ENV: self.coordinator}))
            for i in range(self.n)
            if str(i) != skip
        }

    def alive(self) -> bool:
        return not self.broken and all(w.alive() for w in self.workers.values())

    def starting(self) -> bool:
        """False: the processes start when :meth:`started` asks, not beforehand (as
        :meth:`runner.sweep.workers.Worker.starting` asks of a worker started ahead)."""
        return False

    def started(self, point_dir: Path) -> dict:
        """Wait until every process has joined (once; their start-up logs go to ``point_dir``
        if they do not); what process 0's JAX found."""
        if self.start_s is None:
            self._start(Path(point_dir))
        return self.workers[min(self.workers)].info

    def pids(self) -> list[int]:
        return [w.process.pid for w in self.workers.values()]

    def run(self, spec: dict, point_dir: Path, timeout_s: float, kind: str = "measure", **extra) -> dict:
        """Run one point (or a later round of it) in every process; the merged reply, or
        :class:`WorkerDied`."""
        point_dir = Path(point_dir)
        first = self.start_s is None
        if first:
            self._start(point_dir)
        for w in self.workers.values():
            w.submit(spec, point_dir, kind, extra)
        replies, problems = self._collect(point_dir, timeout_s)
        if problems:
            self.kill()
            raise WorkerDied("\n".join(problems))
        self.points += 1
        reply = merge(replies)
        if reply["status"] != "ok":
            self.kill()  # a process may have stopped between collectives: start afresh
        reply["worker"] = {
            "pids": self.pids(),
            "coordinator": self.coordinator,
            "points_served": self.points,
            "start_s": self.start_s if first else None,
        }
        return reply

    def _start(self, point_dir: Path) -> None:
        """Wait until every process has joined; JAX itself gives up after ``timeout_s``. All
        are watched at once, so a process that dies while starting ends the wait at once."""
        t0 = time.perf_counter()
        deadline = t0 + self.timeout_s + START_GRACE_S
        pending = dict(self.workers)
        try:
            while pending:
                left = deadline - time.perf_counter()
                if left <= 0:
                    i = min(pending)
                    pending[i].kill()
                    raise WorkerDied(f"did not start JAX within {self.timeout_s + START_GRACE_S:g} s; killed")
                wait([w._conn for w in pending.values()] + [w.process.sentinel for w in pending.values()], left)
                for i, w in list(pending.items()):  # noqa: B007 - i names the process in the error below
                    if w.reply_waiting() or not w.alive():
                        w.wait_ready(0)  # its ready message, or WorkerDied saying how it ended
                        pending.pop(i)
        except WorkerDied as exc:
            self._save_startup_logs(point_dir)
            self.kill()
            missing = sorted(set(range(self.n)) - set(self.workers))
            raise WorkerDied(
                f"the {self.n} processes did not all join within distributed.timeout_s="
                f"{self.timeout_s:g} s (coordinator {self.coordinator}"
                f"{', process(es) ' + str(missing) + ' never started' if missing else ''}); "
                f"every process was killed. Process {i}: {exc}"
            ) from None
        if len(self.workers) < self.n:  # test hook: cannot happen otherwise
            raise WorkerDied("a process was not started")
        self.start_s = max(w.start_s for w in self.workers.values())

    def _collect(self, point_dir: Path, timeout_s: float) -> tuple[dict[int, dict], list[str]]:
        """Replies from every process. Once one has replied or died, the rest have
        ``distributed.timeout_s`` more: a peer stuck in a collective never returns by itself."""
        replies: dict[int, dict] = {}
        problems: list[str] = []
        pending = dict(self.workers)
        deadline = time.perf_counter() + timeout_s
        first_end: float | None = None
        while pending:
            limit = deadline if first_end is None else min(deadline, first_end + self.timeout_s)
            left = limit - time.perf_counter()
            if left > 0:
                wait([w._conn for w in pending.values()] + [w.process.sentinel for w in pending.values()], left)
            died = []
            for i, w in list(pending.items()):
                if w.reply_waiting() or not w.alive():
                    pending.pop(i)
                    first_end = first_end or time.perf_counter()
                    try:
                        replies[i] = w.receive(point_dir / log_name(i))
                    except WorkerDied as exc:
                        problems.append(f"process {i}: {exc}")
                        died.append(i)
            if died and pending:  # the others wait in a collective the dead one never joins
                for i in sorted(pending):
                    problems.append(f"process {i}: killed at once: process(es) {died} died, so it could not finish")
                break
            if pending and time.perf_counter() >= limit:
                why = (
                    "timeout_s"
                    if first_end is None
                    else f"distributed.timeout_s after process(es) {sorted(set(self.workers) - set(pending))} ended"
                )
                waited = timeout_s if first_end is None else self.timeout_s
                for i in sorted(pending):
                    problems.append(
                        f"process {i}: did not finish within {waited:g} s ({why}); killed. "
                        f"Last log lines:\n{_tail(point_dir / log_name(i))}"
                    )
                break
        return replies, problems

    def _save_startup_logs(self, point_dir: Path) -> None:
        """Keep each process's start-up output in the point folder: the only record of why."""
        for i, w in self.workers.items():
            try:
                (point_dir / log_name(i)).write_bytes(w.startup_log.read_bytes())
            except OSError:
                pass

    def kill(self) -> None:
        self.broken = True
        for w in self.workers.values():
            w.kill()

    def ask_to_stop(self) -> None:
        """Ask every process to end, without waiting for them."""
        for w in self.workers.values():
            w.ask_to_stop()

    def close(self) -> None:
        # Ask all to stop first: each waits in jax.distributed.shutdown for the others.
        self.ask_to_stop()
        for w in self.workers.values():
            w.close()


def merge(replies: dict[int, dict]) -> dict:
    """One reply from every process's: process 0's record, every process's essentials,
    and the first failure (if any) as the point's error."""
    # JSON in and out: point.run reads the merged record typed; typed here, a missing key would read as empty
    base = dict(replies[0])
    record = dict(base.get("record") or {})
    processes = []
    for i in sorted(replies):
        r = replies[i]
        rec = r.get("record") or {}
        processes.append(
            {
                "process_id": i,
                "status": r["status"],
                "error": r.get("error"),
                "device_ids": (rec.get("process") or {}).get("device_ids"),
                "host": (rec.get("process") or {}).get("host"),
                "timing_summary": (rec.get("timing") or {}).get("summary"),
                "xplane": (rec.get("files") or {}).get("xplane"),
                "log": log_name(i),
            }
        )
    record["processes"] = processes
    if record.get("files") is not None:
        record["files"]["xplanes"] = [p["xplane"] for p in processes if p["xplane"]]
    failed = [i for i in sorted(replies) if replies[i]["status"] != "ok"]
    base["record"] = record
    if failed:
        # Every failing process's error: the first in index order may only be waiting on another.
        bad = replies[failed[0]]
        base.update(
            status="failed",
            error_type=bad.get("error_type"),
            error="\n".join(f"process {i}: {replies[i].get('error')}" for i in failed),
        )
        if bad.get("traceback"):
            base["traceback"] = bad["traceback"]
    return base
