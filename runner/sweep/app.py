"""The Hydra app: a composed config into one ``run(cfg)`` call (:func:`start` is what
``python -m runner`` and ``shardlab`` run, through :mod:`runner.__main__`)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
import hydra.core.utils as hydra_utils
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from runner.config.schema import CONF_DIR
from runner.config.store import register_configs
from runner.errors import OutputError, PlatformError
from runner.sweep import ctrl_c
from runner.sweep.callbacks import armed, interrupted
from runner.sweep.held_stderr import HeldStderr, one_line, release
from runner.sweep.point import run
from runner.sweep.pool import discard_worker

register_configs()
log = logging.getLogger("shardlab")


def _one_line_when_config_cannot_be_saved() -> None:
    """Hydra saves each run's composed config (``.hydra/``) before the run starts; a full disk
    or a folder made read-only there was Hydra's traceback. One line instead, and the run
    stops as it stops when a ``result.json`` cannot be written (a SystemExit passes through
    Hydra's error report). Hydra 1.3 calls ``hydra.core.utils._save_config``; without it, nothing
    changes."""
    save = getattr(hydra_utils, "_save_config", None)
    if save is None or getattr(save, "_shardlab", False):
        return

    def saved_or_one_line(cfg, filename, output_dir):
        try:
            return save(cfg, filename, output_dir)
        except OSError as exc:
            discard_worker()
            print(
                f"error: cannot write {Path(output_dir) / filename}: {exc.strerror or exc}; nothing of this point "
                "was measured (a sweep's earlier points are on disk: resume=true finishes it once there is room)",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(1) from None

    saved_or_one_line._shardlab = True
    hydra_utils._save_config = saved_or_one_line


_one_line_when_config_cannot_be_saved()
_task_ran = False  # set once Hydra has composed a config and handed it to the task


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")  # checkout or installed copy
def app(cfg: DictConfig) -> dict:
    global _task_ran
    _task_ran = True
    release()  # composed: Hydra's and our own messages go straight to the terminal
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    # A sweep runs round 1 of each point now and interleaves the other rounds at its end
    # (runner.sweep.callbacks); a single run does all its rounds at once.
    try:
        if multirun:  # Ctrl-C: see runner.sweep.callbacks (a sweep keeps what it measured)
            with armed():
                result = run(cfg, rounds=1)
        else:
            result = run(cfg)
    except PlatformError as exc:  # no point of this run can measure what it asks for: stop now
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except OutputError as exc:
        discard_worker()
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C: no traceback; a sweep leaves a report of what finished
        discard_worker()
        if multirun:
            interrupted(Path(HydraConfig.get().sweep.dir), f"at point {HydraConfig.get().job.num + 1}")
        else:
            print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
    if result["status"] != "ok" and HydraConfig.get().mode == RunMode.RUN:
        # A single run that failed exits non-zero; in a multirun the sweep goes on.
        sys.exit(2 if result["error_type"] == "ConfigError" else 1)
    return result  # Hydra hands it to the callbacks (runner.sweep.progress reads ``resumed``)


def start() -> None:
    """Run the Hydra app. Hydra reports a config it cannot compose (an unknown option, a value
    outside a key's choices: its message lists them) and exits 1, which here means "a point
    failed": such an error exits 2, as every bad config."""
    held = HeldStderr(sys.stderr)
    sys.stderr = held
    try:
        app()
    except SystemExit as exc:
        if exc.code == 1 and not _task_ran and ctrl_c.received:  # Hydra reported what a Ctrl-C broke
            held.held = None
            raise KeyboardInterrupt from None
        if exc.code == 1 and not _task_ran and held.held is not None:
            sys.stderr = held.real
            print(f"error: {one_line(held.text())}", file=sys.stderr)
            held.held = None
            raise SystemExit(2) from None
        raise
    finally:
        held.release()
        if sys.stderr is held:
            sys.stderr = held.real
