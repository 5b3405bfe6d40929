"""Will it fit? A memory estimate per sweep point, checked before anything compiles.

A 64 GiB AllReduce typed by mistake should be a one-line error, not minutes of swapping or the
OOM killer. The estimate counts what a point holds at its peak, per device: its input, up to
three outputs (a step's result is allocated before the previous ones are released), the loop
estimator's copy of the input and its temporary output, and the collective's own buffers and
the allocator's slack, measured: 4 V for AllReduce, 3 V for AllGather, V for ReduceScatter,
2 V/p for AllToAll; plus a fixed 64 MiB for compiling and running, and,
on CPU, the ceiling's copies (every device reads and writes up to 64 MiB) and one device's slice
of the NumPy answer while it is checked. Inputs and answers are built one shard at a time, so no
host array of the whole size exists. The loop's copy is counted wherever ``timing.loop`` is on,
though round 1 leaves the loop out of a CPU step it finds long (``timing.loop_check_below_s``):
the estimate is made before anything runs, so it stays a bound.

It is calibrated as an upper bound of the worker's resident high-water mark (``memory_peak``
in result.json, measured in a fresh worker), which varies by up to a third from run to run
with the allocator and more with the JAX version: at 64 MiB over 8 CPU devices the collectives
grew by 1.8-3.1 GiB (AllGather), 2.0-2.2 GiB (ReduceScatter) and 3.0-4.0 GiB (AllReduce) in
nine runs on jax 0.10, and by 3.0-4.1 GiB, 1.8-2.0 GiB and 4.1-5.6 GiB (AllReduce's
mean 4.8 GiB, sd 0.44 GiB, over nine runs) on jax 0.12; AllToAll by 420-580 MiB on both. The
estimate is 4.6, 2.7, 6.1 GiB and 696 MiB. At 1 KiB they grow by 23 MiB.

On the CPU backend the devices live in host memory. What is free is the least of
MemAvailable, the cgroup's limit less its usage (containers, Kubernetes, systemd) and
SLURM's allocation.
"""

from __future__ import annotations

import math
import os

from analysis.book.collectives import BY_OP, bus_bytes, local_bytes, per_device_bytes
from analysis.book.notation import parse
from analysis.book.units import fmt_bytes
from runner.config.matmul_plan import parse_matmul
from runner.errors import ConfigError

HEADROOM = 0.8  # leave a fifth of what is free to Python, JAX and XLA's temporaries
RUNTIME_BYTES = 64 * 2**20  # compiling and running a point's programs: 23 MiB measured at 1 KiB


