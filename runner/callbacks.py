"""Hydra callbacks: stop the worker when Hydra is done, and write the sweep's report."""
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
        discard_worker()
        from analysis.report import write_report

        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            index = write_report(sweep_dir)
        except Exception:  # the measurements are on disk; a report bug must not hide them
            log.exception("could not write the report for %s; rebuild it with "
                          "`python -m analysis report %s`", sweep_dir, sweep_dir)
            return
        log.info("report: %s", index)
