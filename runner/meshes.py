"""In the worker: meshes, inputs, checks and decisions that work with one JAX process or many.

In multi-controller JAX every process runs the same program on its own devices and sees
only its own shards, so four things change when a mesh spans processes:

* the device array is built explicitly (:func:`build_mesh`), to say which axis crosses
  processes;
* inputs are assembled from each process's own part of a host array (:func:`global_array`);
* the result check compares only the shards this process holds (:func:`shard_pairs`);
* every process must run the same number of steps, or one waits forever inside a collective:
  the timing loop's stop decisions are taken by process 0 and shared (:func:`agree`).

With one process each of these does what the single-process runner always did.
"""

from __future__ import annotations

import itertools
import os
import socket
from pathlib import Path

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

from runner.errors import ConfigError

AGREE_TIMEOUT_MS = 60_000  # raised on the waiting side if process 0 never decides


def build_mesh(mesh_axes: dict[str, int], cross_process_axis: str | None = None) -> Mesh:
    """The mesh ``mesh_axes`` (name -> size, in order) over all devices of all processes.

    Without ``cross_process_axis``: ``jax.make_mesh``, which lays the axes on the physical
    topology (on a TPU slice, rings on the torus; device ids are interleaved across hosts, so
    ordering by id would not give rings). With it, that axis goes across the processes:

    * a multiple of the process count (a few processes with many devices each, as
      ``distributed=local`` or one process per TPU host): XLA's hybrid mesh, processes as
      granules, so every group along the other axes lies within one process and, there, on
      the topology;
    * a divisor of it (one process per GPU, as SLURM starts them, numbered node by node): the
      devices ordered by (process, id), the axis outermost, so it spans blocks of processes -
      the nodes - and the other axes stay within a block.
    """
    names, sizes = list(mesh_axes), list(mesh_axes.values())
    explicit = (AxisType.Explicit,) * len(names)  # as jax.make_mesh gives: the matmuls' out_sharding needs them
    if cross_process_axis is None:
        return jax.make_mesh(tuple(sizes), tuple(names), axis_types=explicit)
    size, n = mesh_axes[cross_process_axis], jax.process_count()
    if size % n and n % size:
        raise ConfigError(
            f"distributed.cross_process_axis={cross_process_axis}: its size {size} and the "
            f"{n} processes must divide one another"
        )
    k = names.index(cross_process_axis)
    if size % n == 0:
        from jax.experimental import mesh_utils

        per_process = [s // n if i == k else s for i, s in enumerate(sizes)]
        across = [n if i == k else 1 for i in range(len(sizes))]
        arr = mesh_utils.create_hybrid_device_mesh(per_process, across, process_is_granule=True)
        return Mesh(arr, tuple(names), axis_types=explicit)
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    order = [cross_process_axis] + [a for a in names if a != cross_process_axis]
    arr = np.array(devices, dtype=object).reshape([mesh_axes[a] for a in order])
    return Mesh(arr.transpose([order.index(a) for a in names]), tuple(names), axis_types=explicit)


def device_coords(mesh: Mesh) -> list[dict]:
    """Each mesh device's id, process and, where the platform has them (TPU), its physical
    coordinates and core: which devices are neighbours on the links."""
    out = []
    for d in mesh.devices.flat:
        rec = {"id": d.id, "process": d.process_index}
        coords = getattr(d, "coords", None)
        if coords is not None:
            rec["coords"] = list(coords)
            rec["core_on_chip"] = getattr(d, "core_on_chip", None)
        out.append(rec)
    return out


def describe(mesh: Mesh, op_axes: list[str]) -> dict:
    """Which axes span processes, and how many processes one group of ``op_axes`` spans."""
    procs = np.vectorize(lambda d: d.process_index, otypes=[int])(mesh.devices)
    names = list(mesh.axis_names)
    cross = [a for i, a in enumerate(names) if (np.diff(procs, axis=i) != 0).any()]
    idx = [names.index(a) for a in op_axes]
    rest = [i for i in range(len(names)) if i not in idx]
    groups = procs.transpose(rest + idx).reshape(-1, int(np.prod([procs.shape[i] for i in idx])))
    per_group = max(len(set(g)) for g in groups.tolist())
    return {
        "process_count": jax.process_count(),
        "cross_process_axes": cross,
        "processes_per_group": per_group,
        "crosses_processes": per_group > 1,
    }


def process_info() -> dict:
    """This process's part: its index, its devices' global ids, its host."""
    return {
        "process_id": jax.process_index(),
        "process_count": jax.process_count(),
        "device_ids": [d.id for d in jax.local_devices()],
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }


def global_array(host: np.ndarray, sharding) -> jax.Array:
    """``host`` laid out as ``sharding``, each process filling only its own devices.

    Same result as ``jax.device_put(host, sharding)`` in one process; also correct when the
    sharding spans processes (every process holds the same ``host``).
    """
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def shard_pairs(got: jax.Array, want: np.ndarray):
    """``(device id, its shard, the same slice of want)`` for every shard this process holds.

    A replicated result has one shard per device, each a full copy: every copy is compared,
    not just one (a collective that leaves 7 of 8 devices wrong must fail its check). With
    several processes each compares the shards on its own devices.
    """
    for s in got.addressable_shards:
        yield s.device.id, np.asarray(s.data), np.asarray(want[s.index])


_decisions = itertools.count()


def agree(flag: bool) -> bool:
    """Process 0's ``flag``, in every process: the timing loop's stop decisions.

    Each process times its own iterations, so their local stopping rules could disagree;
    one that stopped early would leave the others blocked in the next collective. Uses the
    coordination service's key-value store (no device work, nothing in the traces).
    """
    if jax.process_count() == 1:
        return flag
    from jax._src import distributed  # the client JAX already holds; no public accessor

    client = distributed.global_state.client
    key = f"shardlab/agree/{next(_decisions)}"
    if jax.process_index() == 0:
        client.key_value_set(key, "1" if flag else "0")
        return flag
    return client.blocking_key_value_get(key, AGREE_TIMEOUT_MS) == "1"


def trace_dir(base: Path) -> Path:
    """Where this process writes its trace: ``base``, or ``base/host<i>`` with several processes
    (each writes ``<hostname>.xplane.pb``, the same name on one machine)."""
    return base / f"host{jax.process_index()}" if jax.process_count() > 1 else base
