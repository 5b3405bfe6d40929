"""The sweep process's handle on a worker process (:mod:`runner.worker.serve`).

One JAX process serves every point of a sweep (JAX starts and caches once), yet a point that
kills its process - an abort inside XLA, a segfault, the OOM killer - or runs past its timeout
only loses itself: :class:`Worker` records what it saw and :mod:`runner.sweep.pool` starts a
fresh one for the next point. A point that needs other process-wide settings gets a new
worker. With ``distributed=local`` the "worker" is a group of them, one per JAX process
(:class:`runner.sweep.distributed.ProcessGroup`), built from the same :class:`Worker`."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import tempfile
import time
from pathlib import Path

from analysis.runs.rundir import LOG_NAME
from runner.config.jaxenv import MODE_ENV
from runner.errors import WorkerDied, WorkerRefused
from runner.worker.serve import serve

STARTUP_TIMEOUT_S = 300


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    # An abort inside XLA ends with dozens of stack-frame addresses; the message is above them.
    return "\n".join([t for t in text if not t.lstrip().startswith("@ 0x")][-lines:])


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored for the duration (in the main thread; elsewhere, as it was)."""
    try:
        saved = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: signals cannot be set here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, saved)


@contextlib.contextmanager
def _environ(env: dict):
    """This process's environment with ``env`` added, for the duration (a spawned child
    inherits it)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


STARTUP_LOG_PREFIX = "shardlab-worker-"  # then the parent's pid: shardlab-worker-<pid>-<random>.log
# The folder the start-up logs go to; the system's temp folder when unset. A test (or a user
# running several shardlabs) sets it to its own folder, so what it counts is only its own.
STARTUP_LOG_DIR_ENV = "SHARDLAB_WORKER_LOG_DIR"


def startup_log_dir() -> Path:
    """Where workers' start-up logs are written: ``$SHARDLAB_WORKER_LOG_DIR`` (created if
    missing) or the system's temp folder."""
    own = os.environ.get(STARTUP_LOG_DIR_ENV)
    if not own:
        return Path(tempfile.gettempdir())
    Path(own).mkdir(parents=True, exist_ok=True)
    return Path(own)


