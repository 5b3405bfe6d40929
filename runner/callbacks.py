"""Hydra callbacks: stop the worker when Hydra is done; at the end of a sweep, time the
points' later rounds (interleaved, :mod:`runner.rounds`) and write the report."""
from __future__ import annotations

import logging
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from runner.pool import discard_worker

log = logging.getLogger("shardlab")


class ReportCallback(Callback):
    """At the end of a multirun, build ``report/`` from the sweep folder on disk."""

    def on_run_end(self, config: DictConfig, **kwargs) -> None:
        discard_worker()

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        from analysis.report import write_report
        from analysis.rundir import job_dirs
        from runner.rounds import interleave

        from runner import job

        sweep_dir = Path(config.hydra.sweep.dir)
        if job.last_process_index:  # a cluster run: every host ran the sweep; process 0 reports
            discard_worker()
            log.info("process %d: the report is process 0's to write (or `python -m analysis report %s`)",
                     job.last_process_index, sweep_dir)
            return
        if int(config.timing.rounds) > 1 and config.distributed.mode != "auto":
            interleave(job_dirs(sweep_dir), int(config.timing.rounds), int(config.timing.seed))
        discard_worker()
        try:
            index = write_report(sweep_dir)
        except Exception:  # the measurements are on disk; a report bug must not hide them
            log.exception("could not write the report for %s; rebuild it with "
                          "`python -m analysis report %s`", sweep_dir, sweep_dir)
            return
        log.info("report: %s", index)
