"""shardlab.runner: configs in, measured and traced sharded JAX programs out.

Three rooms, along the process boundary:

* :mod:`runner.sweep` - the Hydra process: ``run(cfg)`` (:mod:`.sweep.point`), the sweep's
  callbacks, progress lines, rounds, folder lock and the handles on worker processes;
* :mod:`runner.worker` - the JAX process that those handles spawn (:mod:`.worker.serve`): one
  point measured (:mod:`.worker.measure`: programs, timing, tracing, meshes, the ceiling, the
  result check);
* :mod:`runner.config` - what both need: the config schema, the spec a point is turned into and
  every value check (all before any device work), the memory estimate, the process settings.

The worker never imports the sweep side, and config imports neither (``tests/project/test_layering.py``).
Importing this package does not import JAX: JAX starts in the worker, after the process-wide
settings are in place. From :mod:`analysis` the runner takes only the book, the run-folder
layout, the trace and HLO readers and the timing statistics (and the report at the end of a
sweep).
"""

__all__ = ["run"]


def __getattr__(name: str):
    # ``from runner import run`` without importing the sweep side (Hydra, OmegaConf) into every
    # process that imports a runner module: the worker imports runner.worker.serve only
    if name == "run":
        from runner.sweep.point import run

        return run
    raise AttributeError(f"module 'runner' has no attribute {name!r}")
