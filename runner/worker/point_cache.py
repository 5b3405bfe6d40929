"""The worker's prepared points, kept from a point's first round to its later ones.

A later round (:func:`runner.worker.point_round.retime`) used to build the point again: the mesh, the
program, its inputs placed on the devices (the costly part: a 64 MiB input is made element by
element and copied to 8 devices), the lowering and a compile from JAX's cache, and the loop
programs compiled again per trip count. Across a default sweep's later rounds that was 3.4 to
16.5 s here, for no new measurement. So the worker keeps each prepared point (its inputs on the
devices, the compiled step and loop programs, the loop's own carry) under a key made of what
defines it, and a later round times the point as it stands.

Nothing a round does changes a point's inputs: the step does not donate them and the loop
donates its own copy (:class:`runner.worker.programs.loop.LoopPrograms`), so every round times the
same program on the same buffers. The cache is bounded by memory: it holds at most
``SHARE`` of what is free (host memory on CPU, where devices' buffers live; a device's memory
elsewhere), drops its oldest points first, and drops more before a point is prepared when that
point would not fit beside them (:func:`make_room`). A round that finds its point gone places the
inputs again and says so in its ``inputs`` entry in result.json.
"""

from __future__ import annotations

import json
from collections import OrderedDict

import jax

from runner.config.memory import HEADROOM, host_available_bytes

# Of the memory free (plus what the cache holds), the part the cache may hold: small enough
# that a larger point later in the sweep still passes its memory check (runner.config.memory.check_fits
# admits a point to 80% of what is free), large enough for a default sweep's 17 points (about
# 0.3 GiB of inputs and loop carries together).
SHARE = 0.125

_points: OrderedDict[str, tuple[object, int]] = OrderedDict()  # key -> (Point, bytes held), oldest first
_dropped: set[str] = set()  # keys dropped for memory: a later round says why it placed its inputs again


def key(spec: dict) -> str:
    """What defines a prepared point: its op, mesh, dtype, precision, hardware, processes and
    whether it has loop programs (not the timing rules, the trace or the check, which rounds
    read from their own spec)."""
    parts = {k: spec.get(k) for k in ("op", "mesh", "dtype", "precision", "hardware", "distributed")}
    parts["loop"] = bool((spec.get("timing") or {}).get("loop"))
    # a typed op (runner.config.op_spec) by its plain form, so equal ops key alike whatever
    # order their dims were given in
    return json.dumps(parts, sort_keys=True, default=lambda o: o.to_json() if hasattr(o, "to_json") else str(o))


def held_bytes(point) -> int:
    """Bytes a prepared point keeps on this process's devices: its inputs and the loop's
    carry (the compiled programs are small beside them)."""
    arrays = list(point.args)
    if point.loop is not None and point.loop.carry is not None:
        arrays += list(point.loop.carry)
    total = 0
    for a in jax.tree.leaves(arrays):
        shards = getattr(a, "addressable_shards", None)
        total += sum(s.data.nbytes for s in shards) if shards is not None else getattr(a, "nbytes", 0)
    return int(total)


def budget_bytes(held: int) -> int | None:
    """What the cache may hold, given that it holds ``held`` bytes now (None: no bound known)."""
    devices = jax.local_devices()
    if jax.default_backend() != "cpu":
        limit = (devices[0].memory_stats() or {}).get("bytes_limit")
        return int(SHARE * limit * len(devices)) if limit else None
    free = host_available_bytes()
    return None if free is None else int(SHARE * (free + held))


def get(spec: dict):
    """The prepared point of ``spec``, or None; a hit becomes the newest entry."""
    k = key(spec)
    if k not in _points:
        return None
    _points.move_to_end(k)
    return _points[k][0]


def put(spec: dict, point) -> list[str]:
    """Keep ``point`` for ``spec``'s later rounds (replacing any older one of the same key), then
    drop the oldest points while the cache holds more than its budget (the new one too, when it
    alone is over). Returns the keys dropped."""
    k = key(spec)
    _points.pop(k, None)
    _points[k] = (point, held_bytes(point))
    held = sum(b for _, b in _points.values())
    budget = budget_bytes(held)
    dropped = []
    while _points and budget is not None and held > budget:
        old, (_, b) = _points.popitem(last=False)
        held -= b
        dropped.append(old)
    _dropped.difference_update(_points)  # a point put back is no longer a dropped one
    _dropped.update(dropped)
    return dropped


def why_missing(spec: dict) -> str:
    """Why the cache has no point for ``spec``, in words for result.json."""
    if key(spec) in _dropped:
        return "dropped from the worker's cache of prepared points to stay within its memory budget"
    return "not prepared in this worker process (a new worker, or another process of the group)"


def make_room(estimate: dict[str, int], devices: int) -> list[str]:
    """Before a point is prepared: drop the oldest points while the cache's bytes and the new
    point's (``estimate``: :func:`runner.config.memory.estimate` on ``devices`` devices) would not fit
    in ``HEADROOM`` of the memory the point is admitted to (the cache's own bytes counted as
    free: they are what the point may reuse). Returns the keys dropped."""
    held = sum(b for _, b in _points.values())
    if jax.default_backend() == "cpu":
        need, free = estimate["host_bytes"] + devices * estimate["per_device_bytes"], host_available_bytes()
        room = None if free is None else HEADROOM * (free + held)
    else:  # per device, against one device's memory
        local = max(len(jax.local_devices()), 1)
        limit = (jax.local_devices()[0].memory_stats() or {}).get("bytes_limit")
        need, room = estimate["per_device_bytes"] * local, None if not limit else HEADROOM * limit * local
    dropped = []
    while _points and room is not None and need + held > room:
        old, (_, b) = _points.popitem(last=False)
        held -= b
        dropped.append(old)
    _dropped.update(dropped)
    return dropped


def drop(spec: dict) -> None:
    """Forget ``spec``'s point (a round that failed: its buffers may be in any state)."""
    _points.pop(key(spec), None)


def clear() -> None:
    """Forget every point."""
    _points.clear()


def stats() -> dict:
    """How many points the cache holds, and their bytes."""
    return {"points": len(_points), "bytes": sum(b for _, b in _points.values())}
