"""The physical ceiling a collective's bus bandwidth is held against.

On ``cpu`` the virtual devices are threads sharing one memory system, so the ceiling is
measured, not published: every device reads and writes the collective's bus bytes (what
nccl-tests' bus bandwidth counts one device moving) at the same time, in an XLA loop on the
same mesh, so the copies run on the same device threads and contend for the same cores and
memory as the collective does. :func:`device_copy` measures one size; the ceiling is a curve
over sizes (:mod:`runner.worker.copy_curve`, measured once with repeats and reused), so cache-resident
sizes get their cache's ceiling. (A single-threaded 64 MiB NumPy
copy is no ceiling for 8 device threads: collectives measured here exceeded it, divided by
8, by up to 7x, and it read 4.0e9 to 1.06e10 B/s across runs.)

On TPU and GPU it is the book's link roofline: W_bidi per link times the k axes a torus
collective runs over, or one GPU's NVLink egress behind a switch.
"""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from analysis.book.placement import CHIP_DIMS, Placement
from runner.worker import meshes

MIN_BYTES, MAX_BYTES = 4 << 10, 64 << 20  # above 64 MiB the copy rate is flat (DRAM)
TRAFFIC_PER_TIMING = 32 << 20  # bytes each device moves per timed call: dispatch becomes noise
REPEATS = 3
_programs: dict = {}


def device_copy(
    mesh, bytes_per_device: int, repeats: int = REPEATS, clock=time.perf_counter, agree=None, keep: bool = False
) -> dict:
    """Bytes per second each device reads and writes when all of them do so at once
    (``clock``: injectable, for tests; ``agree``: the retry decision every process follows,
    :func:`runner.worker.meshes.agree` by default, as the mesh may span processes; ``keep``: keep this
    size's buffers beside the others', as :mod:`runner.worker.copy_curve` visits its sizes in turn,
    until :func:`release`)."""
    agree = meshes.agree if agree is None else agree
    nbytes = int(min(max(bytes_per_device, MIN_BYTES), MAX_BYTES)) // 4 * 4
    devices = math.prod(mesh.shape.values())
    axes = tuple(mesh.axis_names)
    key = (id(mesh), nbytes)
    if key not in _programs:
        fn = _programs.get("fn") or jax.jit(lambda x, k: jax.lax.fori_loop(0, k, lambda i, y: y + 1.0, x))
        x = jax.device_put(np.zeros(devices * nbytes // 4, np.float32), NamedSharding(mesh, P(axes)))
        if not keep:  # one size at a time: the buffers can be large
            _programs.clear()
        _programs["fn"] = fn
        _programs[key] = (fn, x)
        fn(x, jnp.int32(1)).block_until_ready()  # compile and fault the buffers in
    fn, x = _programs[key]
    k = int(min(max(TRAFFIC_PER_TIMING // (2 * nbytes), 2), 4096))

    def timed(kk: int) -> float:
        t0 = clock()
        fn(x, jnp.int32(kk)).block_until_ready()
        return clock() - t0

    # (t(2K) - t(K)) / K: the dispatch and sync of one call cancel out. With few iterations
    # (K = 4 at 3.5 MiB a device) a stall in the shorter call can make the difference negative:
    # then twice the iterations, up to three times (a 4 MiB AllGather here once got no ceiling).
    for _ in range(3):
        per_iter = [(timed(2 * k) - timed(k)) / k for _ in range(repeats)]
        t = float(np.median(per_iter))
        if agree(t > 0):
            break
        k *= 2
    return {
        "kind": "device_copy",
        "busbw_Bps": nbytes / t if t > 0 else None,
        "bytes_per_device": nbytes,
        "devices": devices,
        "iterations": k,
        "what": f"each of the {devices} devices reading and writing {nbytes} B at once (x+1 in an XLA loop), "
        f"median of {repeats}",
    }


def release() -> None:
    """Free the copies' buffers and program."""
    _programs.clear()


def link_roofline(
    hardware: dict, n_axes: int, physical: dict | None = None, axes: list[str] | None = None
) -> dict | None:
    """The book's bus-bandwidth roofline for a collective, from the hardware entry: one GPU's
    NVLink egress behind a switch; on a torus, W_bidi per physical axis the group spans. With
    ``physical`` (the placement result.json records, :mod:`analysis.book.placement`) and the
    op's mesh ``axes``, that is the x/y/z axes the group really spans (a 64-device mesh axis
    on a 4x4x4 spans three, a mesh axis split off one physical axis shares it); without, each
    of the ``n_axes`` mesh axes counts as one. None where the entry has no link constants."""
    if hardware.get("interconnect") == "switch" and hardware.get("link_bw_unidir_Bps"):
        bw = float(hardware["link_bw_unidir_Bps"])
        return {"kind": "link", "busbw_Bps": bw, "what": f"{hardware['name']} per-GPU NVLink egress (book constant)"}
    if not hardware.get("link_bw_bidir_Bps"):
        return None
    w_bi = float(hardware["link_bw_bidir_Bps"])
    if not (physical and axes):
        links = max(n_axes, 1)
        what = f"{hardware['name']} bidirectional ICI link bandwidth x {links} mesh axis/axes (book)"
        return {"kind": "link", "busbw_Bps": w_bi * links, "physical_axes": links, "what": what}
    group = Placement.from_dict(physical).group(axes)
    spans = [d for d in group if d in CHIP_DIMS]
    core = float(hardware.get("core_bw_unidir_Bps") or 0) if "core" in group else 0.0
    links = len(spans) if spans or core else 1
    parts = [f"bidirectional ICI link bandwidth x {links} physical axis/axes ({', '.join(spans)})"] if links else []
    if core:  # the two cores of one chip: on-chip, at their own W, both ways
        parts.append("2 x the on-chip W between a chip's two cores")
    return {
        "kind": "link",
        "busbw_Bps": w_bi * links + 2 * core,
        "physical_axes": links,
        "what": f"{hardware['name']} {' + '.join(parts)} (book constants)",
    }
