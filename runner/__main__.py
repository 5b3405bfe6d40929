"""``python -m runner [overrides]``: Hydra turns the config into one ``run(cfg)`` call."""
from __future__ import annotations

import logging
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from runner.errors import PlatformError
from runner.job import run
from runner.schema import register_configs

register_configs()
log = logging.getLogger("shardlab")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> dict:
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    # A sweep runs round 1 of each point now and interleaves the other rounds at its end
    # (runner.callbacks); a single run does all its rounds at once.
    try:
        result = run(cfg, rounds=1 if multirun else None)
    except PlatformError as exc:  # no point of this run can measure what it asks for: stop now
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    if result["status"] != "ok" and HydraConfig.get().mode == RunMode.RUN:
        # A single run that failed exits non-zero; in a multirun the sweep goes on.
        sys.exit(2 if result["error_type"] == "ConfigError" else 1)
    return result  # Hydra hands it to the callbacks (runner.progress reads ``resumed``)


if __name__ == "__main__":
    main()
