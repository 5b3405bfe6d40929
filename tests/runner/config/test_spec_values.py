"""Every numeric and string key of the config, given a random value, is either accepted or
refused by :func:`runner.config.spec.build_spec` with one ConfigError line naming the key: never
another exception, never a refusal that only shows up after measuring. Property-based
(hypothesis, seeded, a few seconds): the validation function is called directly, so no process
starts; two end-to-end cases check the exit code and the single line."""

from __future__ import annotations

import copy
import json
import math

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from shardlab_cli import runner

from runner.config.spec import build_spec
from runner.config.spec_values import MAX_BYTES, MAX_SEED, MAX_TIMEOUT_S
from runner.errors import ConfigError

BASES = {
    "collective": ["hardware=cpu", "mesh=x8", "op=all_gather", "op.size_bytes=1MiB"],
    "matmul": ["hardware=cpu", "mesh=x8", "op=matmul"],
    "program": ["hardware=cpu", "mesh=x8", "op=program", "op.target=math:sqrt", "op.inputs=['x[B_X, D]']",
                "op.dims={B: 64, D: 32}"],
    "block": ["hardware=cpu", "mesh=x8", "op=transformer_block"],
    "auto": ["hardware=cpu", "mesh=x8", "distributed=auto", "distributed.num_processes=2", "distributed.process_id=0",
             "distributed.coordinator_address=10.0.0.1:1234"],
}  # fmt: skip

# (base, key) for every numeric key of the schema that build_spec reads
NUMERIC = [
    ("collective", k)
    for k in (
        "timeout_s", "timing.rounds", "timing.seed", "timing.warmup_min_iters", "timing.warmup_max_s",
        "timing.min_iters", "timing.max_iters", "timing.target_rel_ci", "timing.budget_s", "timing.iters_per_sample",
        "timing.later_budget_s", "timing.loop_target_s", "timing.loop_max_samples", "trace.iters", "trace.max_s",
        "trace.inspect_max_s", "trace.python_tracer_level", "timing.loop_check_below_s",
        "trace.host_tracer_level", "distributed.timeout_s", "check.min_busbw_GBps", "sizes.factor", "mesh.axes.X",
        "op.size_bytes", "sizes.min", "sizes.max", "hardware.device_count", "hardware.link_bw_unidir_Bps",
        "hardware.link_bw_bidir_Bps", "hardware.hop_latency_s", "hardware.hbm_bw_Bps", "hardware.memory_bytes",
        "hardware.domain_size", "hardware.node_bw_unidir_Bps", "hardware.core_bw_unidir_Bps",
        "hardware.scaleout_bw_unidir_Bps", "hardware.scaleout_latency_s",
    )
] + [("matmul", "op.dims.I"), ("program", "op.dims.B"), ("block", "op.dims.H"), ("auto", "distributed.num_processes"),
     ("auto", "distributed.process_id")]  # fmt: skip

STRING = [
    ("collective", k)
    for k in (
        "op.size_bytes", "mesh.shape", "sizes.min", "sizes.max", "hardware.interconnect", "hardware.wraparound",
        "hardware.name", "hardware.source", "mesh.name", "distributed.cross_process_axis",
    )
] + [("matmul", "op.expr"), ("program", "op.target"), ("auto", "distributed.coordinator_address")]  # fmt: skip

NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(-3, 5),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(-10, 10),
    st.sampled_from([0, -1, 1, 2**31, 2**32, 2**63, 1e10, 1e306, 1e307, 1e308, float("inf"), float("nan"), 0.5]),
)
TEXT = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["", " ", "-1", "0", "1e999", "1e307", "$(echo hi)", "a,b", "'", '"', "x" * 300, "8x0", "\n"]),
)


class _Bases(dict):
    def __repr__(self) -> str:  # hypothesis prints its arguments on failure: the names suffice
        return f"<configs {', '.join(self)}>"


@pytest.fixture(scope="module")
def bases(compose_cfg):
    return _Bases({name: compose_cfg(overrides) for name, overrides in BASES.items()})


def _with(cfg, key: str, value):
    """``cfg`` with ``key`` set as ``key=value`` would set it; None where OmegaConf itself
    refuses the value's type (Hydra reports that while composing, before the runner starts)."""
    cfg = copy.deepcopy(cfg)
    try:
        OmegaConf.update(cfg, key, value, merge=False)
    except (OmegaConfBaseException, ValueError):
        return None
    return cfg


RELATED = {"timing.min_iters": "timing.max_iters", "mesh.axes.X": "over X ("}


def _refused_in_one_line_naming(cfg, key: str) -> str | None:
    """Build the spec: the error line on refusal, None on acceptance; anything but a one-line
    ConfigError naming ``key`` fails the test."""
    try:
        build_spec(cfg)
    except ConfigError as exc:
        line = str(exc)
        assert "\n" not in line, line
        # min_iters above the default max_iters is reported as max_iters (the pair's rule); an
        # axis size that 1 MiB does not split over, as the size that does not split over it
        names = {key, RELATED.get(key)} - {None}
        dim = key.removeprefix("op.dims.")  # a dim may be named among the others: op.dims: D=256 ... H=3
        named_dim = dim != key and line.startswith("op.dims") and (f"{dim}=" in line or f"'{dim}': " in line)
        assert named_dim or any(n in line for n in names), f"{key}: {line}"
        return line
    return None


