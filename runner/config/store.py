"""What Hydra's app registers before it composes: the schema, the resolvers the configs name
(``geometric``, ``job_num``, ``folder_name``) and every ``sweeps/*.yaml`` as ``+sweep=NAME``.

Apart from :mod:`runner.config.schema` so that the worker, which checks specs against the schema's
rules but never composes, starts without Hydra's config store (0.11-0.12 s of imports here,
before its first point)."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from analysis.book.folders import project_folder
from analysis.runs.sweep_match import folder_name
from runner.config.schema import Config, geometric

SWEEPS_DIR = project_folder("sweeps")


def register_configs() -> None:
    """Register the schema, the ``geometric`` resolver and every ``sweeps/*.yaml`` as
    ``+sweep=NAME`` (global package)."""
    OmegaConf.register_new_resolver("geometric", geometric, replace=True)
    OmegaConf.register_new_resolver("job_num", lambda n: f"{int(n):03d}", replace=True)  # point folder names
    OmegaConf.register_new_resolver("folder_name", folder_name, replace=True)  # no "/" in them, not too long
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    for path in sorted(SWEEPS_DIR.glob("*.yaml")):
        cs.store(group="sweep", name=path.stem, node=OmegaConf.load(path), package="_global_")
