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
path) and hands out deep copies, which cost about a quarter of a merge.

Before it merges, each composition builds its defaults list again: the tree of every config
and group choice, read from the repository (about 45 ms a point here, 0.8 s of the default
sweep's 1.2 s check). It depends on the group choices (``op=all_reduce``, ``+sweep=...``), the
config name and the search path, never on a value override (Hydra's interpolations in a
defaults list may name group choices only). :func:`build_each_defaults_list_once` keeps it per
those and hands out deep copies with the point's own value overrides. All four degrade to no
change on a Hydra whose loader is not built this way.
"""

from __future__ import annotations

import copy

import hydra._internal.config_loader_impl as loader_impl
from hydra.core.global_hydra import GlobalHydra

try:  # the loader's repository and its per-composition cache: the same code in Hydra 1.3.0 and 1.3.8
    from hydra._internal.config_repository import ConfigRepository
except ImportError:  # pragma: no cover - another Hydra: no file memo
    ConfigRepository = None
try:  # how Hydra 1.3 splits overrides into group choices and values
    from hydra._internal.defaults_list import Overrides
except ImportError:  # pragma: no cover - another Hydra: no defaults-list memo
    Overrides = None


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
            return handed_out(self.loaded[key])


def handed_out(kept):
    """What a memo here hands Hydra: a deep copy of what it keeps (Hydra changes what it gets)."""
    return copy.deepcopy(kept)


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
        return handed_out(merged[key])

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


def build_each_defaults_list_once() -> None:
    """Keep the running Hydra app's defaults lists per group choices for the rest of the sweep
    (call from ``on_multirun_start``). Hydra's loader calls its module's
    ``create_defaults_list``; wrapped once per process, the wrapper serves only the loader of
    the app that asked (another app's, a test's, is passed straight through)."""
    if not GlobalHydra.instance().is_initialized():
        return
    create = getattr(loader_impl, "create_defaults_list", None)
    if create is None or Overrides is None:
        return  # another Hydra
    GlobalHydra.instance().config_loader()._shardlab_defaults_lists = {}
    if not getattr(create, "_shardlab", False):
        loader_impl.create_defaults_list = _built_once(create)


def _built_once(create):
    def built_once(repo, config_name, overrides_list, prepend_hydra, skip_missing):
        loader = GlobalHydra.instance().config_loader() if GlobalHydra.instance().is_initialized() else None
        kept = getattr(loader, "_shardlab_defaults_lists", None)
        if kept is None:
            return create(repo, config_name, overrides_list, prepend_hydra, skip_missing)
        # Hydra's own split of the overrides: values (op.size_bytes=1KiB) and group choices; a bad
        # one raises here as it would inside create_defaults_list
        values = Overrides(repo=repo, overrides_list=overrides_list).config_overrides
        choices = [o.input_line for o in overrides_list if not o.is_sweep_override() and not _among(o, values)]
        if None in choices:  # an override built without its command-line text: no key to keep it by
            return create(repo, config_name, overrides_list, prepend_hydra, skip_missing)
        key = (_sources_key(repo), config_name, prepend_hydra, skip_missing, *choices)
        if key not in kept:  # an error is not kept: raised again, the same, next time
            kept[key] = create(repo, config_name, overrides_list, prepend_hydra, skip_missing)
        return with_values(handed_out(kept[key]), values)

    built_once._shardlab = True
    return built_once


def with_values(built, values: list):
    """A kept defaults list (Hydra reads its defaults and its overrides' known choices) with
    this point's own value overrides, which Hydra applies after the merge."""
    built.config_overrides = built.overrides.config_overrides = values
    return built


def _among(override, overrides) -> bool:
    return any(override is o for o in overrides)
