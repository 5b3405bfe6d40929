"""Will it fit? A memory estimate per sweep point, checked before anything compiles.

A 64 GiB AllReduce typed by mistake should be a one-line error, not minutes of swapping or
the OOM killer. The estimate counts the buffers shardlab itself creates: the host arrays
(NumPy input and reference), each device's input and output, and a gathered copy where a
strategy gathers. On the CPU backend the virtual devices live in host memory, so their
buffers count against the host too. XLA's temporaries are not counted: it is a floor, and
points near the limit may still fail (they are then recorded as crashed, and the sweep goes on).
"""
from __future__ import annotations

import math
import os

from analysis.book.dtypes import itemsize
from analysis.book.units import fmt_bytes, format_size
from runner.errors import ConfigError
from runner.matmul_plan import parse_matmul

HEADROOM = 0.8  # leave a fifth of what is free to Python, JAX and XLA's temporaries


def host_available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else physical memory, else None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def estimate(spec: dict, mesh_axes: dict[str, int]) -> dict[str, int]:
    """``{"host_bytes", "per_device_bytes"}`` for one point on a resolved mesh."""
    op = spec["op"]
    if op["name"] == "matmul":
        return _matmul(op, mesh_axes, itemsize(spec["dtype"]))
    V = op["size_bytes"]
    p = math.prod(mesh_axes[a] for a in op["axes"])
    host, device = {
        "all_gather": (2 * V, V // p + V),
        "reduce_scatter": (p * V + 2 * V, V + V // p),
        "all_reduce": (p * V + 2 * V, 2 * V),
        "all_to_all": (2 * V, 2 * V // p),
    }[op["name"]]
    return {"host_bytes": host, "per_device_bytes": device}


def _matmul(op: dict, mesh_axes: dict[str, int], elem_bytes: int) -> dict[str, int]:
    mm = parse_matmul(op["expr"])
    dims = op["dims"]

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


def check_fits(spec: dict, mesh_axes: dict[str, int], device_limit_bytes: int | None = None,
               host_bytes_free: int | None = None, devices_on_host: bool | None = None) -> dict[str, int]:
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
    key = "op.dims" if spec["op"]["name"] == "matmul" else "op.size_bytes"
    value = spec["op"].get("dims") or format_size(spec["op"].get("size_bytes") or 0)
    if free is not None and on_host > HEADROOM * free:
        raise ConfigError(f"{key}={value}: needs about {fmt_bytes(on_host)} of host memory "
                          f"({spec['op']['name']} on {devices} devices, dtype {spec['dtype']}) but "
                          f"{fmt_bytes(free)} is available; use a smaller size")
    if device_limit_bytes is not None and est["per_device_bytes"] > HEADROOM * device_limit_bytes:
        raise ConfigError(f"{key}={value}: needs about {fmt_bytes(est['per_device_bytes'])} per device "
                          f"but a device has {fmt_bytes(device_limit_bytes)}; use a smaller size")
    return dict(est, host_total_bytes=on_host)
