"""One sweep at a time in a sweep folder.

Two sweeps into one ``hydra.sweep.dir`` (or a ``resume=true`` while the first still runs)
would overwrite each other's ``result.json``. The sweep holds an exclusive ``flock`` on
``<sweep>/.shardlab.lock`` for as long as its process lives; the kernel drops it when the
process ends, however it ends, so a killed sweep never leaves a stale lock. The file says
who holds it.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from runner.command import this_command

LOCK_NAME = ".shardlab.lock"
_held: list = []  # open lock files: kept for the life of the process


class FolderInUse(RuntimeError):
    """Another live process holds the folder's lock; the message names it."""


def hold(folder: Path) -> None:
    """Take ``folder``'s lock for the rest of this process, or raise :class:`FolderInUse`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        try:
            who = json.loads(f.read() or "{}")
        except ValueError:
            who = {}
        f.close()
        raise FolderInUse(
            f"{folder} is in use by another sweep (pid {who.get('pid', '?')} on {who.get('host', '?')}, "
            f"started {who.get('started', '?')}: {who.get('command', '?')}); wait for it to end or "
            "choose another hydra.sweep.dir"
        ) from None
    f.seek(0)
    f.truncate()
    f.write(
        json.dumps(
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started": time.strftime("%H:%M:%S"),
                "command": " ".join([this_command(), *sys.argv[1:]]),
            }
        )
    )
    f.flush()
    _held.append(f)
