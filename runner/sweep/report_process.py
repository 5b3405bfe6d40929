"""The report's own process, started with the sweep so the report is ready soon after the last round.

Writing a sweep's report begins with importing pandas, matplotlib, seaborn and scipy.stats:
about 2 s of CPU here, which the Hydra process deliberately never loads while it runs points
(docs/performance.md). Done after the last round, that import was most of the wait for the
report. So a sweep starts this process beside its worker: it imports the report's modules under
the idle scheduling class (``SCHED_IDLE``, else nice 19), so it only takes CPU nobody else wants
and never slows a point being timed, says ``ready`` and waits. After the last round the sweep
sends it the folder; it writes the report and answers with what the closing summary needs (the
report's path or why there is none, the claims' lines, what it logged).

A process still importing when the last round ends (a short sweep, or one whose worker kept every
CPU busy: an idle-class process then gets none) is let out of the idle class and waited for while
it takes CPU: it is as far along as any fresh import would be, and the CPU is free now. Whenever
it cannot help, the sweep writes the report itself, as before: it cannot run (idle class, no idle
CPU, not allowed out), it took no CPU for :data:`STALL_S`, it died, or it has not answered
within :data:`ANSWER_S` (every report file is written whole, so a report stopped half way leaves
nothing cut off). It ends with the sweep: the sweep kills it on exit, and it dies with its parent
(``PR_SET_PDEATHSIG``, and an end of file on its stdin).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import analysis.report

READY = "ready"
LEAVES_IDLE = "leaves-idle"  # said after READY by a process allowed to leave the idle class
ANSWER_S = 30.0  # the 1000-point report takes about 10 s here; a stalled process is given up on
STALL_S = 2.0  # a process still importing that took no CPU for this long has stalled (its imports: 2-3 s of CPU here)

_current: ReportProcess | None = None


class ReportProcess:
    """The handle the sweep holds on the report's process (module docstring)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", __name__, str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # it answers on stdout; a crash means the sweep writes the report
            text=True,
            bufsize=1,
        )
        self._ready = False
        self.can_leave_idle = False  # whether it may take normal CPU shares for the report itself
        self.answered = False  # it wrote the report it was sent and said so
        self.waited_s: float | None = None  # how long the sweep waited for its imports (none: 0)

    def ready(self) -> bool:
        """Whether its imports are done (it said so), without waiting."""
        if not self._ready and self.proc.poll() is None:
            readable, _, _ = select.select([self.proc.stdout], [], [], 0)
            said = self.proc.stdout.readline().split() if readable else []
            self._ready = said[:1] == [READY]
            self.can_leave_idle = said[1:] == [LEAVES_IDLE]
        return self._ready and self.proc.poll() is None

    def wait_ready(self) -> bool:
        """Whether it is ready, waiting for one still importing (let out of the idle class where
        this process may; the sweep asks only once its rounds are done) for as long as it takes
        CPU time: one that took none for :data:`STALL_S`, or not ready within :data:`ANSWER_S`,
        is given up on."""
        if self.ready():
            return True
        if self.proc.poll() is not None or not (_unidle(self.proc.pid) or idle_cpu()):
            return False  # an idle-class process on busy CPUs would barely run: not waited for
        t0 = time.monotonic()
        seen = _cpu_ticks(self.proc.pid)
        while not self.ready() and self.proc.poll() is None and time.monotonic() - t0 < ANSWER_S:
            select.select([self.proc.stdout], [], [], STALL_S)
            now = _cpu_ticks(self.proc.pid)
            if now is not None and now == seen and not self.ready():
                break  # stalled (stopped, or starved of CPU)
            seen = now
        self.waited_s = time.monotonic() - t0
        return self.ready()

    def write_report(self, sweep_dir: Path, since: float, answer_s: float = ANSWER_S) -> dict | None:
        """Have it write ``sweep_dir``'s report; its answer, or None when the sweep must write it."""
        # an idle-class process runs only on CPU nobody else wants: where it may not leave that
        # class (not root, no CAP_SYS_NICE) and no CPU is free now, the sweep writes the report
        if not self.wait_ready() or not (self.can_leave_idle or idle_cpu()):
            self.close()
            return None
        try:
            self.proc.stdin.write(json.dumps({"sweep_dir": str(sweep_dir), "since": since}) + "\n")
            self.proc.stdin.flush()
            readable, _, _ = select.select([self.proc.stdout], [], [], answer_s)
            line = self.proc.stdout.readline() if readable else ""
            out = json.loads(line) if line else None
        except (OSError, ValueError):  # it died between ready and the answer
            out = None
        finally:
            self.close()  # answered or not, it is of no more use: not waited for
        self.answered = out is not None
        return out

    def close(self) -> None:
        """Kill it, if it still runs, and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                f.close()


def start() -> None:
    """Start the sweep's report process (one per sweep; a failure to start costs nothing)."""
    global _current
    stop()
    try:
        _current = ReportProcess()
    except OSError:
        _current = None


