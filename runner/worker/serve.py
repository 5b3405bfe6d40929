"""The worker process: JAX starts here once and serves the sweep's points one after another.

The sweep process spawns it (:class:`runner.sweep.workers.Worker`) and sends it points over a
pipe; :func:`serve` is its whole life. It is the one place where process-wide JAX settings are
applied (:mod:`runner.config.jaxenv`), and it keeps each point's inputs and compiled programs
from round 1 for the point's later rounds (:mod:`runner.worker.point_cache`). A point that
kills it (an abort inside XLA, a segfault, the OOM killer) loses only itself: the sweep side
records what it saw and starts a fresh worker. Nothing here imports the sweep side.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from analysis.runs.rundir import log_name
from runner.config.jaxenv import MODE_ENV, start_jax
from runner.errors import ConfigError

# Tests set this to a size in bytes; the worker then aborts (SIGABRT) on that sweep point.
TEST_ABORT_ENV = "SHARDLAB_TEST_ABORT_SIZE_BYTES"
# With TEST_ABORT_ENV in a multi-process run: only the process with this index aborts.
TEST_ABORT_PROCESS_ENV = "SHARDLAB_TEST_ABORT_PROCESS"
# Tests set this to a size in bytes; the worker then hangs on that sweep point (for timeout_s).
TEST_HANG_ENV = "SHARDLAB_TEST_HANG_SIZE_BYTES"


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


def serve(conn, env: dict, startup_log: str, parent_pid: int) -> None:
    """Worker main loop: start JAX once, then run the points sent over ``conn``."""
    die_with_parent(parent_pid)
    # Ctrl-C reaches the whole foreground process group: the parent decides what happens (it
    # writes the report and discards this worker), so the worker neither dies mid-reply nor
    # prints a traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if env.get(MODE_ENV) == "local":
        os.setpgid(0, 0)  # its own process group: the parent can end it and anything it started
    with _output_to(Path(startup_log)):  # JAX's start-up (and distributed init) messages
        try:
            jax = start_jax(env)
            # after start_jax: these import JAX, which must find the process settings in place
            from runner.worker import point_cache
            from runner.worker.measure import as_json, measure
            from runner.worker.point_round import retime
        except Exception as exc:
            traceback.print_exc()
            said = type(exc).__name__ == "ConfigError"  # the config's fault, said in full: no log to read
            conn.send({"ready": False, "error": f"{type(exc).__name__}: {exc}", "said": said})
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
        kind, spec, point_dir, extra = msg
        point_dir = Path(point_dir)
        record: dict = {}
        with _output_to(point_dir / log_name(index)):
            try:
                if os.environ.get(TEST_ABORT_ENV) == str(spec["op"].size_bytes) and os.environ.get(
                    TEST_ABORT_PROCESS_ENV, str(index)
                ) == str(index):
                    os.abort()  # test-only hook: lets the tests prove crash isolation
                if os.environ.get(TEST_HANG_ENV) == str(spec["op"].size_bytes):
                    time.sleep(1e6)  # test-only hook: a point that never ends, for timeout_s
                if kind == "retime":  # a later round: the round itself is the reply
                    reply = {
                        "status": "ok",
                        "record": {},
                        "round": retime(spec, extra["round"], extra.get("K"), extra.get("loop", True)),
                    }
                else:
                    measure(spec, point_dir, record)
                    reply = {"status": "ok", "record": as_json(record)}
            except ConfigError as exc:
                point_cache.drop(spec)  # a failed point takes no later round: free its inputs
                reply = {"status": "failed", "error_type": "ConfigError", "error": str(exc), "record": as_json(record)}
            except BaseException as exc:  # noqa: BLE001 - one point's failure must not end the sweep
                # This process ignores SIGINT, so a KeyboardInterrupt (or SystemExit, or any
                # BaseException) here was raised by the point's own code, e.g. a user's function:
                # a failed point like any other, its traceback in the point's log. It may have
                # left JAX half-way through something, so a fresh worker serves the next point.
                point_cache.drop(spec)
                traceback.print_exc()
                if not isinstance(exc, Exception):
                    record["restart_worker"] = True
                reply = {
                    "status": "failed",
                    "error_type": type(exc).__name__,
                    "error": str(exc) or type(exc).__name__,
                    "record": as_json(record),  # the typed sections it had, as JSON
                    "traceback": traceback.format_exc(),
                }
        conn.send(reply)
        if record.get("restart_worker"):  # this process's state is suspect (a profiler left running)
            return