def reap_startup_logs() -> list[Path]:
    """Remove the start-up logs of sweeps that no longer run (a sweep killed while its worker
    was starting JAX leaves its log: neither could remove it); return what was removed."""
    gone = []
    for path in startup_log_dir().glob(f"{STARTUP_LOG_PREFIX}*-*.log"):
        pid = path.name[len(STARTUP_LOG_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)  # the sweep that made it still runs (or another user's does)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
            gone.append(path)
        except PermissionError:
            pass
    return gone


class Worker:
    """A spawned worker process and the pipe to it."""

    def __init__(self, env: dict):
        ctx = mp.get_context("spawn")  # never fork a process that may hold JAX threads
        self.env = env
        self.points = 0
        self.start_s: float | None = None  # spawn to JAX ready, known after the first point
        self.start_wait_s: float | None = None  # of that, what the sweep waited (Hydra composes meanwhile)
        self._start_reported = False
        self.info: dict = {}  # what JAX found when it started (platform_report)
        self.own_group = env.get(MODE_ENV) == "local"
        reap_startup_logs()
        fd, log = tempfile.mkstemp(prefix=f"{STARTUP_LOG_PREFIX}{os.getpid()}-", suffix=".log", dir=startup_log_dir())
        os.close(fd)
        self.startup_log = Path(log)
        self._t_spawn = time.perf_counter()
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=serve, args=(child, env, log, os.getpid()), daemon=True, name="shardlab-worker"
        )
        # settings read at process start (glibc's malloc) must be there at spawn; and the child
        # starts with Ctrl-C ignored (an ignored signal stays ignored across exec, and Python
        # then installs no KeyboardInterrupt handler): Ctrl-C reaches the whole process group,
        # and the parent, not a worker half-way through its imports, decides what happens
        with _environ(env), _sigint_ignored():
            self.process.start()
        child.close()

    def alive(self) -> bool:
        return self.process.is_alive()

    def run(self, spec: dict, point_dir: Path, timeout_s: float, kind: str = "measure", **extra) -> dict:
        """Send one point (``kind`` ``measure``: round 1, or ``retime``: a later round, with
        ``round`` and ``K``); return the worker's reply or raise :class:`WorkerDied`."""
        log = Path(point_dir) / LOG_NAME
        first = not self._start_reported  # the first point served reports the start-up time
        self._start_reported = True
        if self.start_s is None:  # wait for JAX to start; a point's timeout starts after that
            self.wait_ready(STARTUP_TIMEOUT_S)
        self.submit(spec, point_dir, kind, extra)
        try:
            if not self._conn.poll(timeout_s):
                self.kill()
                raise WorkerDied(
                    f"timed out after {timeout_s:g} s (timeout_s); worker killed. Last log lines:\n{_tail(log)}"
                )
        except (EOFError, ConnectionError, BrokenPipeError):
            pass  # the process ended: receive() says how
        reply = self.receive(log)
        reply["worker"] = {
            "pid": self.process.pid,
            "points_served": self.points,
            "start_s": self.start_s if first else None,
            "start_wait_s": self.start_wait_s if first else None,
        }
        return reply

    def wait_ready(self, timeout_s: float) -> None:
        """Wait until JAX has started in the worker; raise :class:`WorkerDied` if it does not."""
        t_wait = time.perf_counter()
        try:
            if not self._conn.poll(timeout_s):
                self.kill()
                raise WorkerDied(
                    f"the worker did not start JAX within {timeout_s:g} s; killed. "
                    f"Last lines of its start-up log:\n{_tail(self.startup_log)}"
                )
            msg = self._conn.recv()
        except (EOFError, ConnectionError, BrokenPipeError):
            raise WorkerDied(
                f"the worker process {self._how_it_ended()} while starting JAX. Last lines of its "
                f"start-up log:\n{_tail(self.startup_log)}"
            ) from None
        if not msg.get("ready"):
            self.kill()
            if msg.get("said"):  # a refusal of the config, complete in one line
                raise WorkerRefused(str(msg.get("error")).removeprefix("ConfigError: "))
            raise WorkerDied(
                f"the worker could not start JAX: {msg.get('error')}. Last lines of its "
                f"start-up log:\n{_tail(self.startup_log)}"
            )
        self.start_s = time.perf_counter() - self._t_spawn
        self.start_wait_s = time.perf_counter() - t_wait
        self.info = {k: v for k, v in msg.items() if k != "ready"}

    def starting(self) -> bool:
        """Whether JAX is still starting in the worker (it has not said it is ready), without waiting."""
        try:
            return self.start_s is None and not self._conn.poll(0)
        except (EOFError, ConnectionError, BrokenPipeError, OSError):
            return False  # it ended: started() says how

    def started(self, point_dir: Path | None = None) -> dict:
        """Wait for JAX to start (once); what it found: backend, device kind and count, and
        ``accelerator_unused`` when an accelerator seems present but JAX is on CPU."""
        if self.start_s is None:
            self.wait_ready(STARTUP_TIMEOUT_S)
        return self.info

    def submit(self, spec: dict, point_dir: Path, kind: str = "measure", extra: dict | None = None) -> None:
        """Send one point without waiting for it (see :meth:`receive`)."""
        try:
            self._conn.send((kind, spec, str(point_dir), extra or {}))
        except (ConnectionError, BrokenPipeError, OSError):
            pass  # the process is gone; receive() reports how it ended

    def reply_waiting(self) -> bool:
        """Whether a reply can be received without blocking (or the pipe has closed)."""
        try:
            return self._conn.poll(0)
        except (EOFError, ConnectionError, BrokenPipeError, OSError):
            return True

    def receive(self, log: Path) -> dict:
        """The reply to the point sent by :meth:`submit`, or :class:`WorkerDied` if it ended."""
        try:
            reply = self._conn.recv()
        except (EOFError, ConnectionError, BrokenPipeError, OSError):
            raise WorkerDied(
                f"worker process {self._how_it_ended()} while running this point. Last log lines:\n{_tail(log)}"
            ) from None
        self.points += 1
        return reply

    def _how_it_ended(self) -> str:
        self.process.join(5)
        code = self.process.exitcode
        return (
            f"killed by signal {signal.Signals(-code).name}"
            if code is not None and code < 0
            else f"exited with code {code}"
        )

    def kill(self) -> None:
        if self.own_group and self.process.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)  # it and anything it started
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)

    def ask_to_stop(self) -> None:
        """Ask the worker to end once it is idle, without waiting for it (:meth:`close` waits)."""
        if self.process.is_alive():
            with contextlib.suppress(OSError, BrokenPipeError):
                self._conn.send(None)

    def close(self) -> None:
        if self.process.is_alive():
            self.ask_to_stop()  # a second request, after ask_to_stop's, is never read: harmless
            self.process.join(10)
        self.kill()
        self.startup_log.unlink(missing_ok=True)