def take() -> ReportProcess | None:
    """The sweep's report process, handed over once (the caller uses it, then it is gone)."""
    global _current
    current, _current = _current, None
    return current


def stop() -> None:
    """Kill the sweep's report process, if any (an interrupted sweep, the process exiting)."""
    current = take()
    if current is not None:
        current.close()


atexit.register(stop)


def claim_lines(sweep_dir: Path, since: float) -> list[str]:
    """The chapter's claims and their verdicts (holds, fails, cannot tell at this noise), from
    the ``claims.csv`` the report just wrote (one from an earlier report is not this one's)."""
    import pandas as pd

    from analysis.claims import console_lines

    path = sweep_dir / "claims.csv"
    try:
        if path.stat().st_mtime < since - 1:
            return []
        lines = console_lines(pd.read_csv(path))
    except (OSError, ValueError, KeyError):
        return []
    return ["the chapter's claims, checked here:", *lines] if lines else []


# -- the report's process -----------------------------------------------------------------


def _cpu_ticks(pid: int) -> int | None:
    """CPU time ``pid`` has taken so far, in clock ticks (``/proc/PID/stat`` utime + stime); None
    where that cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def _die_with_parent(parent_pid: int) -> None:
    """Be killed when the sweep's process ends, however it ends (Linux), or end now if it
    already has (before the kernel was asked)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:
        sys.exit(0)


def idle_cpu(loadavg: str | None = None) -> bool:
    """Whether a CPU is free now, besides the one asking: fewer runnable tasks than CPUs in
    ``/proc/loadavg``'s fourth field (``running/total``); True where that cannot be read."""
    try:
        text = Path("/proc/loadavg").read_text() if loadavg is None else loadavg
        running = int(text.split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return True
    return running - 1 < (os.cpu_count() or 1)


def _idle() -> bool:
    """Take only CPU time nobody else wants (the idle class; else the lowest priority). Whether
    this process may later leave that class (:func:`_unidle`): root or CAP_SYS_NICE."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        with contextlib.suppress(OSError):
            os.nice(19)
        return False
    if not _unidle():
        return False
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    return True


def _unidle(pid: int = 0) -> bool:
    """Back to normal scheduling (this process, or ``pid``'s main thread), where allowed; whether it was."""
    try:
        os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
    except (AttributeError, OSError):
        return False
    return True


class _Kept(logging.Handler):
    """Keeps what the report logs, for the sweep to log under the same names."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[list] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append([record.name, record.levelno, record.getMessage()])


def answer(sweep_dir: Path, since: float, keep_log: bool = False) -> dict:
    """Write the report of ``sweep_dir``; what the closing summary needs, as JSON-able data
    (``keep_log``: with what the report logged, for a process whose log nobody sees)."""
    t0 = time.perf_counter() - max(0.0, time.time() - since)  # the report's build_s.txt counts from ``since``
    from analysis.sweep import MixedSweepError  # brings pandas: only when a report is written

    kept = _Kept()
    if keep_log:
        logging.getLogger().addHandler(kept)
        logging.getLogger().setLevel(logging.INFO)
    try:
        out = {"index": str(analysis.report.write_report(sweep_dir, t0=t0)), "claims": claim_lines(sweep_dir, since)}
    except MixedSweepError as exc:
        out = {"mixed": str(exc)}
    except OSError as exc:
        out = {"oserror": {"filename": exc.filename, "strerror": exc.strerror or str(exc)}}
    except Exception:  # noqa: BLE001 - the sweep says so, with the traceback, and how to rebuild
        out = {"exception": traceback.format_exc()}
    return {**out, "log": kept.records}


def import_the_report() -> None:
    """Import what writing a report imports (while idle, before the sweep asks for one)."""
    import pandas  # noqa: F401

    import analysis.claims  # noqa: F401
    import analysis.report.sweep_report  # noqa: F401 - the imports are the point
    import analysis.report.tensorboard_export  # noqa: F401 - imported by write_report: 0.2-0.3 s of protos


def main() -> None:
    """Import the report's modules while idle, say ready, write the one report asked for."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the sweep's to handle
    _die_with_parent(int(sys.argv[1]))
    leaves_idle = _idle()
    import_the_report()
    print(READY, LEAVES_IDLE if leaves_idle else "", flush=True)
    line = sys.stdin.readline()
    if not line:  # the sweep ended without a report (interrupted, or another process reports)
        return
    job = json.loads(line)
    _unidle()
    print(json.dumps(answer(Path(job["sweep_dir"]), float(job["since"]), keep_log=True)), flush=True)


if __name__ == "__main__":
    main()
