"""shardlab.runner: configs in, measured and traced sharded JAX programs out.

Importing this package does not import JAX: JAX starts in the worker process
(:mod:`runner.worker`), after the process-wide settings are in place.
"""

from runner.job import run

__all__ = ["run"]
