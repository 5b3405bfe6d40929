"""In the worker: meshes, inputs, checks and decisions that work with one JAX process or many.

In multi-controller JAX every process runs the same program on its own devices and sees
only its own shards, so four things change when a mesh spans processes:

* the device array is built explicitly (:func:`build_mesh`), to say which axis crosses
  processes;
* inputs are assembled from each process's own part of a host array (:func:`global_array`);
* the result check compares only the shards this process holds (:func:`shard_pairs`);
* every process must run the same number of steps, or one waits forever inside a collective:
  every loop's stop decision and trip count is taken by process 0 and shared (:func:`agree`).

With one process each of these does what the single-process runner always did.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import socket
from pathlib import Path

import jax
import numpy as np
from jax._src import distributed  # private: the coordination client JAX holds has no public accessor
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh

from analysis.book.placement import CHIP_DIMS, from_positions
from runner.errors import ConfigError

AGREE_TIMEOUT_MS = 60_000  # raised on the waiting side if process 0 never decides


def build_mesh(
    mesh_axes: dict[str, int], cross_process_axis: str | None = None, devices=None, name: str = "mesh"
) -> Mesh:
    """The mesh ``mesh_axes`` (name -> size, in order) over ``devices`` (default: every device
    of every process), with Explicit axes as ``jax.make_mesh`` gives them.

    The device array comes from :func:`device_array`; a shape the devices cannot form is one
    ConfigError naming the mesh and the devices' topology."""
    explicit = (AxisType.Explicit,) * len(mesh_axes)  # the matmuls' out_sharding needs them
    arr = device_array(mesh_axes, jax.devices() if devices is None else devices, cross_process_axis, name)
    return Mesh(arr, tuple(mesh_axes), axis_types=explicit)


