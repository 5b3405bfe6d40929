"""What memory a point may use, read exactly from a fake file system and environment (issue 30's
mutation check): MemAvailable in kB, cgroup v2 and v1 limits less their usage on both sides of
the "no limit" bound, SLURM's per-node and per-CPU allocations, the least of them all, and the
machine's RAM only when nothing else is known; and the estimates of a transformer block (each
sharding), a user's program and a matmul, on sizes that do not divide evenly."""

from __future__ import annotations

import os

import pytest

from runner.config import memory
from runner.config.memory import host_available_bytes

SLURM = ("SLURM_MEM_PER_NODE", "SLURM_MEM_PER_CPU", "SLURM_CPUS_ON_NODE")
MiB = 1 << 20


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


RUNTIME = 64 * MiB
MESH = {"X": 3, "Y": 2}
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
    op = {"name": "transformer_block", "dims": DIMS, "axes": ["X", "Y"], "sharding": sharding}
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
    op = {"name": "transformer_block", "dims": dict(DIMS, D=3, F=5), "axes": axes, "sharding": sharding}
    # host: (24 + 66) x 4 B + 4 B x (48 + 264 + 656)
    assert memory.estimate({"op": op, "dtype": "float32"}, {"X": 5, "Y": 4}) == {
        "host_bytes": RUNTIME + 360 + 3872,
        "per_device_bytes": device,
    }


def test_a_programs_estimate():
    # inputs A[I_X, J] (7 x 5 = 35, 35 // 3 = 11 a device) and B[J, K_Y] (20, 10): four times the shards
    prog = {"name": "program", "inputs": ["A[I_X, J]", "B[J, K_Y]"], "dims": {"I": 7, "J": 5, "K": 4}}
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
    mm = {"name": "matmul", "expr": "A[I_X, J] * B[J, K] -> C[I_X, K]", "dims": dims}
    assert memory.estimate({"op": mm, "dtype": "float32"}, MESH) == {"host_bytes": host, "per_device_bytes": device}


def test_exactly_on_the_bar_fits_and_the_estimate_comes_back_whole():
    # host 115 MiB + 6 devices x 30 MiB = 295 MiB, exactly 0.8 x 368.75 MiB: fits
    s = {"op": {"name": "all_reduce", "axes": ["X"], "size_bytes": 3 * MiB}, "dtype": "float32"}
    s["hardware"] = {"kind": "cpu"}
    assert memory.check_fits(s, MESH, host_bytes_free=386662400) == {
        "host_bytes": RUNTIME + 6 * 2 * 4 * MiB + 3 * MiB,
        "per_device_bytes": 30 * MiB,
        "host_total_bytes": 295 * MiB,
    }
    # 10 GiB a device, exactly 0.8 x 12.5 GiB: fits
    big = dict(s, op=dict(s["op"], size_bytes=1 << 30))
    out = memory.check_fits(big, {"X": 2}, device_limit_bytes=13421772800, host_bytes_free=100 << 30)
    assert out["per_device_bytes"] == 10 << 30
