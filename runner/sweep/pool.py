"""The worker pool: the one live worker of this process (or process group, for
``distributed=local``), started when a point needs it and replaced when it dies or a point
needs other process-wide settings."""

from __future__ import annotations

import atexit

from runner.config.jaxenv import MODE_ENV
from runner.sweep.distributed import ProcessGroup
from runner.sweep.workers import Worker

_current = None  # a Worker, or a runner.sweep.distributed.ProcessGroup for distributed=local


def get_worker(env: dict):
    """The live worker for ``env``, starting one if there is none or its env differs."""
    global _current
    if _current is not None and (_current.env != env or not _current.alive()):
        _current.close()
        _current = None
    if _current is None:
        if env.get(MODE_ENV) == "local":
            _current = ProcessGroup(env)
        else:
            _current = Worker(env)
        # multiprocessing registers its own exit handler (terminate, then join, daemon children)
        # when the first worker starts; atexit runs last-registered first, so move ours after it:
        # workers are asked to stop before anything joins them.
        atexit.unregister(discard_worker)
        atexit.register(discard_worker)
    return _current


def release_worker() -> None:
    """Ask the current worker to stop and go on without waiting: its exit (JAX's teardown,
    about a second here) overlaps what the sweep does next. :func:`discard_worker` waits."""
    if _current is not None:
        _current.ask_to_stop()


def discard_worker() -> None:
    """Stop the current worker (end of a sweep, or after it died)."""
    global _current
    if _current is not None:
        _current.close()
        _current = None


atexit.register(discard_worker)
