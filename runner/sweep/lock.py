"""One sweep at a time in a sweep folder.

Two sweeps into one ``hydra.sweep.dir`` (or a ``resume=true`` while the first still runs)
would overwrite each other's ``result.json``. The sweep holds a ``flock`` on
``<sweep>/.shardlab.lock`` for as long as its process lives; the kernel drops it when the
process ends, however it ends, so a killed sweep never leaves a stale lock. The file says
who holds it.

A sweep of one process (``distributed=none`` or ``local``) holds the lock exclusively. With
``distributed=auto`` every host runs the same command into the same (shared) folder, so its
processes hold the lock *shared*: they all get it, while a one-process sweep or resume into
the folder is refused, and so is an ``auto`` process while a one-process sweep holds it.
(Two different ``auto`` sweeps into one folder are not told apart by the lock; the sweep
folder's own check, :mod:`runner.sweep.folder`, refuses a folder holding another sweep.)

A file system that cannot lock (``ENOLCK``/``ENOSYS``: NFS without its lock service, Lustre
without ``-o flock``) is one line naming it; ``SHARDLAB_NO_LOCK=1`` goes on without the lock.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from runner.sweep.command import this_command

LOCK_NAME = ".shardlab.lock"
NO_LOCK_ENV = "SHARDLAB_NO_LOCK"  # "1": take no lock (a file system that cannot give one)
# errno values that mean "this file system does not lock", not "someone else holds it"
_NO_LOCKS = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)
# open lock files by folder, kept for the life of the process (None: this process took no lock)
_held: dict[str, object] = {}


class FolderInUse(RuntimeError):
    """Another live process holds the folder's lock; the message names it."""


class CannotLock(FolderInUse):
    """The folder's file system cannot give a lock; the message names it and what to do."""


def hold(folder: Path, shared: bool = False) -> None:
    """Take ``folder``'s lock for the rest of this process (``shared``: with the other
    processes of a ``distributed=auto`` sweep), or raise :class:`FolderInUse` /
    :class:`CannotLock`. Taking a folder this process already holds does nothing."""
    folder = Path(folder)
    key = str(folder.resolve())
    if key in _held:
        return
    folder.mkdir(parents=True, exist_ok=True)
    if os.environ.get(NO_LOCK_ENV) == "1":
        _held[key] = None
        return
    path = folder / LOCK_NAME
    f = open(path, "a+")
    try:
        fcntl.flock(f, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        who = _holder(f.read())
        f.close()
        raise FolderInUse(
            f"{folder} is in use by another shardlab run (pid {who.get('pid', '?')} on {who.get('host', '?')}, "
            f"started {who.get('started', '?')}: {who.get('command', '?')}); wait for it to end or "
            "choose another folder"
        ) from None
    except OSError as exc:
        f.close()
        if exc.errno not in _NO_LOCKS:
            raise
        raise CannotLock(no_lock_message(path, exc)) from None
    f.truncate(0)
    # one line in one write: processes sharing the lock may write at once, and the last
    # whole line says who holds it (:func:`_holder`)
    who = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%H:%M:%S"),
        "command": " ".join([this_command(), *sys.argv[1:]]),
        "shared": shared,
    }
    f.write(json.dumps(who) + "\n")
    f.flush()
    _held[key] = f


def _holder(text: str) -> dict:
    """Who holds the lock: the lock file's last line that is a JSON object, else ``{}``."""
    for line in reversed(text.splitlines()):
        try:
            who = json.loads(line)
        except ValueError:
            continue
        if isinstance(who, dict):
            return who
    return {}


def no_lock_message(path: Path, exc: OSError) -> str:
    """One line: the file system at ``path`` cannot lock (its type and mount point from
    /proc/mounts where readable), and what to do."""
    fs = file_system(path)
    where = f"a {fs[0]} file system mounted at {fs[1]}" if fs else "its file system"
    return (
        f"cannot lock {path}: {where} does not give file locks ({exc.strerror or exc}); put "
        "hydra.sweep.dir on one that does (a local disk, NFS with its lock service, Lustre mounted "
        f"with -o flock), or set {NO_LOCK_ENV}=1 to go on without the lock and make sure no other sweep "
        "uses the folder"
    )


def file_system(path: Path, mounts: str = "/proc/mounts") -> tuple[str, str] | None:
    """``(type, mount point)`` of the file system holding ``path``: the longest mount point
    above it in ``mounts``; None when that cannot be read."""
    try:
        target = os.path.realpath(path)
        lines = Path(mounts).read_text().splitlines()
    except OSError:
        return None
    best: tuple[str, str] | None = None
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")  # /proc/mounts escapes spaces
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[1])):
            best = (parts[2], point)
    return best


def holder(folder: Path) -> dict | None:
    """Who holds ``folder``'s lock now (what the lock file says, maybe ``{}``), or None when no
    other live process does. Probes without taking the lock."""
    path = Path(folder) / LOCK_NAME
    if str(Path(folder).resolve()) in _held or not path.is_file():
        return None
    try:
        with open(path) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return _holder(f.read())
            fcntl.flock(f, fcntl.LOCK_UN)
    except OSError:  # unreadable, or a file system without locks: nothing to tell
        return None
    return None
