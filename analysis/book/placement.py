"""Where a mesh's axes lie on a TPU slice's physical axes, and which of those are rings.

A logical mesh axis is not one physical axis: ``mesh_utils.create_device_mesh`` (what the
runner builds meshes with) spreads an axis over several physical axes (a 64-device axis on a
4x4x4 slice spans x, y and z) and splits a physical axis between mesh axes (a v6e-16, 4x4, as
a mesh (8, 2)). A :class:`Placement` records, per mesh axis, its extent along each physical
dimension - ``x``, ``y``, ``z`` (chips), ``core`` (TensorCores of one chip shown as separate
JAX devices: TPU v3, TPU7x) and ``slice`` (slices joined by DCN) - taken from the devices'
coordinates (:func:`from_positions`; the runner records it in result.json) or, for hardware at
hand only as a shape, from ``--topology`` (:func:`from_topology`: mesh axes take the slice's
axes in order, as a row-major reshape).

Wraparound follows the scaling book: a group along a physical axis is a ring only when it
spans that whole axis of the slice and the chip wraps it - v4/v5p (``multiple_of_4``) only in
a slice of full 4x4x4 cubes (every dimension a multiple of 4: a 2x2x4 slice wraps nothing),
v5e/v6e (``only_16``) only an axis of 16, v3 (``always``) every axis. A part of an axis is a
line. Pure Python: the runner, the CLI and the report all use it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from analysis.book.errors import NotationError

__all__ = ["DIMS", "CHIP_DIMS", "Placement", "from_positions", "from_topology", "axis_wraps", "position", "spread"]

CHIP_DIMS = ("x", "y", "z")
DIMS = (*CHIP_DIMS, "core", "slice")


def axis_wraps(rule: str | None, shape: Sequence[int], size: int) -> bool:
    """Whether a physical axis of ``size`` chips, in a slice of chip ``shape``, has wraparound
    under the hardware's ``rule`` (dimensions of 1 are not axes)."""
    if rule == "always":
        return True
    if rule == "multiple_of_4":  # the optical switches close only full 4x4x4 cubes
        return all(s % 4 == 0 for s in shape if s > 1)
    if rule == "only_16":
        return size == 16
    return False


