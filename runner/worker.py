"""Sweep points run in a worker process that outlives them.

One JAX process serves every point of a sweep (JAX starts and caches once), yet a point
that kills its process - an abort inside XLA, a segfault, the OOM killer - or runs past
its timeout only loses itself: the parent records what it saw and starts a fresh worker
for the next point. The worker is also the one place where process-wide JAX settings are
applied (:mod:`runner.jaxenv`); a point that needs other settings gets a new worker.
"""
from __future__ import annotations

import atexit
import contextlib
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from pathlib import Path

LOG_NAME = "worker.log"
# Tests set this to a size in bytes; the worker then aborts (SIGABRT) on that sweep point.
TEST_ABORT_ENV = "SHARDLAB_TEST_ABORT_SIZE_BYTES"
STARTUP_TIMEOUT_S = 300


class WorkerDied(RuntimeError):
    """The worker process ended (or was killed for its timeout) in the middle of a point."""


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@contextlib.contextmanager
def _output_to(log: Path):
    """Send this process's fds 1 and 2 (Python and XLA's C++ logging alike) to ``log``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log, "ab") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def _serve(conn, env: dict) -> None:
    """Worker main loop: start JAX once, then run the points sent over ``conn``."""
    from runner.jaxenv import start_jax

    start_jax(env)
    from runner.measure import measure
    from runner.spec import ConfigError

    conn.send({"ready": True})  # the parent times the start-up: spawn, imports, JAX start

    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        spec, job_dir = msg
        job_dir = Path(job_dir)
        record: dict = {}
        with _output_to(job_dir / LOG_NAME):
            try:
                if os.environ.get(TEST_ABORT_ENV) == str(spec["op"]["size_bytes"]):
                    os.abort()  # test-only hook: lets the tests prove crash isolation
                measure(spec, job_dir, record)
                reply = {"status": "ok", "record": record}
            except ConfigError as exc:
                reply = {"status": "failed", "error_type": "ConfigError", "error": str(exc), "record": record}
            except Exception as exc:  # one point's failure must not end the sweep
                traceback.print_exc()
                reply = {"status": "failed", "error_type": type(exc).__name__, "error": str(exc),
                         "record": record, "traceback": traceback.format_exc()}
        conn.send(reply)


class Worker:
    """A spawned worker process and the pipe to it."""

    def __init__(self, env: dict):
        ctx = mp.get_context("spawn")  # never fork a process that may hold JAX threads
        self.env = env
        self.points = 0
        self.start_s: float | None = None  # spawn to JAX ready, known after the first point
        self._t_spawn = time.perf_counter()
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, env), daemon=True, name="shardlab-worker")
        self.process.start()
        child.close()

    def alive(self) -> bool:
        return self.process.is_alive()

    def run(self, spec: dict, job_dir: Path, timeout_s: float) -> dict:
        """Send one point; return the worker's reply or raise :class:`WorkerDied`."""
        log = Path(job_dir) / LOG_NAME
        first = self.start_s is None
        try:
            if first:  # wait for JAX to start; a point's timeout starts after that
                if not self._conn.poll(STARTUP_TIMEOUT_S):
                    self.kill()
                    raise WorkerDied(f"the worker did not start JAX within {STARTUP_TIMEOUT_S} s")
                self._conn.recv()
                self.start_s = time.perf_counter() - self._t_spawn
            self._conn.send((spec, str(job_dir)))
            if not self._conn.poll(timeout_s):
                self.kill()
                raise WorkerDied(f"timed out after {timeout_s:g} s (timeout_s); worker killed. "
                                 f"Last log lines:\n{_tail(log)}")
            reply = self._conn.recv()
            self.points += 1
            reply["worker"] = {"pid": self.process.pid, "points_served": self.points,
                               "start_s": self.start_s if first else None}
            return reply
        except (EOFError, ConnectionError, BrokenPipeError):
            self.process.join(5)
            code = self.process.exitcode
            how = (f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0
                   else f"exited with code {code}")
            raise WorkerDied(f"worker process {how} while running this point. Last log lines:\n{_tail(log)}")

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)

    def close(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(OSError, BrokenPipeError):
                self._conn.send(None)
            self.process.join(10)
        self.kill()


_current: Worker | None = None


def get_worker(env: dict) -> Worker:
    """The live worker for ``env``, starting one if there is none or its env differs."""
    global _current
    if _current is not None and (_current.env != env or not _current.alive()):
        _current.close()
        _current = None
    if _current is None:
        _current = Worker(env)
    return _current


def discard_worker() -> None:
    """Stop the current worker (end of a sweep, or after it died)."""
    global _current
    if _current is not None:
        _current.close()
        _current = None


atexit.register(discard_worker)
