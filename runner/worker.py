"""Sweep points run in a worker process that outlives them.

One JAX process serves every point of a sweep (JAX starts and caches once), yet a point that
kills its process - an abort inside XLA, a segfault, the OOM killer - or runs past its timeout
only loses itself: the parent records what it saw and starts a fresh worker for the next point
(:mod:`runner.pool` keeps the current one), and it keeps each point's inputs and compiled
programs from round 1 for the point's later rounds (:mod:`runner.point_cache`). The worker is
also the one place where process-wide JAX settings are applied (:mod:`runner.jaxenv`); a point
that needs other settings gets a new worker. With ``distributed=local`` the "worker" is a group
of them, one per JAX process (:class:`runner.distributed.ProcessGroup`), built from the same
:class:`Worker`."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

from analysis.rundir import LOG_NAME, log_name
from runner.errors import WorkerDied
from runner.jaxenv import MODE_ENV

# Tests set this to a size in bytes; the worker then aborts (SIGABRT) on that sweep point.
TEST_ABORT_ENV = "SHARDLAB_TEST_ABORT_SIZE_BYTES"
# With TEST_ABORT_ENV in a multi-process run: only the process with this index aborts.
TEST_ABORT_PROCESS_ENV = "SHARDLAB_TEST_ABORT_PROCESS"
# Tests set this to a size in bytes; the worker then hangs on that sweep point (for timeout_s).
TEST_HANG_ENV = "SHARDLAB_TEST_HANG_SIZE_BYTES"
STARTUP_TIMEOUT_S = 300


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    # An abort inside XLA ends with dozens of stack-frame addresses; the message is above them.
    return "\n".join([t for t in text if not t.lstrip().startswith("@ 0x")][-lines:])


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


# What JAX prints when it cannot use an accelerator that is there (jax 0.4-0.10 wordings).
FALLBACK_MESSAGES = (
    "Falling back to cpu",
    "CUDA-enabled jaxlib is not installed",
    "Unable to initialize backend",
    "TPU backend initialization is taking",
    "No GPU/TPU found",
)
ACCELERATOR_FILES = {
    "/dev/nvidia0": "gpu",
    "/dev/nvidiactl": "gpu",
    "/dev/kfd": "gpu",
    "/dev/accel0": "tpu",
    "/dev/vfio/0": "tpu",
}


def platform_report(jax, startup_log: Path) -> dict:
    """What this JAX process runs on, and any sign that an accelerator is present but unused:
    JAX's own fallback warning in the start-up log, or an accelerator device file."""
    devices = jax.devices()
    backend = jax.default_backend()
    warning = None
    try:
        text = startup_log.read_text(errors="replace")
    except OSError:
        text = ""
    said = next((line.strip() for line in text.splitlines() if any(m in line for m in FALLBACK_MESSAGES)), None)
    present = sorted({kind for path, kind in ACCELERATOR_FILES.items() if os.path.exists(path)})
    if backend == "cpu" and (said or present):
        files = ", ".join(p for p in ACCELERATOR_FILES if os.path.exists(p))
        warning = said or f"a {'/'.join(present)} device file is present ({files})"
    return {
        "backend": backend,
        "device_kind": devices[0].device_kind,
        "device_count": len(devices),
        "process_count": jax.process_count(),
        "accelerator_unused": warning,
        "accelerator_present": present,
    }


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent_pid: int) -> None:
    """End this process when its parent ends, however the parent ends (SIGKILL included):
    a worker left alone would run on unwatched, past its timeout, beside a resumed sweep.

    Linux's ``PR_SET_PDEATHSIG`` delivers SIGKILL when the parent thread exits; where prctl
    is missing, a watcher thread notices the parent is gone within a second. Either way, if
    the parent died before this ran, the process ends now.
    """
    import ctypes
    import threading

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass

    def watch():
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)

    if os.getppid() != parent_pid:
        os._exit(1)
    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


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


