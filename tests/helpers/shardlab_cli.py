"""Run shardlab as a user does, in a process of its own: ``python -m runner ...`` and
``python -m analysis ...``; and see which of its processes are still alive afterwards.

Tests import it as ``from shardlab_cli import runner``: tests/conftest.py puts tests/helpers/ on
sys.path, as it does for ``hlo_samples`` and ``small_sweep`` (the test files themselves are
imported with ``--import-mode=importlib``, so none is on sys.path).

The child inherits this process's environment, so the per-session ``SHARDLAB_CEILING_DIR``
and ``SHARDLAB_WORKER_LOG_DIR`` that tests/conftest.py sets reach every spawned shardlab;
``env`` adds to that environment, it never replaces it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("runner", "analysis")


def command(package: str, *args: object) -> list[str]:
    """``[python, "-m", package, *args]`` with every argument as a string."""
    if package not in PACKAGES:
        raise ValueError(f"package={package!r}: must be one of {', '.join(PACKAGES)}")
    return [sys.executable, "-m", package, *map(str, args)]


def _where(cwd: str | os.PathLike, env: Mapping[str, str] | None) -> dict:
    """The keywords both ways of starting share: the folder, the environment, text output."""
    # env=None inherits as it is; a mapping is laid over this process's environment, so the
    # session folders conftest.py set are never dropped by a test that adds one variable
    return {"cwd": cwd, "env": None if env is None else {**os.environ, **env}, "text": True}


def shardlab(
    package: str,
    *args: object,
    cwd: str | os.PathLike = REPO_ROOT,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
    expect: int | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m <package> *args`` in ``cwd`` to its end and return what it did (text
    stdout and stderr). With ``expect``, assert that it exited with that code, showing the
    end of what it printed otherwise."""
    proc = subprocess.run(command(package, *args), capture_output=True, timeout=timeout, **_where(cwd, env))
    if expect is not None:
        assert proc.returncode == expect, (
            f"exit {proc.returncode}, not {expect}:\n{(proc.stdout + proc.stderr)[-3000:]}"
        )
    return proc


def runner(*args: object, **kw) -> subprocess.CompletedProcess[str]:
    """``python -m runner *args`` (the ``shardlab`` command); keywords as for :func:`shardlab`."""
    return shardlab("runner", *args, **kw)


def analysis(*args: object, **kw) -> subprocess.CompletedProcess[str]:
    """``python -m analysis *args`` (the ``shardlab-analysis`` command); keywords as for :func:`shardlab`."""
    return shardlab("analysis", *args, **kw)


def start(
    package: str,
    *args: object,
    cwd: str | os.PathLike = REPO_ROOT,
    env: Mapping[str, str] | None = None,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    new_session: bool = False,
) -> subprocess.Popen[str]:
    """Start ``python -m <package> *args`` and return at once, for a test that signals or kills
    it mid-run or reads its lines as they come. ``new_session`` puts it in a session of its
    own, so a signal the test sends reaches it alone, not pytest."""
    how = _where(cwd, env)
    return subprocess.Popen(command(package, *args), stdout=stdout, stderr=stderr, start_new_session=new_session, **how)


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc's parent links)."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(d.name)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        out.update(kids)
        todo += kids
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return False


def gone_within(pids: set[int], seconds: float) -> set[int]:
    """The pids still alive after ``seconds``."""
    deadline = time.time() + seconds
    while time.time() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    return {p for p in pids if alive(p)}


def _is_report_process(pid: int) -> bool:
    try:
        return b"runner.sweep.report_process" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def wait_for_workers(main: subprocess.Popen, want: int, timeout: float = 60) -> set[int]:
    """The processes below ``main`` once ``want`` of them are workers (the sweep's report
    process, :mod:`runner.sweep.report_process`, is not counted but is returned)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        kids = descendants(main.pid)
        if sum(not _is_report_process(k) for k in kids) >= want:
            return kids
        time.sleep(0.2)
    raise AssertionError(f"the sweep started {len(descendants(main.pid))} processes, not {want}")
