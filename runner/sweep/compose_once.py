"""Compose each sweep point's config once instead of twice, and read each config file once.

Before it launches a batch, Hydra's basic sweeper composes every point's config to check
that the whole batch is legal (a bad value in a sweep list stops the sweep before its first
point), and its launcher then composes each point again to run it. Composition takes about
0.1 s a point on this 2-core machine, so the second one cost a default sweep about 2 s. Hydra
gives sweepers and launchers the one config loader of the running app; wrapped here, its
``load_sweep_config`` hands the launcher the config the check composed for the same
overrides (the same overrides on the same master config give the same config; the check
only composes it). A sweeper of our own would do the same but must live in Hydra's
``hydra_plugins`` namespace package, a top-level folder this project does not have.

Each composition also reads every file it uses again (the ~18 of a point: YAML parsed, an
OmegaConf node built) and deep-copies the loader's repository, ConfigStore included, into a
fresh per-composition cache (``CachingConfigRepository``): about 40% of a composition's time.
:func:`read_each_file_once` keeps what the loader's repository loaded for the rest of the
sweep and hands out deep copies (Hydra changes a loaded config in place while it composes, so
no two compositions may share one); the copy of the repository shares its config sources
(what Hydra itself gives a copy whose search path changes: new sources on the same
ConfigStore).

Most of what is left of a composition (about 60%) is merging the files its defaults list
names, one ``merge_with`` each. The points of a sweep over values (``op.size_bytes=...``) all
have the same defaults list: only the value overrides, applied after the merge, differ.
:func:`merge_each_defaults_list_once` keeps the merged config per defaults list (and search
path) and hands out deep copies, which cost about a quarter of a merge. All three degrade to
no change on a Hydra whose loader is not built this way.
"""

from __future__ import annotations

import copy

from hydra.core.global_hydra import GlobalHydra

try:  # the loader's repository and its per-composition cache: the same code in Hydra 1.3.0 and 1.3.8
    from hydra._internal.config_repository import ConfigRepository
except ImportError:  # pragma: no cover - another Hydra: no file memo
    ConfigRepository = None


def compose_each_point_once() -> None:
    """Wrap the running Hydra app's config loader (call from ``on_multirun_start``)."""
    if not GlobalHydra.instance().is_initialized():
        return
    loader = GlobalHydra.instance().config_loader()
    if getattr(loader, "_shardlab_once", False):
        return
    compose = loader.load_sweep_config
    kept: dict[tuple[str, ...], object] = {}

    def load_sweep_config(master_config, sweep_overrides):
        key = (id(master_config), *sweep_overrides)
        if key in kept:  # the launcher's call, after the check's
            return kept.pop(key)
        config = compose(master_config, sweep_overrides)
        kept[key] = config
        return config

    loader.load_sweep_config = load_sweep_config
    loader._shardlab_once = True


if ConfigRepository is not None:

    class FilesReadOnce(ConfigRepository):
        """The loader's repository, each config it loads kept (by its sources and path) and
        handed out as a deep copy; errors are not kept (raised again, the same)."""

        def __init__(self, repository: ConfigRepository, loaded: dict | None = None) -> None:
            self.sources = list(repository.sources)  # not initialize_sources: no module imported again
            self.loaded = {} if loaded is None else loaded

        def __deepcopy__(self, memo: dict) -> FilesReadOnce:
            # CachingConfigRepository's copy, made so that initialize_sources() on it (a primary
            # config's hydra.searchpath) leaves this one alone: that assigns a new list of new
            # sources and changes no source, so a new list suffices; the kept configs are shared
            # (their key names the sources they were read from)
            return FilesReadOnce(self, self.loaded)

        def load_config(self, config_path: str):
            key = (_sources_key(self), config_path)
            if key not in self.loaded:
                self.loaded[key] = super().load_config(config_path)
            return copy.deepcopy(self.loaded[key])


def _sources_key(repository) -> tuple:
    """Which config sources, in which order, a repository reads (its search path)."""
    return tuple((type(s).__qualname__, s.provider, s.path) for s in repository.get_sources())


def merge_each_defaults_list_once() -> None:
    """Keep the running Hydra app's merged config per defaults list for the rest of the sweep
    (call from ``on_multirun_start``)."""
    if not GlobalHydra.instance().is_initialized():
        return
    loader = GlobalHydra.instance().config_loader()
    merge = getattr(loader, "_compose_config_from_defaults_list", None)
    if merge is None or getattr(merge, "_shardlab", False):
        return  # another Hydra, or wrapped already
    merged: dict[tuple, object] = {}

    def merged_once(defaults, repo):
        key = (
            _sources_key(repo),
            tuple((d.config_path, d.parent, d.package, d.is_self, d.primary) for d in defaults),
        )
        if key not in merged:  # an error is not kept: raised again, the same, next time
            merged[key] = merge(defaults=defaults, repo=repo)
        # Hydra sets flags, applies the overrides and fills the hydra node in what it gets
        return copy.deepcopy(merged[key])

    merged_once._shardlab = True
    loader._compose_config_from_defaults_list = merged_once


def read_each_file_once() -> None:
    """Keep the running Hydra app's loaded config files for the rest of the sweep (call from
    ``on_multirun_start``)."""
    if ConfigRepository is None or not GlobalHydra.instance().is_initialized():
        return
    loader = GlobalHydra.instance().config_loader()
    repository = getattr(loader, "repository", None)
    if type(repository) is not ConfigRepository or not isinstance(getattr(repository, "sources", None), list):
        return  # already wrapped, or a Hydra whose loader is built otherwise
    loader.repository = FilesReadOnce(repository)
