"""Every config group option composes, and the spec checks catch bad values early."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from runner.config.op_spec import CollectiveOp
from runner.config.spec import build_spec, parse_size
from runner.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[3]  # the checkout


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (REPO_ROOT / "conf" / group).glob("*.yaml"))


@pytest.mark.parametrize("group", ["hardware", "mesh", "op"])
def test_every_group_option_composes(compose_cfg, group):
    options = _options(group)
    assert len(options) >= 4
    for name in options:
        cfg = compose_cfg([f"{group}={name}"])
        # matmul variants (mm_case2, ...) are op=matmul with their own expression
        assert cfg[group].name == ("matmul" if name.startswith("mm_") else name)
        # every other shipped op is valid (program is a template: it needs the user's target)
        if group == "op" and name not in ("mm_case4_invalid", "program"):
            build_spec(compose_cfg([f"op={name}", "mesh=xy_4x2"]))


def test_hardware_entries_cover_the_design_table():
    assert {"auto", "cpu", "tpu_v3", "tpu_v4p", "tpu_v5e", "tpu_v5p", "tpu_v6e", "h100", "h200", "b200"} <= set(
        _options("hardware")
    )
    for name in _options("hardware"):
        hw = OmegaConf.load(REPO_ROOT / "conf" / "hardware" / f"{name}.yaml")
        if hw.kind in ("tpu", "gpu"):
            assert hw.link_bw_bidir_Bps and hw.hop_latency_s and hw.source, name


@pytest.mark.parametrize("sweep", sorted(p.stem for p in (REPO_ROOT / "sweeps").glob("*.yaml")))
def test_every_sweep_composes_as_a_multirun(compose_cfg, sweep):
    cfg = compose_cfg([f"+sweep={sweep}"], return_hydra_config=True)
    assert cfg.hydra.mode.name == "MULTIRUN"
    assert cfg.hydra.sweeper.params


def test_default_sweep_spans_1KiB_to_64MiB_in_14_points_or_more(compose_cfg):
    cfg = compose_cfg(["+sweep=allgather_sizes"], return_hydra_config=True)
    sizes = [parse_size(s) for s in cfg.hydra.sweeper.params["op.size_bytes"].split(",")]
    assert cfg.op.name == "all_gather"
    assert len(sizes) >= 14 and min(sizes) == 1024 and max(sizes) >= 64 * 2**20


def test_defaults_build_a_spec_without_jax(compose_cfg):
    spec = build_spec(compose_cfg())
    assert spec["op"] == CollectiveOp("all_gather", ("X",), 16 * 2**20, grad=False)
    assert spec["op"].to_json() == {"name": "all_gather", "axes": ["X"], "size_bytes": 16 * 2**20, "grad": False}
    assert spec["mesh"]["axes"] == {"X": -1} and spec["hardware"]["name"] == "auto"


@pytest.mark.parametrize(
    "text,expected",
    [
        ("16MiB", 16 * 2**20),
        ("1KiB", 1024),
        ("4096", 4096),
        (4096, 4096),
        ("1KB", 1000),
        ("2 GiB", 2 * 2**30),
        ("1.5KiB", 1536),
    ],
)
def test_parse_size_units(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (["op.size_bytes=7"], "op.size_bytes=7"),
        (["op.size_bytes=lots"], "op.size_bytes='lots'"),
        (["op.size_bytes=-4"], "op.size_bytes"),
        (["op.axes=[Q]"], "op.axes: 'Q' is not an axis of mesh 'auto'"),
        (["mesh=xy_4x2", "op.axes=[X,X]"], "op.axes=['X', 'X']: a mesh axis may appear only once"),
        (["mesh=x8", "op=all_to_all", "op.size_bytes=1KiB", "dtype=float32"], None),
        (["mesh=x8", "op=all_to_all", "op.size_bytes=128"], "all_to_all needs a multiple of 64 elements"),
        (["mesh=x8", "op.size_bytes=20"], "needs a multiple of 8 elements"),
    ],
)
def test_bad_values_fail_before_jax_with_the_key_named(compose_cfg, overrides, needle):
    cfg = compose_cfg(overrides)
    if needle is None:
        build_spec(cfg)
        return
    with pytest.raises(ConfigError) as err:
        build_spec(cfg)
    assert needle in str(err.value)


def test_unknown_key_is_rejected_at_compose_time(compose_cfg):
    with pytest.raises(Exception, match="timing.warmup_itres"):
        compose_cfg(["timing.warmup_itres=3"])


@pytest.mark.parametrize(
    "override,needle",
    [
        ("timing.iters_per_sample=1000", "timing.iters_per_sample=1000: must be from 1 to 64"),
        ("timing.target_rel_ci=0", "timing.target_rel_ci=0"),
        ("timing.max_iters=2", "timing.max_iters=2: must be from timing.min_iters to 1000000"),
        ("trace.iters=0", "trace.iters=0"),
        ("trace.iters=100000000", "trace.iters=100000000: must be from 1 to 10000"),
        ("timing.min_iters=10000000", "timing.min_iters=10000000: must be from 3 to 10000"),
        ("timing.warmup_min_iters=10000000", "timing.warmup_min_iters=10000000: must be from 1 to 10000"),
        ("timing.budget_s=inf", "timing.budget_s=inf: must be a finite number"),
        ("timing.later_budget_s=0", "timing.later_budget_s=0.0: must be between 0 and 3600 seconds"),
        (
            "timing.loop_check_below_s=0",
            "timing.loop_check_below_s=0.0: must be null (the loop cross-check on every point) or between 0 and 3600",
        ),
        ("trace.inspect_max_s=-1", "trace.inspect_max_s=-1.0: must be between 0 and 3600 seconds"),
        # a later round's budget counts toward what a point may take, as round 1's does
        ("timing.later_budget_s=3000", "timeout_s=600.0: a point may take"),
        ("timeout_s=inf", "timeout_s=inf: must be a finite number of seconds > 0"),
        ("timeout_s=nan", "timeout_s=nan: must be a finite number of seconds > 0"),
        ("timeout_s=0", "timeout_s=0.0: must be a finite number of seconds > 0"),
        ("timeout_s=-1", "timeout_s=-1.0: must be a finite number of seconds > 0"),
        ("timeout_s=3", "timeout_s=3.0: a point may take"),
        ("distributed.timeout_s=inf", "distributed.timeout_s=inf"),
    ],
)
def test_timing_and_trace_values_are_checked(compose_cfg, override, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        build_spec(compose_cfg([override]))
