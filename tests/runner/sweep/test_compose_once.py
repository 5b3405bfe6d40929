"""A sweep's points composed with each config file read once (runner.sweep.compose_once) are
exactly the configs Hydra composes reading every file again; a bad value or option fails the
same; and no point's composition leaks into the next (a planted memo without copies does)."""

from __future__ import annotations

import hydra._internal.config_loader_impl as loader_impl
import pytest
from hydra import initialize_config_dir
from hydra._internal.config_repository import ConfigRepository
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import OmegaConf, open_dict

from runner.config.schema import CONF_DIR
from runner.config.store import register_configs
from runner.sweep import compose_once
from runner.sweep.compose_once import (
    FilesReadOnce,
    build_each_defaults_list_once,
    merge_each_defaults_list_once,
    read_each_file_once,
)

SWEEP = ["+sweep=allgather_sizes", "timing=quick", "hydra.sweep.dir=/tmp/unused"]
# the default sweep's points, then points that pick other group options (another defaults list
# each) and come back to the first ones: what one point's composition changes in place shows
POINTS = [[f"op.size_bytes={2**i}KiB", "timing=quick"] for i in range(0, 17, 4)] + [
    ["op=all_reduce", "op.size_bytes=4KiB"],
    ["mesh=xy_4x2", "op.size_bytes=1KiB"],
    ["hardware=h100", "timing=default", "op.size_bytes=2KiB"],
    ["op=matmul"],
    ["op.size_bytes=1KiB", "timing=quick"],
    ["op=all_reduce", "op.size_bytes=4KiB"],
]


@pytest.fixture
def loader():
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield GlobalHydra.instance().config_loader()


def _master(loader):
    return loader.load_configuration("config", SWEEP, RunMode.MULTIRUN)


def _compose(loader, master, points=POINTS) -> list[str]:
    return [OmegaConf.to_yaml(loader.load_sweep_config(master, list(p)), resolve=False) for p in points]


def _reads(monkeypatch) -> list[str]:
    """The config paths Hydra's repository reads from now on (each a file parsed, or a
    ConfigStore node copied)."""
    reads: list[str] = []
    load = ConfigRepository.load_config

    def counted(self, config_path):
        reads.append(config_path)
        return load(self, config_path)

    monkeypatch.setattr(ConfigRepository, "load_config", counted)
    return reads


def test_points_compose_exactly_as_hydra_composes_them(loader, monkeypatch):
    master = _master(loader)
    hydras = _compose(loader, master)
    read_each_file_once()
    assert type(loader.repository) is FilesReadOnce
    reads = _reads(monkeypatch)
    assert _compose(loader, master) == hydras  # the hydra node too (nothing in it differs by time unresolved)
    assert reads and len(reads) == len(set(reads))  # each file read once for all the points, not ~18 times a point
    assert _compose(loader, master) == hydras and len(reads) == len(set(reads))


def test_points_merged_once_per_defaults_list_compose_exactly_as_hydra_composes_them(loader, monkeypatch):
    master = _master(loader)
    hydras = _compose(loader, master)
    merges = []
    merge = loader._compose_config_from_defaults_list
    monkeypatch.setattr(loader, "_compose_config_from_defaults_list", lambda **kw: merges.append(1) or merge(**kw))
    read_each_file_once()
    merge_each_defaults_list_once()
    assert _compose(loader, master) == hydras
    # POINTS name 5 defaults lists (the sizes share one; each other group choice makes one)
    assert len(merges) == 5
    assert _compose(loader, master) == hydras and len(merges) == 5
    merge_each_defaults_list_once()  # a second call wraps nothing more
    assert _compose(loader, master) == hydras and len(merges) == 5


def test_a_merge_memo_that_hands_out_what_it_keeps_is_caught(loader, monkeypatch):
    """Hydra applies each point's overrides to the merged config in place: handed out without
    a copy, the first size's override would reach every later point."""
    master = _master(loader)
    hydras = _compose(loader, master)
    monkeypatch.setattr(compose_once, "handed_out", lambda x: x)  # only the memo's copies
    merge_each_defaults_list_once()
    assert _compose(loader, master) != hydras


def _count_defaults_lists(monkeypatch) -> list[str]:
    """Hydra's defaults lists built from now on (under whatever wraps them)."""
    built: list[str] = []
    create = loader_impl.create_defaults_list
    inner = create.__closure__[0].cell_contents if getattr(create, "_shardlab", False) else create

    def counted(*args, **kwargs):
        built.append(1)
        return inner(*args, **kwargs)

    monkeypatch.setattr(loader_impl, "create_defaults_list", counted)
    return built


