"""The memory estimate pinned per collective kind where a plausible-wrong version differs
(issue 30): a group over one axis of a two-axis mesh (p != devices), an odd group, the loop and
the result check switched off, the ceiling's floor and cap, and the headroom's bar on both sides."""

from __future__ import annotations

import pytest

from runner.config.memory import check_fits, estimate
from runner.errors import ConfigError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
RUNTIME = 64 * MiB
MESH = {"X": 3, "Y": 2}  # the collective over X: a group of 3 among 6 devices


def spec(op, V=3 * MiB, axes=("X",), **top):
    op = {"name": op, "axes": list(axes), "size_bytes": V}
    return {"op": op, "dtype": "float32", "hardware": {"kind": "cpu"}, **top}


def test_each_kind_over_a_group_of_three_among_six_devices():
    # V = 3 MiB, p = 3: per device input + 3 outputs + the loop's (input + output) + own buffers;
    # host: runtime + 6 devices x 2 x the ceiling's bus bytes + one answer shard (the output)
    assert estimate(spec("all_gather"), MESH) == {  # in 1 MiB, out 3 MiB, buffers 3 V, bus 2/3 V
        "per_device_bytes": (1 + 3 * 3 + (1 + 3) + 9) * MiB,
        "host_bytes": RUNTIME + 6 * 2 * 2 * MiB + 3 * MiB,
    }
    assert estimate(spec("reduce_scatter"), MESH) == {  # in 3 MiB, out 1 MiB, buffers V, bus 2/3 V
        "per_device_bytes": (3 + 3 * 1 + (3 + 1) + 3) * MiB,
        "host_bytes": RUNTIME + 6 * 2 * 2 * MiB + 1 * MiB,
    }
    assert estimate(spec("all_reduce"), MESH) == {  # in = out = 3 MiB, buffers 4 V, bus 2 x 2/3 V
        "per_device_bytes": (3 + 3 * 3 + (3 + 3) + 12) * MiB,
        "host_bytes": RUNTIME + 6 * 2 * 4 * MiB + 3 * MiB,
    }
    assert estimate(spec("all_to_all"), MESH) == {  # in = out = V/3, buffers 2 V/3, bus V/3 x 2/3
        "per_device_bytes": (1 + 3 * 1 + (1 + 1) + 2) * MiB,
        "host_bytes": RUNTIME + 6 * 2 * (2 * MiB // 3) + 1 * MiB,
    }


def test_a_group_over_both_axes_is_all_six():
    # p = 6: AllGather's input V/6 = 512 KiB, bus 5/6 V = 2.5 MiB
    assert estimate(spec("all_gather", axes=("X", "Y")), MESH) == {
        "per_device_bytes": 512 * KiB + 9 * MiB + (512 * KiB + 3 * MiB) + 9 * MiB,
        "host_bytes": RUNTIME + 6 * 2 * (5 * MiB // 2) + 3 * MiB,
    }


def test_no_loop_and_no_check_drop_their_terms():
    e = estimate(spec("all_reduce", timing={"loop": False}, check_result=False), MESH)
    assert e == {"per_device_bytes": (3 + 9 + 12) * MiB, "host_bytes": RUNTIME + 6 * 2 * 4 * MiB}


def test_the_ceiling_copies_at_least_4_KiB_and_at_most_64_MiB():
    # 96 B AllGather over 3: bus 64 B, copied as 4 KiB
    tiny = estimate(spec("all_gather", V=96), MESH)
    assert tiny == {"per_device_bytes": 32 + 3 * 96 + (32 + 96) + 3 * 96, "host_bytes": RUNTIME + 6 * 2 * 4096 + 96}
    # 1 GiB AllReduce over 2: bus 1 GiB, copied as 64 MiB
    big = estimate(spec("all_reduce", V=GiB), {"X": 2})
    assert big == {"per_device_bytes": (1 + 3 + 2 + 4) * GiB, "host_bytes": RUNTIME + 2 * 2 * 64 * MiB + GiB}


def test_the_device_bar_is_four_fifths_of_its_memory_on_both_sides():
    big = spec("all_reduce", V=GiB)  # 10 GiB per device: fits in 12.5 GiB x 0.8, not an 8 B less
    out = check_fits(big, {"X": 2}, device_limit_bytes=12.5 * GiB + 8, host_bytes_free=100 * GiB)
    assert out["host_total_bytes"] == RUNTIME + 256 * MiB + GiB  # an accelerator's memory is not the host's
    with pytest.raises(ConfigError, match=r"^op.size_bytes=1GiB: needs about 10 GiB per device but a device has 12.5"):
        check_fits(big, {"X": 2}, device_limit_bytes=12.5 * GiB - 8, host_bytes_free=100 * GiB)


def test_cpu_devices_count_against_the_host_on_both_sides_of_the_bar():
    s = spec("all_reduce")  # host 115 MiB + 6 devices x 30 MiB = 295 MiB, bar: free x 0.8
    out = check_fits(s, MESH, host_bytes_free=295 / 0.8 * MiB + 8)
    assert out["host_total_bytes"] == 295 * MiB
    with pytest.raises(ConfigError) as err:
        check_fits(s, MESH, host_bytes_free=295 / 0.8 * MiB - 8)
    assert str(err.value) == (
        "op.size_bytes=3MiB: needs about 295 MiB of host memory (all_reduce on 6 devices, dtype float32) "
        "but 369 MiB is available; use a smaller size"
    )
    # devices that are not on the host: only the host's own 115 MiB counts
    assert check_fits(s, MESH, host_bytes_free=144 * MiB, devices_on_host=False)["host_total_bytes"] == 115 * MiB