def host_available_bytes(root: str = "/") -> int | None:
    """Bytes this process may still use: the least of MemAvailable (``/proc/meminfo``), the
    cgroup's memory limit less its usage (v2 ``memory.max``/``memory.current``, v1
    ``memory.limit_in_bytes``/``usage_in_bytes``) and SLURM's allocation (``SLURM_MEM_PER_NODE``
    or ``SLURM_MEM_PER_CPU`` x ``SLURM_CPUS_ON_NODE``, in MiB); None when none is known.
    ``root`` lets tests point at a fake file system."""
    found = []
    meminfo = _read(os.path.join(root, "proc/meminfo"))
    for line in (meminfo or "").splitlines():
        if line.startswith("MemAvailable:"):
            found.append(int(line.split()[1]) * 1024)
    for limit, usage in (
        ("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory.current"),
        ("sys/fs/cgroup/memory/memory.limit_in_bytes", "sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        lim, use = _read(os.path.join(root, limit)), _read(os.path.join(root, usage))
        if lim and lim.strip().isdigit() and int(lim) < 1 << 60:  # "max" or a huge v1 number: no limit
            found.append(int(lim) - (int(use) if use and use.strip().isdigit() else 0))
    env = os.environ
    if env.get("SLURM_MEM_PER_NODE", "").isdigit():
        found.append(int(env["SLURM_MEM_PER_NODE"]) << 20)
    elif env.get("SLURM_MEM_PER_CPU", "").isdigit() and env.get("SLURM_CPUS_ON_NODE", "").isdigit():
        found.append(int(env["SLURM_MEM_PER_CPU"]) * int(env["SLURM_CPUS_ON_NODE"]) << 20)
    if not found:
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return None
    return max(min(found), 0)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


CEILING_CAP = 64 << 20  # runner.worker.ceiling copies at most this much per device
# A collective's own buffers and the allocator's slack, per device, as a multiple of its larger
# buffer (nccl-tests' S: V, or V/p for AllToAll), measured (see the module); one per collective.
WORKING_SET = {"all_gather": 3, "reduce_scatter": 1, "all_reduce": 4, "all_to_all": 2}


def estimate(spec: dict, mesh_axes: dict[str, int]) -> dict[str, int]:
    """``{"host_bytes", "per_device_bytes"}`` for one point on a resolved mesh: its op's own count
    (each kind of :mod:`runner.config.op_spec` calls one of the functions below)."""
    loop = spec.get("timing", {}).get("loop", True)
    return spec["op"].estimate(mesh_axes, spec["dtype"], loop, spec.get("check_result", True))


def collective_bytes(op, mesh_axes: dict[str, int], loop: bool, checked: bool) -> dict[str, int]:
    """A :class:`~runner.config.op_spec.CollectiveOp`'s count (see the module); ``loop``: the loop
    estimator's programs are built, ``checked``: its result is checked."""
    V = op.size_bytes
    p = math.prod(mesh_axes[a] for a in op.axes)
    devices = math.prod(mesh_axes.values())
    inp, out = local_bytes(op.name, V, p)  # per device: input and output of one step
    device = inp + 3 * out  # up to three step results alive at once
    if loop:
        device += inp + out  # the loop's copy of its carry and its temporary output
    # the collective's own buffers and the allocator's slack: measured (see the module)
    device += per_device_bytes(BY_OP[op.name].S_side, V, p, WORKING_SET[op.name])
    ceiling = devices * 2 * min(max(bus_bytes(op.name, V, p), 4096), CEILING_CAP)
    check = out if checked else 0  # one shard of the answer at a time
    return {"host_bytes": RUNTIME_BYTES + ceiling + check, "per_device_bytes": device}


def block_bytes(op, mesh_axes: dict[str, int], elem_bytes: int) -> dict[str, int]:
    """A :class:`~runner.config.op_spec.BlockOp`'s count: its activations, weights and gradients per device."""
    d = op.dims
    B, S, D, F, H = d["B"], d["S"], d["D"], d["F"], d["H"]
    axes = op.axes
    f = mesh_axes[axes[0]] if op.sharding != "tp" else 1
    t = mesh_axes[axes[-1]] if op.sharding != "fsdp" else 1
    x, params = B * S * D, 4 * D * D + 2 * D * F
    act = B * S * (10 * D + 4 * F) + 4 * B * H * S * S  # forward activations kept for the backward
    # host: the inputs, and the unsharded reference step on one device (float32)
    host = (x + params) * elem_bytes + 4 * (2 * x + 4 * params + act)
    # a device: its batch's activations, its weights' shards and gradients, one layer gathered
    device = elem_bytes * ((x + act) // (f * t) + 3 * params // (f * t) + params // t)
    return {"host_bytes": RUNTIME_BYTES + host, "per_device_bytes": device}


def program_bytes(op, mesh_axes: dict[str, int], elem_bytes: int) -> dict[str, int]:
    """A :class:`~runner.config.op_spec.ProgramOp`'s count: its temporaries are unknown, so each
    input four times over."""
    total = shard = 0
    for text in op.inputs:
        dims = parse(text).dims
        n = math.prod(op.dims[x.name] for x in dims)
        total += n
        shard += n // math.prod(mesh_axes[a] for x in dims for a in x.axes)
    return {"host_bytes": RUNTIME_BYTES + total * elem_bytes, "per_device_bytes": 4 * shard * elem_bytes}


def matmul_bytes(op, mesh_axes: dict[str, int], elem_bytes: int) -> dict[str, int]:
    """A :class:`~runner.config.op_spec.MatmulOp`'s count: its arrays on the host and their float64
    reference; a device's shards."""
    mm = parse_matmul(op.expr)
    dims = op.dims

    def size(arr) -> tuple[int, int]:
        n = math.prod(dims[d.name] for d in arr.dims)
        shards = math.prod(mesh_axes.get(a, 1) for a in arr.axes)
        return n, n // max(shards, 1)

    (na, la), (nb, lb), (nc, lc) = size(mm.lhs), size(mm.rhs), size(mm.out)
    # host: the two inputs, the float64 reference and its float64 operands, the fetched result
    host = (na + nb + nc) * elem_bytes + 8 * (na + nb + nc)
    # a device: its shards, its output, and room for one gathered input or a full product
    device = (la + lb + lc + max(na, nb, nc)) * elem_bytes
    return {"host_bytes": host, "per_device_bytes": device}


def check_fits(
    spec: dict,
    mesh_axes: dict[str, int],
    device_limit_bytes: int | None = None,
    host_bytes_free: int | None = None,
    devices_on_host: bool | None = None,
) -> dict[str, int]:
    """Raise ConfigError if the point cannot fit; return the estimate.

    ``device_limit_bytes``: one accelerator's memory (JAX's ``memory_stats()["bytes_limit"]``,
    or the hardware entry's ``memory_bytes`` when the allocator reports none, as
    ``XLA_PYTHON_CLIENT_ALLOCATOR=platform`` does). ``devices_on_host``: whether the devices'
    buffers live in host memory (the CPU backend); by default, when the hardware is cpu or
    auto and no device limit is known.
    """
    est = estimate(spec, mesh_axes)
    devices = math.prod(mesh_axes.values())
    if devices_on_host is None:
        devices_on_host = spec["hardware"]["kind"] in ("cpu", "auto") and device_limit_bytes is None
    on_host = est["host_bytes"] + (devices * est["per_device_bytes"] if devices_on_host else 0)
    free = host_available_bytes() if host_bytes_free is None else host_bytes_free
    setting = spec["op"].size_setting  # op.size_bytes=..., or a matmul's, block's or program's op.dims=...
    if free is not None and on_host > HEADROOM * free:
        raise ConfigError(
            f"{setting}: needs about {fmt_bytes(on_host)} of host memory "
            f"({spec['op'].name} on {devices} devices, dtype {spec['dtype']}) but "
            f"{fmt_bytes(free)} is available; use a smaller size"
        )
    if device_limit_bytes is not None and est["per_device_bytes"] > HEADROOM * device_limit_bytes:
        raise ConfigError(
            f"{setting}: needs about {fmt_bytes(est['per_device_bytes'])} per device "
            f"but a device has {fmt_bytes(device_limit_bytes)}; use a smaller size"
        )
    return dict(est, host_total_bytes=on_host)
