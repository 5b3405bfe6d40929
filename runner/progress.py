"""A sweep's progress in the log: one line as each point starts.

``[3/17] op.size_bytes=4KiB | elapsed 0:05 | about 0:31 left (2.1 s a point)``

Hydra's BasicLauncher runs the points one after another in this process and tells the
callbacks as each starts and ends. It does not hand the callbacks its job list, so the
count N is worked out the way BasicSweeper builds that list: the product of the sweep's
values (``hydra.sweeper.params`` plus the command line's ``hydra.overrides.task``). With
another sweeper the count is unknown and the line just says which point is running.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from hydra.core.utils import JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("shardlab")
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def count_jobs(config: DictConfig) -> int | None:
    """How many jobs BasicSweeper will launch for ``config``, or None if that can't be known."""
    sweeper = OmegaConf.select(config, "hydra.sweeper") or {}
    if sweeper.get("_target_") != BASIC_SWEEPER:
        return None
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
    args += list(OmegaConf.select(config, "hydra.overrides.task") or [])
    try:
        overrides = OverridesParser.create().parse_overrides(args)
        return len(BasicSweeper.split_arguments(overrides, None)[0])
    except Exception:  # e.g. a glob() sweep, which needs the config loader: count unknown
        return None


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class ProgressCallback(Callback):
    """Log ``[k/N] <what varies> | elapsed | about T left`` as each sweep point starts.

    The estimate is the points left times the larger of the mean time of the points
    measured so far and the latest one's (resumed points, which take no time, are left
    out): sweeps mostly grow their sizes, and the mean alone runs low.
    """

    def __init__(self) -> None:
        self.total: int | None = None
        self.t_start: float | None = None
        self.t_job: float | None = None
        self.measured: list[float] = []

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        self.total = count_jobs(config)
        self.t_start = time.perf_counter()
        self.measured = []
        if config.get("resume"):
            sweep_dir = Path(config.hydra.sweep.dir)
            found = len(list(sweep_dir.glob("*/result.json")))
            if found:
                log.info("resume: %s holds %d result(s); ok ones of the same config are kept", sweep_dir, found)
            else:
                log.warning("resume=true but %s holds no results: every point runs (pass "
                            "hydra.sweep.dir=<the sweep folder> to resume it)", sweep_dir)

    def on_job_start(self, config: DictConfig, **kwargs) -> None:
        if self.t_start is None:  # a single run (not a multirun): nothing to count
            return
        self.t_job = time.perf_counter()
        k = int(OmegaConf.select(config, "hydra.job.num", default=0)) + 1
        what = OmegaConf.select(config, "hydra.job.override_dirname", default="") or "(defaults)"
        head = f"[{k}/{self.total}]" if self.total else f"[{k}]"
        parts = [f"{head} {what}", f"elapsed {_clock(self.t_job - self.t_start)}"]
        if self.total and self.measured:
            # Sweeps mostly grow their sizes, so the latest point beats the mean as a guess.
            per_point = max(sum(self.measured) / len(self.measured), self.measured[-1])
            parts.append(f"about {_clock(per_point * (self.total - k + 1))} left ({per_point:.1f} s a point)")
        log.info(" | ".join(parts))

    def on_job_end(self, config: DictConfig, job_return=None, **kwargs) -> None:
        if self.t_job is None:
            return
        done = job_return is not None and job_return.status == JobStatus.COMPLETED
        result = job_return.return_value if done else None
        if not (isinstance(result, dict) and result.get("resumed")):
            self.measured.append(time.perf_counter() - self.t_job)
        self.t_job = None
