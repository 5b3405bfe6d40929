"""The physical ceiling a collective's bandwidth is held against.

On ``cpu`` the virtual devices are threads sharing one memory system, so the ceiling is the
host's copy bandwidth, measured in the worker itself (same process, same moment) with a
NumPy copy. On TPU/GPU it is the book's link bandwidth from the hardware entry.
"""
from __future__ import annotations

import time

import numpy as np

COPY_BYTES = 64 << 20
_host_copy: dict | None = None


def host_copy_bandwidth(repeats: int = 5) -> dict:
    """Best-of-``repeats`` bandwidth of a 64 MiB NumPy copy (bytes copied per second).

    Measured once per worker process: it is a property of the machine, and a copy of 64 MiB
    twice over (source and destination) is large enough to leave the caches.
    """
    global _host_copy
    if _host_copy is None:
        src = np.ones(COPY_BYTES, dtype=np.uint8)
        dst = np.empty_like(src)
        np.copyto(dst, src)  # fault the pages in before timing
        best = min(_timed_copy(dst, src) for _ in range(repeats))
        _host_copy = {"kind": "host_copy", "Bps": COPY_BYTES / best,
                      "what": f"NumPy copy of {COPY_BYTES >> 20} MiB in the worker process, best of {repeats}"}
    return _host_copy


def _timed_copy(dst, src) -> float:
    t0 = time.perf_counter()
    np.copyto(dst, src)
    return time.perf_counter() - t0


def ceiling(hardware: dict) -> dict | None:
    """The bandwidth ceiling for this run's hardware, or None if the entry has none."""
    if hardware.get("kind") == "cpu":
        return host_copy_bandwidth()
    if hardware.get("interconnect") == "switch" and hardware.get("link_bw_unidir_Bps"):
        return {"kind": "link", "Bps": float(hardware["link_bw_unidir_Bps"]),
                "what": f"{hardware['name']} per-GPU NVLink egress (book constant)"}
    if hardware.get("link_bw_bidir_Bps"):
        return {"kind": "link", "Bps": float(hardware["link_bw_bidir_Bps"]),
                "what": f"{hardware['name']} bidirectional ICI link bandwidth (book constant)"}
    return None
