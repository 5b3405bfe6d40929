"""shardlab.runner: configs in, measured and traced sharded JAX programs out.

Importing this package does not import JAX: JAX starts in the worker process
(:mod:`runner.worker`), after the process-wide settings are in place.

Reading order: :mod:`.job` (``run(cfg)``) -> :mod:`.spec` (every value check) -> :mod:`.pool`
and :mod:`.worker` (the JAX process) -> :mod:`.measure` (one point: :mod:`.programs`,
:mod:`.timing`, :mod:`.tracing`). May import from :mod:`analysis` only the book, the run-folder
layout, the trace and HLO readers and the timing statistics (and the report at the end of a
sweep).
"""

from runner.job import run

__all__ = ["run"]