def device_array(mesh_axes: dict[str, int], devices, cross_process_axis: str | None = None, name: str = "mesh"):
    """The devices laid out as the mesh (a NumPy object array of shape ``mesh_axes``' sizes).

    * TPU, one slice: ``mesh_utils.create_device_mesh`` with ``allow_split_physical_axes``,
      which lays each axis on the torus (rings where it can) and may spread one axis over
      several physical axes or split one physical axis between mesh axes, so a v6e-16 (4x4)
      makes a mesh (8, 2) and a 4x4x4 a mesh (8, 8) (``jax.make_mesh`` refuses both). The
      slice's hosts share one torus, so ``cross_process_axis`` changes nothing there.
    * TPU, several slices: a hybrid mesh with slices as granules (``slice_index``): one axis
      (``cross_process_axis``, else the first whose size the slice count divides) has its outer
      part across the slices (DCN), everything else inside each slice on its torus.
    * GPU and CPU: as before - ``create_device_mesh`` (GPUs ordered by id), and with
      ``cross_process_axis`` that axis across the processes: a multiple of the process count
      is XLA's hybrid mesh with processes as granules (every group along the other axes stays
      in one process); a divisor of it (one process per GPU, numbered node by node) takes the
      devices ordered by (process, id) with that axis outermost, so it spans blocks of
      processes (the nodes) and the other axes stay within a block.
    """
    names, sizes = list(mesh_axes), [int(s) for s in mesh_axes.values()]
    devices = list(devices)[: math.prod(sizes)]  # as jax.make_mesh: the first devices (a smaller mesh)
    platform = devices[0].platform if devices else "cpu"
    if platform == "gpu":
        # GPUs by id, as jax 0.10.2's mesh_utils orders them (jax.devices() lists them by
        # process); jax 0.10.0's kept the order it was given
        devices = sorted(devices, key=lambda d: d.id)
    try:
        if len(devices) != math.prod(sizes):
            raise ValueError(f"{len(devices)} devices for {math.prod(sizes)} mesh positions")
        if platform == "tpu":
            slices = {getattr(d, "slice_index", 0) for d in devices}
            if len(slices) == 1:
                return mesh_utils.create_device_mesh(sizes, devices, allow_split_physical_axes=True)
            k = _granule_axis(mesh_axes, len(slices), cross_process_axis, "slices")
            per = [s // len(slices) if i == k else s for i, s in enumerate(sizes)]
            dcn = [len(slices) if i == k else 1 for i in range(len(sizes))]
            return mesh_utils.create_hybrid_device_mesh(per, dcn, devices, allow_split_physical_axes=True)
        n = len({d.process_index for d in devices})
        if cross_process_axis is None or n == 1:
            return mesh_utils.create_device_mesh(sizes, devices)
        size = mesh_axes[cross_process_axis]
        if size % n and n % size:
            raise ConfigError(
                f"distributed.cross_process_axis={cross_process_axis}: its size {size} and the "
                f"{n} processes must divide one another"
            )
        if size % n == 0:
            k = names.index(cross_process_axis)
            per = [s // n if i == k else s for i, s in enumerate(sizes)]
            across = [n if i == k else 1 for i in range(len(sizes))]
            return mesh_utils.create_hybrid_device_mesh(per, across, devices, process_is_granule=True)
        ordered = sorted(devices, key=lambda d: (d.process_index, d.id))
        order = [cross_process_axis] + [a for a in names if a != cross_process_axis]
        arr = np.array(ordered, dtype=object).reshape([mesh_axes[a] for a in order])
        return arr.transpose([order.index(a) for a in names])
    except ConfigError:
        raise
    except (ValueError, NotImplementedError, AssertionError) as exc:  # mesh_utils' refusals
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        shape = ",".join(f"{a}={s}" for a, s in mesh_axes.items())
        raise ConfigError(
            f"mesh={name} ({shape}) cannot be laid on the devices ({device_topology(devices)}): {why}"
        ) from None


def _granule_axis(mesh_axes: dict[str, int], granules: int, axis: str | None, what: str) -> int:
    """Which mesh axis crosses the ``granules`` (slices): ``axis`` if given, else the first
    (outermost, the least network-intensive in JAX's convention) whose size they divide."""
    names = list(mesh_axes)
    candidates = [axis] if axis is not None else names
    for a in candidates:
        if mesh_axes[a] % granules == 0:
            return names.index(a)
    which = f"distributed.cross_process_axis={axis} (size {mesh_axes[axis]})" if axis else "no mesh axis"
    raise ValueError(f"{which} is a multiple of the {granules} {what}, so none can cross them")


def device_topology(devices) -> str:
    """The devices in words: count, kind, and on TPU the chips' shape, cores per chip and slices
    (``16 TPU v6 lite devices: chips 4x4x1, 1 core per chip, 1 slice``)."""
    devices = list(devices)
    if not devices:
        return "no devices"
    kind = getattr(devices[0], "device_kind", devices[0].platform)
    text = f"{len(devices)} {kind} device{'s' if len(devices) != 1 else ''}"
    coords = [tuple(getattr(d, "coords", None) or ()) for d in devices]
    if all(coords):
        extent = "x".join(str(max(c[i] for c in coords) - min(c[i] for c in coords) + 1) for i in range(len(coords[0])))
        cores = len({getattr(d, "core_on_chip", 0) for d in devices})
        slices = len({getattr(d, "slice_index", 0) for d in devices})
        plural = {1: ""}
        text += f": chips {extent}, {cores} core{plural.get(cores, 's')} per chip"
        text += f", {slices} slice{plural.get(slices, 's')}"
    processes = len({d.process_index for d in devices})
    return text + (f", {processes} processes" if processes > 1 else "")


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


def physical_placement(mesh: Mesh, wraparound: str | None = None) -> dict | None:
    """Where each mesh axis lies on the physical axes (x, y, z, core, slice), read from the
    devices' coordinates (:mod:`analysis.book.placement`), as result.json records it; with the
    hardware's ``wraparound`` rule, also whether each axis' part of each chip axis is a ring.
    None on devices without coordinates (CPU, GPU)."""
    devices = list(mesh.devices.flat)
    if not all(getattr(d, "coords", None) is not None for d in devices):
        return None
    pos = [(*d.coords, getattr(d, "core_on_chip", 0) or 0, getattr(d, "slice_index", 0) or 0) for d in devices]
    place = from_positions(pos, dict(mesh.shape), f"devices: {device_topology(devices)}")
    out = place.to_dict()
    if wraparound is not None:
        out["wraparound"] = {
            a: {d: place.ring(wraparound, d, e) for d, e in ext.items() if d in CHIP_DIMS}
            for a, ext in place.axes.items()
        }
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


def agree(value):
    """Process 0's ``value``, in every process: the decisions that set how many collectives each
    process runs (a loop's stop, a trip count K, the traced steps, the ceiling's retries).

    Each process times its own iterations, so their local rules could disagree; one that
    stopped early would leave the others blocked in the next collective. ``value`` is anything
    JSON holds (a flag, a count); every process must call this the same number of times, in
    the same order. Uses the coordination service's key-value store (no device work, nothing
    in the traces).
    """
    if jax.process_count() == 1:
        return value
    client = distributed.global_state.client
    key = f"shardlab/agree/{next(_decisions)}"
    if jax.process_index() == 0:
        client.key_value_set(key, json.dumps(value))
        return value
    return json.loads(client.blocking_key_value_get(key, AGREE_TIMEOUT_MS))


def trace_dir(base: Path) -> Path:
    """Where this process writes its trace: ``base``, or ``base/host<i>`` with several processes
    (each writes ``<hostname>.xplane.pb``, the same name on one machine)."""
    return base / f"host{jax.process_index()}" if jax.process_count() > 1 else base