FAST = settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


# a number at every numeric key, text at every string key
KEYS = [pytest.param(base, key, NUMBERS, id=f"{key}=<number>") for base, key in NUMERIC]
KEYS += [pytest.param(base, key, TEXT, id=f"{key}=<text>") for base, key in STRING]


@pytest.mark.parametrize("base,key,values", KEYS)
@seed(27)
@FAST
@given(data=st.data())
def test_any_value_at_any_key_is_accepted_or_one_line_naming_it(bases, base, key, values, data):
    cfg = _with(bases[base], key, data.draw(values, label=key))
    if cfg is not None:
        _refused_in_one_line_naming(cfg, key)


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# What each key allows, worked out from its documented range: accepted exactly when allowed
# (the defaults of the other keys: a point needs 2 + 1.5 x 0.25 + 0.5 + 5 = 7.875 s of timeout_s).
ALLOWED = {
    "timeout_s": lambda v: isinstance(v, (int, float)) and math.isfinite(v) and 7.875 <= v <= MAX_TIMEOUT_S,
    "timing.seed": lambda v: _whole(v) and 0 <= v <= MAX_SEED,
    "distributed.timeout_s": lambda v: isinstance(v, (int, float)) and math.isfinite(v) and 0 < v <= 86400,
    "op.size_bytes": lambda v: _whole(v) and 0 < v <= 16 * 2**20 and v % 32 == 0,
    # -1, or a size 1 MiB of float32 (2**18 elements) splits over; the device count is the
    # worker's to check (runner.config.spec.check_against_devices), right after JAX starts
    "mesh.axes.X": lambda v: v == -1 or (_whole(v) and 1 <= v <= 65536 and 2**18 % v == 0),
    "hardware.hop_latency_s": lambda v: isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v <= 1,
    "hardware.memory_bytes": lambda v: isinstance(v, (int, float)) and math.isfinite(v) and v > 0,
    "op.dims.B": lambda v: _whole(v) and 8 <= v <= 2**20 and v % 8 == 0,
    "timing.loop_check_below_s": lambda v: isinstance(v, (int, float)) and math.isfinite(v) and 0 < v <= 3600,
}
# Whether these fit depends on this machine's free memory (the estimate is checked against it):
# sizes between surely-fits and the key's hard limit are not judged
UNDECIDED = {
    "op.size_bytes": lambda v: _whole(v) and 16 * 2**20 < v <= MAX_BYTES and v % 32 == 0,
    "op.dims.B": lambda v: _whole(v) and 2**20 < v <= 2**40 and v % 8 == 0,
}


@pytest.mark.parametrize("key", sorted(ALLOWED))
@seed(27)
@FAST
@given(value=st.one_of(st.integers(-(2**40), 2**40), st.floats(allow_nan=True, allow_infinity=True), NUMBERS))
def test_a_value_is_accepted_exactly_when_its_key_allows_it(bases, key, value):
    _accepted_exactly_when_allowed(bases, key, value)


def _accepted_exactly_when_allowed(bases, key, value) -> None:
    """``key=value`` is refused in one line naming the key, or accepted: accepted exactly when
    ALLOWED says so (where UNDECIDED leaves it to the code, either)."""
    base = "program" if key == "op.dims.B" else "collective"
    cfg = _with(bases[base], key, value)
    if cfg is None:
        return
    line = _refused_in_one_line_naming(cfg, key)
    if not UNDECIDED.get(key, lambda v: False)(value):
        assert (line is None) == ALLOWED[key](value), f"{key}={value!r}: {line or 'accepted'}"


@pytest.mark.parametrize(
    "overrides,line",
    [
        (["op.size_bytes=1e307"], "op.size_bytes=1e+307: must be at most 1PiB (1125899906842624 bytes)"),
        (
            ["timeout_s=1e10"],
            "timeout_s=10000000000.0: must be a finite number of seconds > 0 (default 600), at most 604800 (a week)",
        ),
        (["timing.rounds=2", "timing.seed=-1"], "timing.seed=-1: must be a whole number from 0 to 4294967295"),
    ],
)
def test_a_bad_value_exits_2_with_one_line_before_any_device_work(tmp_path, overrides, line):
    r = runner("hardware=cpu", f"hydra.run.dir={tmp_path / 'run'}", *overrides, expect=2)
    run_dir = tmp_path / "run"
    assert (r.stdout + r.stderr).strip().splitlines() == [f"all_gather: FAILED (ConfigError) {line} -> {run_dir}"]
    result = json.loads((run_dir / "result.json").read_text())
    # refused before a worker started: no devices, no timing in the record
    assert (result["status"], result["error_type"], result["error"]) == ("failed", "ConfigError", line)
    assert not {"devices", "timing", "hardware_found"} & set(result)


BOUNDARIES = [-1, 0, 0.5, 1, 8, 9, 16, 1024, 86400, 86401, 604800, 604801, 2**20, 2**20 + 8, 2**32 - 1, 2**32]
BOUNDARIES += [2**50, 2**50 + 32, 1e10, 1e307, float("inf"), float("-inf"), float("nan")]


@pytest.mark.parametrize("key", sorted(ALLOWED))
def test_each_keys_range_ends_exactly_where_documented(bases, key):
    """The edges of every range, deterministically (the random test may miss them)."""
    for value in BOUNDARIES:
        _accepted_exactly_when_allowed(bases, key, value)