def _serve(conn, env: dict, startup_log: str, parent_pid: int) -> None:
    """Worker main loop: start JAX once, then run the points sent over ``conn``."""
    die_with_parent(parent_pid)
    # Ctrl-C reaches the whole foreground process group: the parent decides what happens (it
    # writes the report and discards this worker), so the worker neither dies mid-reply nor
    # prints a traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if env.get(MODE_ENV) == "local":
        os.setpgid(0, 0)  # its own process group: the parent can end it and anything it started
    from runner.jaxenv import start_jax

    with _output_to(Path(startup_log)):  # JAX's start-up (and distributed init) messages
        try:
            jax = start_jax(env)
            from runner import point_cache
            from runner.errors import ConfigError
            from runner.measure import measure, retime
        except Exception as exc:
            traceback.print_exc()
            conn.send({"ready": False, "error": f"{type(exc).__name__}: {exc}"})
            return
    # The parent times the start-up (spawn, imports, JAX start) and checks what JAX found.
    conn.send({"ready": True, **platform_report(jax, Path(startup_log))})
    Path(startup_log).unlink(missing_ok=True)  # only a failed start-up needs it, and a killed parent cannot

    index = jax.process_index()

    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        kind, spec, job_dir, extra = msg
        job_dir = Path(job_dir)
        record: dict = {}
        with _output_to(job_dir / log_name(index)):
            try:
                if os.environ.get(TEST_ABORT_ENV) == str(spec["op"].get("size_bytes")) and os.environ.get(
                    TEST_ABORT_PROCESS_ENV, str(index)
                ) == str(index):
                    os.abort()  # test-only hook: lets the tests prove crash isolation
                if os.environ.get(TEST_HANG_ENV) == str(spec["op"].get("size_bytes")):
                    time.sleep(1e6)  # test-only hook: a point that never ends, for timeout_s
                if kind == "retime":  # a later round: the round itself is the reply
                    reply = {"status": "ok", "record": {}, "round": retime(spec, extra["round"], extra.get("K"))}
                else:
                    measure(spec, job_dir, record)
                    reply = {"status": "ok", "record": record}
            except ConfigError as exc:
                point_cache.drop(spec)  # a failed point takes no later round: free its inputs
                reply = {"status": "failed", "error_type": "ConfigError", "error": str(exc), "record": record}
            except Exception as exc:  # one point's failure must not end the sweep
                point_cache.drop(spec)
                traceback.print_exc()
                reply = {
                    "status": "failed",
                    "error_type": type(exc).__name__,
                    "error": str(exc),
                    "record": record,
                    "traceback": traceback.format_exc(),
                }
        conn.send(reply)
        if record.get("restart_worker"):  # this process's state is suspect (a profiler left running)
            return


class Worker:
    """A spawned worker process and the pipe to it."""

    def __init__(self, env: dict):
        ctx = mp.get_context("spawn")  # never fork a process that may hold JAX threads
        self.env = env
        self.points = 0
        self.start_s: float | None = None  # spawn to JAX ready, known after the first point
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
            target=_serve, args=(child, env, log, os.getpid()), daemon=True, name="shardlab-worker"
        )
        with _environ(env):  # settings read at process start (glibc's malloc) must be there at spawn
            self.process.start()
        child.close()

    def alive(self) -> bool:
        return self.process.is_alive()

    def run(self, spec: dict, job_dir: Path, timeout_s: float, kind: str = "measure", **extra) -> dict:
        """Send one point (``kind`` ``measure``: round 1, or ``retime``: a later round, with
        ``round`` and ``K``); return the worker's reply or raise :class:`WorkerDied`."""
        log = Path(job_dir) / LOG_NAME
        first = not self._start_reported  # the first point served reports the start-up time
        self._start_reported = True
        if self.start_s is None:  # wait for JAX to start; a point's timeout starts after that
            self.wait_ready(STARTUP_TIMEOUT_S)
        self.submit(spec, job_dir, kind, extra)
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
        }
        return reply

    def wait_ready(self, timeout_s: float) -> None:
        """Wait until JAX has started in the worker; raise :class:`WorkerDied` if it does not."""
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
            raise WorkerDied(
                f"the worker could not start JAX: {msg.get('error')}. Last lines of its "
                f"start-up log:\n{_tail(self.startup_log)}"
            )
        self.start_s = time.perf_counter() - self._t_spawn
        self.info = {k: v for k, v in msg.items() if k != "ready"}

    def started(self, job_dir: Path | None = None) -> dict:
        """Wait for JAX to start (once); what it found: backend, device kind and count, and
        ``accelerator_unused`` when an accelerator seems present but JAX is on CPU."""
        if self.start_s is None:
            self.wait_ready(STARTUP_TIMEOUT_S)
        return self.info

    def submit(self, spec: dict, job_dir: Path, kind: str = "measure", extra: dict | None = None) -> None:
        """Send one point without waiting for it (see :meth:`receive`)."""
        try:
            self._conn.send((kind, spec, str(job_dir), extra or {}))
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

    def close(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(OSError, BrokenPipeError):
                self._conn.send(None)
            self.process.join(10)
        self.kill()
        self.startup_log.unlink(missing_ok=True)
