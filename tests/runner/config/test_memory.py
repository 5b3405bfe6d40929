"""The memory estimate refuses points that cannot fit, before any device work.

The memory estimate pinned per collective kind where a plausible-wrong version differs
(issue 30): a group over one axis of a two-axis mesh (p != devices), an odd group, the loop and
the result check switched off, the ceiling's floor and cap, and the headroom's bar on both sides.

What memory a point may use, read exactly from a fake file system and environment (issue 30's
mutation check): MemAvailable in kB, cgroup v2 and v1 limits less their usage on both sides of
the "no limit" bound, SLURM's per-node and per-CPU allocations, the least of them all, and the
machine's RAM only when nothing else is known; and the estimates of a transformer block (each
sharding), a user's program and a matmul, on sizes that do not divide evenly.
"""

from __future__ import annotations

import dataclasses
import os

import pytest

from runner.config import memory
from runner.config.memory import check_fits, estimate, host_available_bytes
from runner.config.op_spec import BlockOp, CollectiveOp, MatmulOp, ProgramOp
from runner.config.spec import build_spec
from runner.errors import ConfigError


def test_estimates_follow_each_collective():
    V = 1 << 20
    spec = lambda op: {
        "op": CollectiveOp(op, ("X",), V),
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


KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
RUNTIME = 64 * MiB
MESH = {"X": 3, "Y": 2}  # the collective over X: a group of 3 among 6 devices


def spec(op, V=3 * MiB, axes=("X",), **top):
    return {"op": CollectiveOp(op, tuple(axes), V), "dtype": "float32", "hardware": {"kind": "cpu"}, **top}


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


SLURM = ("SLURM_MEM_PER_NODE", "SLURM_MEM_PER_CPU", "SLURM_CPUS_ON_NODE")


@pytest.fixture(autouse=True)
def no_slurm(monkeypatch):
    for key in SLURM:
        monkeypatch.delenv(key, raising=False)


def fs(root, files: dict[str, str]) -> str:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(root)


MEMINFO = {"proc/meminfo": "MemTotal:  9999 kB\nMemAvailable:    4096 kB\nMemFree: 1 kB\n"}
V2 = ("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory.current")
V1 = ("sys/fs/cgroup/memory/memory.limit_in_bytes", "sys/fs/cgroup/memory/memory.usage_in_bytes")


def test_mem_available_is_in_kib(tmp_path):
    assert host_available_bytes(fs(tmp_path, MEMINFO)) == 4096 * 1024


@pytest.mark.parametrize(
    "files, expected",
    [
        ({V2[0]: "3000000\n", V2[1]: "1000000\n"}, 2_000_000),  # v2: limit less usage
        ({V1[0]: "3000000\n", V1[1]: "500000\n"}, 2_500_000),  # v1 the same
        ({V1[0]: "3000000\n"}, 3_000_000),  # no usage file: nothing used
        ({V2[0]: "max\n", V2[1]: "1000000\n"}, 4096 * 1024),  # v2 without a limit
        ({V1[0]: f"{1 << 60}\n", V1[1]: "0\n"}, 4096 * 1024),  # v1's "no limit" is a huge number
        ({V1[0]: f"{(1 << 60) - 1}\n", V1[1]: f"{(1 << 60) - 1 - 1000}\n"}, 1000),  # just under it: a limit
    ],
)
def test_a_cgroup_limit_less_its_usage_counts_when_it_is_one(tmp_path, files, expected):
    assert host_available_bytes(fs(tmp_path, {**MEMINFO, **files})) == expected


def test_slurm_per_node_or_per_cpu_times_cpus(tmp_path, monkeypatch):
    root = fs(tmp_path, MEMINFO)
    monkeypatch.setenv("SLURM_MEM_PER_CPU", "1")  # without the CPU count: unknown
    assert host_available_bytes(root) == 4096 * 1024
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "3")
    assert host_available_bytes(root) == 3 * MiB
    monkeypatch.setenv("SLURM_MEM_PER_NODE", "2")  # per node wins over per CPU
    assert host_available_bytes(root) == 2 * MiB


