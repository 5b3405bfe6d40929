"""The memory estimate refuses points that cannot fit, before any device work."""

from __future__ import annotations

import pytest

from runner.config.memory import check_fits, estimate
from runner.config.spec import build_spec
from runner.errors import ConfigError


def test_estimates_follow_each_collective():
    V = 1 << 20
    spec = lambda op: {
        "op": {"name": op, "axes": ["X"], "size_bytes": V},
        "dtype": "float32",  # noqa: E731
        "hardware": {"kind": "cpu"},
    }
    runtime = 64 << 20
    # per device: input + 3 outputs + the loop's (input + output) + the collective's buffers;
    # host: runtime + 8 devices x 2 x the ceiling's bus bytes + one answer shard
    ag, ar = estimate(spec("all_gather"), {"X": 8}), estimate(spec("all_reduce"), {"X": 8})
    assert ag == {
        "host_bytes": runtime + 16 * (V * 7 // 8) + V,
        "per_device_bytes": V // 8 + 3 * V + (V // 8 + V) + 3 * V,
    }
    assert ar == {"host_bytes": runtime + 16 * (2 * V * 7 // 8) + V, "per_device_bytes": V + 3 * V + 2 * V + 4 * V}
    a2a = estimate(spec("all_to_all"), {"X": 8})
    assert a2a == {
        "host_bytes": runtime + 16 * (V // 8 * 7 // 8) + V // 8,
        "per_device_bytes": V // 8 + 3 * V // 8 + 2 * V // 8 + 2 * V // 8,
    }


def test_too_big_for_host_fails_before_jax(compose_cfg):
    with pytest.raises(ConfigError) as err:
        build_spec(compose_cfg(["op=all_reduce", "op.size_bytes=8GiB", "mesh=x8"]))
    msg = str(err.value)
    assert msg.startswith("op.size_bytes=8GiB: needs about 649 GiB of host memory")  # 64 MiB + 1 GiB + V + 8 x 10 V
    assert "available" in msg


def test_cpu_devices_count_against_host_and_accelerators_against_their_memory(compose_cfg):
    spec = build_spec(compose_cfg(["op=all_gather", "op.size_bytes=64MiB", "mesh=x8"]))
    est = check_fits(spec, {"X": 8}, host_bytes_free=8 << 30)
    MiB = 1 << 20
    assert est["host_total_bytes"] == 64 * MiB + 16 * 56 * MiB + 64 * MiB + 8 * (8 + 3 * 64 + 72 + 3 * 64) * MiB
    with pytest.raises(ConfigError, match="of host memory"):
        check_fits(spec, {"X": 8}, host_bytes_free=3 << 30)
    # on an accelerator the devices' buffers do not count against the host...
    check_fits(spec, {"X": 8}, device_limit_bytes=16 << 30, host_bytes_free=2 << 30)
    # ...but against one device's memory
    with pytest.raises(ConfigError, match="per device but a device has 64 MiB"):
        check_fits(spec, {"X": 8}, device_limit_bytes=64 << 20, host_bytes_free=8 << 30)


def test_matmul_estimate_names_op_dims(compose_cfg):
    spec = build_spec(compose_cfg(["op=matmul", "mesh=x8"]))
    with pytest.raises(ConfigError, match=r"^op.dims=\{'I': 1024, 'J': 1024, 'K': 1024\}: needs about"):
        check_fits(spec, {"X": 8}, host_bytes_free=10 << 20)