@dataclass(frozen=True)
class Placement:
    """One slice's chip ``shape``, ``cores`` per chip (devices), ``slices``, and per mesh axis
    its extent along each physical dimension it spans (``{"X": {"x": 4, "y": 4}}``)."""

    shape: tuple[int, ...]
    axes: dict = field(default_factory=dict)
    cores: int = 1
    slices: int = 1
    source: str = ""

    def size(self, dim: str) -> int:
        """The whole extent of physical dimension ``dim``."""
        if dim == "core":
            return self.cores
        if dim == "slice":
            return self.slices
        i = CHIP_DIMS.index(dim)
        return self.shape[i] if i < len(self.shape) else 1

    def group(self, axes: Sequence[str]) -> dict[str, int]:
        """A group over mesh ``axes``: its extent along each physical dimension (more than 1),
        the product of the axes' parts (two mesh axes that split one physical axis together
        span their product of it), at most the whole dimension (JAX folds a v5e ring of 8
        into two mesh axes that each touch both of its rows)."""
        out: dict[str, int] = {}
        for a in axes:
            for d, e in self.axes[a].items():
                out[d] = out.get(d, 1) * int(e)
        return {d: min(out[d], self.size(d)) for d in DIMS if out.get(d, 1) > 1}

    def ring(self, rule: str | None, dim: str, extent: int) -> bool:
        """Whether a group of ``extent`` along ``dim`` is a ring (the whole axis, wrapped)."""
        if dim not in CHIP_DIMS:
            return False
        return extent == self.size(dim) and axis_wraps(rule, self.shape, self.size(dim))

    def links(self, rule: str | None, axes: Sequence[str]) -> tuple[list[int], list[bool]]:
        """A group over mesh ``axes`` as the cost model takes it: its extent along each chip
        axis it spans (x, y, z), and whether each is a ring."""
        chip = [(d, e) for d, e in self.group(axes).items() if d in CHIP_DIMS]
        return [e for _, e in chip], [self.ring(rule, d, e) for d, e in chip]

    def describe(self, axes: Sequence[str]) -> str:
        """``z (4 of 4)`` / ``x (4 of 4), y (2 of 4)``: where a group over ``axes`` lies."""
        g = self.group(axes)
        return ", ".join(f"{d} ({e} of {self.size(d)})" for d, e in g.items()) or "one device"

    def to_dict(self) -> dict:
        """As result.json records it (``spec.mesh.physical``)."""
        return {
            "slice_shape": list(self.shape),
            "cores_per_chip": self.cores,
            "slices": self.slices,
            "axes": {a: dict(v) for a, v in self.axes.items()},
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Placement:
        """The inverse of :meth:`to_dict`."""
        return cls(
            tuple(int(s) for s in d["slice_shape"]),
            {a: {k: int(e) for k, e in v.items()} for a, v in d["axes"].items()},
            int(d.get("cores_per_chip") or 1),
            int(d.get("slices") or 1),
            str(d.get("source") or ""),
        )


def from_positions(positions: Sequence[Sequence[int]], mesh: dict[str, int], source: str = "devices") -> Placement:
    """A placement from each mesh device's ``(x, y, z, core, slice)``, listed row-major over
    the mesh (the first axis slowest, as ``mesh.devices.flat``). An axis' extent along a
    dimension is the number of distinct values its groups take there (the largest group's)."""
    names, sizes = list(mesh), [int(s) for s in mesh.values()]
    pos = [tuple(int(v) for v in p) + (0,) * (5 - len(p)) for p in positions]
    if len(pos) != math.prod(sizes):
        raise NotationError(f"{len(pos)} device positions for a mesh of {math.prod(sizes)} devices")
    first = [p for p in pos if p[4] == pos[0][4]]
    shape = tuple(max(p[i] for p in first) - min(p[i] for p in first) + 1 for i in range(3))
    axes = {}
    for i, (name, m) in enumerate(zip(names, sizes)):
        stride = math.prod(sizes[i + 1 :])
        ext = [1] * 5
        for base in range(len(pos)):
            if (base // stride) % m:
                continue  # not the first member of its group
            members = [pos[base + j * stride] for j in range(m)]
            ext = [max(e, len({p[k] for p in members})) for k, e in enumerate(ext)]
        axes[name] = {d: e for d, e in zip(DIMS, ext) if e > 1}
    return Placement(shape, axes, len({p[3] for p in pos}), len({p[4] for p in pos}), source)


def spread(positions: Sequence[Sequence[int]]) -> dict[str, int]:
    """How many distinct values a set of device positions takes along each dimension (more
    than 1): a group's extent along the physical axes."""
    pos = [tuple(p) for p in positions]
    width = max((len(p) for p in pos), default=0)
    ext = {DIMS[k]: len({p[k] for p in pos}) for k in range(width)}
    return {d: e for d, e in ext.items() if e > 1}


def position(index: int, shape: Sequence[int]) -> tuple[int, ...]:
    """Device ``index``'s coordinates in ``shape``, row-major (the first axis slowest)."""
    out = []
    for s in reversed(shape):
        out.append(index % s)
        index //= s
    return tuple(reversed(out))


def from_topology(mesh: dict[str, int], shape: Sequence[int], text: str | None = None) -> Placement:
    """The placement ``--topology`` implies: device ``i`` of the mesh (row-major) sits at
    position ``i`` of the slice's chips (row-major), so the mesh axes take the slice's axes in
    order, an axis larger than one physical axis spanning the next ones too (X=64 on 4x4x4
    spans x, y and z) and a smaller one sharing it with the next mesh axis. The runner's
    recorded placement (JAX's own assignment) may differ; the report prices from that."""
    shape = [int(s) for s in shape]
    n = math.prod(int(s) for s in mesh.values())
    label = text or "x".join(map(str, shape))
    if math.prod(shape) != n:
        raise NotationError(f"topology {label!r} has {math.prod(shape)} chips but the mesh has {n}")
    if len(shape) > 3:
        raise NotationError(f"topology {label!r} has more than three axes (x, y, z)")
    pos = [position(i, shape) for i in range(n)]
    return from_positions(pos, mesh, f"--topology {label}: mesh axes take its axes in order")