def test_the_least_is_taken_and_ram_only_when_nothing_is_known(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_MEM_PER_NODE", "5")
    root = fs(tmp_path, {**MEMINFO, V2[0]: "6000000", V2[1]: "0"})
    assert host_available_bytes(root) == 4096 * 1024
    monkeypatch.delenv("SLURM_MEM_PER_NODE")
    empty = tmp_path / "empty"
    empty.mkdir()
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert host_available_bytes(str(empty)) == ram
    # v1's "no limit" (exactly 2**60) is no limit, not 2**60 bytes
    assert host_available_bytes(fs(tmp_path / "v1", {V1[0]: f"{1 << 60}\n"})) == ram


def test_the_default_root_is_the_machines(monkeypatch):
    files = {"/proc/meminfo": "MemAvailable: 4 kB\n"}
    monkeypatch.setattr(memory, "_read", lambda path: files.get(path))
    assert host_available_bytes() == 4096


def test_usage_over_the_limit_leaves_nothing(tmp_path):
    assert host_available_bytes(fs(tmp_path, {**MEMINFO, V2[0]: "1000", V2[1]: "2000"})) == 0


DIMS = {"B": 2, "S": 4, "D": 8, "F": 16, "H": 2}


@pytest.mark.parametrize(
    "sharding, device",
    [
        # x = B S D = 64, params = 4 D^2 + 2 D F = 512, activations B S (10 D + 4 F) + 4 B H S^2 = 1408;
        # a device: 4 B x ((x + act) // (f t) + 3 params // (f t) + params // t)
        ("fsdp_tp", 4 * (1472 // 6 + 1536 // 6 + 512 // 2)),  # f = 3, t = 2: 4 x (245 + 256 + 256)
        ("fsdp", 4 * (1472 // 3 + 1536 // 3 + 512)),  # f = 3, t = 1: 4 x (490 + 512 + 512)
        ("tp", 4 * (1472 // 2 + 1536 // 2 + 512 // 2)),  # f = 1, t = 2
    ],
)
def test_a_transformer_blocks_estimate(sharding, device):
    op = BlockOp(sharding, ("X", "Y"), DIMS)
    # host: (x + params) x 4 B + 4 B x (2 x + 4 params + act) = 2304 + 14336
    assert memory.estimate({"op": op, "dtype": "float32"}, MESH) == {
        "host_bytes": RUNTIME + 16640,
        "per_device_bytes": device,
    }
    assert device in (3028, 6056, 7040)


@pytest.mark.parametrize(
    "axes, sharding, device",
    [
        # D = 3, F = 5: params 66, x 24, act 656; over X=5, Y=4 neither 3 params nor params divides:
        # 4 B x (680 // 20 + 198 // 20 + 66 // 4) = 4 x (34 + 9 + 16)
        (["X", "Y"], "fsdp_tp", 4 * (34 + 9 + 16)),
        (["Y"], "tp", 4 * (680 // 4 + 198 // 4 + 66 // 4)),  # one axis, tensor-parallel: t = 4
    ],
)
def test_a_blocks_shards_round_down(axes, sharding, device):
    op = BlockOp(sharding, tuple(axes), dict(DIMS, D=3, F=5))
    # host: (24 + 66) x 4 B + 4 B x (48 + 264 + 656)
    assert memory.estimate({"op": op, "dtype": "float32"}, {"X": 5, "Y": 4}) == {
        "host_bytes": RUNTIME + 360 + 3872,
        "per_device_bytes": device,
    }


def test_a_programs_estimate():
    # inputs A[I_X, J] (7 x 5 = 35, 35 // 3 = 11 a device) and B[J, K_Y] (20, 10): four times the shards
    prog = ProgramOp("m:f", ("A[I_X, J]", "B[J, K_Y]"), {"I": 7, "J": 5, "K": 4}, ("X", "Y"))
    assert memory.estimate({"op": prog, "dtype": "float32"}, MESH) == {
        "host_bytes": RUNTIME + 55 * 4,
        "per_device_bytes": 4 * 21 * 4,
    }


@pytest.mark.parametrize(
    "dims, host, device",
    [
        # A[I_X, J] 35 (11 a device), B[J, K] 20 unsharded, C[I_X, K] 28 (9); room for the largest, A
        ({"I": 7, "J": 5, "K": 4}, 83 * 4 + 8 * 83, (11 + 20 + 9 + 35) * 4),
        # A 10 (3), B 50, C 20 (6): B the largest
        ({"I": 2, "J": 5, "K": 10}, 80 * 4 + 8 * 80, (3 + 50 + 6 + 50) * 4),
        # A 14 (4), B 20, C 70 (23): C the largest
        ({"I": 7, "J": 2, "K": 10}, 104 * 4 + 8 * 104, (4 + 20 + 23 + 70) * 4),
    ],
)
def test_a_matmuls_estimate(dims, host, device):
    # host: the three arrays and their float64 copies; a device: its shards and the largest array
    mm = MatmulOp("A[I_X, J] * B[J, K] -> C[I_X, K]", dims, "auto", ("X",))
    assert memory.estimate({"op": mm, "dtype": "float32"}, MESH) == {"host_bytes": host, "per_device_bytes": device}


def test_exactly_on_the_bar_fits_and_the_estimate_comes_back_whole():
    # host 115 MiB + 6 devices x 30 MiB = 295 MiB, exactly 0.8 x 368.75 MiB: fits
    s = {"op": CollectiveOp("all_reduce", ("X",), 3 * MiB), "dtype": "float32"}
    s["hardware"] = {"kind": "cpu"}
    assert memory.check_fits(s, MESH, host_bytes_free=386662400) == {
        "host_bytes": RUNTIME + 6 * 2 * 4 * MiB + 3 * MiB,
        "per_device_bytes": 30 * MiB,
        "host_total_bytes": 295 * MiB,
    }
    # 10 GiB a device, exactly 0.8 x 12.5 GiB: fits
    big = dict(s, op=dataclasses.replace(s["op"], size_bytes=1 << 30))
    out = memory.check_fits(big, {"X": 2}, device_limit_bytes=13421772800, host_bytes_free=100 << 30)
    assert out["per_device_bytes"] == 10 << 30