def test_points_with_each_defaults_list_built_once_compose_exactly_as_hydra_composes_them(loader, monkeypatch):
    master = _master(loader)
    hydras = _compose(loader, master)
    built = _count_defaults_lists(monkeypatch)
    read_each_file_once()
    merge_each_defaults_list_once()
    build_each_defaults_list_once()  # wraps the counter
    assert _compose(loader, master) == hydras  # each point's own values, choices and hydra node
    assert len(built) == 5  # POINTS name 5 defaults lists: the sizes share one
    assert _compose(loader, master) == hydras and len(built) == 5


def test_defaults_lists_kept_for_one_app_are_not_another_apps(loader, monkeypatch):
    build_each_defaults_list_once()
    built = _count_defaults_lists(monkeypatch)
    build_each_defaults_list_once()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        fresh = GlobalHydra.instance().config_loader()  # a new app: every list built as Hydra builds it
        master = _master(fresh)
        _compose(fresh, master)
    assert len(built) == 1 + len(POINTS)


def test_a_defaults_list_memo_that_keeps_the_first_points_values_is_caught(loader, monkeypatch):
    """A kept defaults list carries the value overrides of the point that built it: handed out
    as kept, the first size would be every point's."""
    master = _master(loader)
    hydras = _compose(loader, master)
    build_each_defaults_list_once()
    monkeypatch.setattr(compose_once, "with_values", lambda built, values: built)
    assert _compose(loader, master) != hydras


class Shared(FilesReadOnce):
    """The planted fault: the configs it keeps handed out themselves, not copies."""

    def load_config(self, config_path):
        key = (tuple((type(s).__qualname__, s.provider, s.path) for s in self.sources), config_path)
        if key not in self.loaded:
            self.loaded[key] = ConfigRepository.load_config(self, config_path)
        return self.loaded[key]


def _changed_between_points(loader, memo: type[FilesReadOnce]) -> list[str] | str:
    """The points composed after one composition changed what the repository handed it (as
    Hydra may: a loaded config's nodes, header and defaults list are its to change), or the
    error that stopped them."""
    master = _master(loader)
    loader.repository = memo(loader.repository)
    _compose(loader, master, POINTS[:1])
    for path in ("config", "op/all_gather", "timing/quick"):
        loaded = loader.repository.load_config(path)
        with open_dict(loaded.config):
            loaded.config.planted = "leaked"
        loaded.header["package"] = "leaked"
        loaded.defaults_list.clear()
    try:
        return _compose(loader, master)
    except HydraException as exc:
        return str(exc)


def test_no_change_to_a_loaded_config_reaches_the_next_point(loader):
    hydras = _compose(loader, _master(loader))
    assert _changed_between_points(loader, FilesReadOnce) == hydras


def test_a_memo_that_hands_out_what_it_keeps_is_caught(loader):
    hydras = _compose(loader, _master(loader))
    assert _changed_between_points(loader, Shared) != hydras


@pytest.mark.parametrize(
    "point",
    [["mesh=nope"], ["op=nope_op"], ["timing.rounds=abc"], ["op.nope=1"]],
    ids=["option", "op option", "bad value", "unknown key"],
)
def test_a_bad_point_fails_with_hydras_message(loader, point):
    master = _master(loader)

    def failure():
        with pytest.raises(HydraException) as caught:
            _compose(loader, master, [POINTS[0], point])
        return type(caught.value), str(caught.value), str(caught.value.__cause__)

    hydras = failure()
    read_each_file_once()
    merge_each_defaults_list_once()
    build_each_defaults_list_once()
    assert failure() == hydras
    assert failure() == hydras  # an error is never kept: the second time, the same


def test_another_hydra_loader_is_left_as_it_is(loader, monkeypatch):
    monkeypatch.setattr(loader, "repository", object())
    read_each_file_once()
    assert type(loader.repository) is object
    monkeypatch.setattr(compose_once, "ConfigRepository", None)
    read_each_file_once()  # no Hydra internals to wrap: nothing to do
    monkeypatch.delattr(type(loader), "_compose_config_from_defaults_list")
    merge_each_defaults_list_once()
    assert not hasattr(loader, "_compose_config_from_defaults_list")


def test_read_once_twice_wraps_once(loader):
    read_each_file_once()
    wrapped = loader.repository
    read_each_file_once()
    assert loader.repository is wrapped
