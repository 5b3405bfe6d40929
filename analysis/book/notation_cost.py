"""A collective written in the notation (``AllGather_X(A[I_X, J])``), priced with the book's
model: its V from the mesh and the global dim sizes, and its time from
:func:`analysis.book.collective_cost.predict_collective` over the fabric the mesh axes lie on
(:class:`CostContext`, :func:`cost_collective`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from analysis.book import collectives
from analysis.book.collective_cost import CollectivePrediction, Span, placed_group, predict_collective
from analysis.book.dtypes import dtype_bytes
from analysis.book.hardware import Hardware, wraparound_for, wraparound_reason
from analysis.book.notation import check, mesh_sizes
from analysis.book.placement import CHIP_DIMS, Placement, from_topology
from analysis.book.topology import Fabric, fabrics_for, parse_layout, split_axes
from analysis.book.units import fmt_bytes, fmt_num

__all__ = ["CollectiveCost", "CostContext", "cost_collective"]


@dataclass(frozen=True)
class CollectiveCost:
    """A collective written in notation, with its V and predicted time."""

    expression: str
    result: str
    axes: tuple[str, ...]
    V_formula: str
    prediction: CollectivePrediction
    axis_notes: tuple[str, ...] = ()

    @property
    def time_s(self) -> float:
        return self.prediction.time_s

    def to_dict(self) -> dict:
        d = {
            "expression": self.expression,
            "result": self.result,
            "axes": list(self.axes),
            "V_formula": self.V_formula,
            "axis_notes": list(self.axis_notes),
            "collectives": [self.expression],
        }
        return {**d, **self.prediction.to_dict()}


@dataclass(frozen=True)
class CostContext:
    """What costing expressions needs: the mesh, global dim sizes, dtype, hardware and which
    mesh axes are rings; with a multi-node/slice topology, the network's levels and each mesh
    axis' extent at each level. Build it with :meth:`build`; :meth:`cost` prices one collective."""

    mesh: dict
    sizes: dict
    dtype: str
    bytes_per: float
    hw: Hardware
    rings: dict
    fabrics: tuple[Fabric, ...] = ()
    parts: dict = field(default_factory=dict)
    placement: Placement | None = None  # on a torus: where each mesh axis lies on the slice's axes

    @classmethod
    def build(
        cls, mesh, sizes, dtype: str, hw: Hardware, topology: str | None, placement: Placement | None = None
    ) -> CostContext:
        """The context for ``mesh`` on ``hw``; ``placement`` (recorded from the devices) or a
        slice ``topology`` says where the mesh axes lie on a torus."""
        m = mesh_sizes(mesh)
        name, b = dtype_bytes(dtype)
        rings = dict(zip(m, wraparound_for(hw, list(m.values()), topology))) if hw.interconnect else {}
        layout = parse_layout(topology) if topology is not None else None
        if layout is None or layout.kind == "shape" or not hw.interconnect:
            if placement is None and layout is not None and hw.interconnect == "torus":
                placement = from_topology(m, list(layout.shape), topology)
            if placement is not None and hw.interconnect == "torus":
                rings = {a: _all_rings(hw, placement, [a]) for a in m}
            return cls(m, dict(sizes or {}), name, b, hw, rings, placement=placement)
        fabrics = fabrics_for(hw, layout, math.prod(m.values()))
        parts = dict(zip(m, split_axes(list(m.values()), [f.block for f in fabrics])))
        return cls(m, dict(sizes or {}), name, b, hw, rings, tuple(fabrics), parts)

    def cost(self, coll) -> CollectiveCost:
        """V and predicted time of ``coll`` (a ``notation.Collective``), already checked."""
        # V: the operand as written (the unreduced array), or without the collective's axes
        op = coll.operand
        full = op if collectives.kind(coll.kind).V_side == "operand" else op.without_axes(coll.axes)
        elems = full.local_elements(self.mesh, self.sizes)
        parts = [str(self.sizes[d.name] // math.prod(self.mesh[a] for a in d.axes)) for d in full.dims]
        v = self.bytes_per * elems
        v_txt = f"{fmt_num(self.bytes_per)} B * {' * '.join(parts)} = {v:,.0f} bytes ({fmt_bytes(v)})"
        sizes = [self.mesh[a] for a in coll.axes]
        rings = [self.rings[a] for a in coll.axes]
        spans = None
        if self.fabrics:
            spans = [
                Span(f, tuple(self.parts[a][i] for a in coll.axes), tuple(rings)) for i, f in enumerate(self.fabrics)
            ]
        if self.placement is not None and not self.fabrics:
            # the physical axes the group spans, not the mesh axes
            pred = predict_collective(coll.kind, v, hw=self.hw, **placed_group(self.hw, self.placement, coll.axes))
        else:
            pred = predict_collective(coll.kind, v, sizes, self.hw, rings, spans)
        notes = tuple(f"{a}={self.mesh[a]}: {self._why(a)}" for a in coll.axes)
        return CollectiveCost(str(coll), str(coll.result()), tuple(coll.axes), v_txt, pred, notes)

    def _why(self, axis: str) -> str:
        """How one mesh axis lies on the network, in words."""
        size = self.mesh[axis]
        inner = self.parts[axis][0] if self.fabrics else size
        if self.hw.interconnect == "torus" and self.placement is not None and not self.fabrics:
            return _placed_why(self.hw, self.placement, axis)
        if self.hw.interconnect == "torus":
            why = f"{'ring' if self.rings[axis] else 'line'} ({wraparound_reason(self.hw, inner)})"
        elif self.hw.interconnect == "switch":
            why = "NVSwitch, every GPU one hop from every other"
        else:
            why = "host, the ring formula with the fitted W and T_min"
        if not self.fabrics or (inner == size and self.fabrics[0].bw_attr == "link_bw_unidir_Bps"):
            return why
        return (
            " x ".join(
                f"{p} {f.where} ({f.name}{', ' + why if i == 0 and f.interconnect == 'torus' else ''})"
                for i, (p, f) in enumerate(zip(self.parts[axis], self.fabrics))
                if p > 1
            )
            or why
        )


def _placed_why(hw: Hardware, place: Placement, axis: str) -> str:
    """Where one mesh axis lies on the slice's physical axes, and why each is a ring or line."""
    g = place.group([axis])
    sizes, rings = place.links(hw.wraparound, [axis])
    parts = []
    if sizes:
        what = "ring" if all(rings) else "line" if not any(rings) else "rings and lines"
        chips = ", ".join(f"{d} ({e} of {place.size(d)})" for d, e in g.items() if d in CHIP_DIMS)
        shape = place.shape
        parts.append(
            f"on {chips} of slice {'x'.join(map(str, shape))}: {what} ({wraparound_reason(hw, max(sizes), shape)})"
        )
    if "slice" in g:
        parts.append(f"across {g['slice']} slices ({getattr(hw, 'scaleout_network', None) or 'DCN'})")
    return "; ".join(parts) or "one device"


def _all_rings(hw: Hardware, placement: Placement, axes: list[str]) -> bool:
    """Whether every physical axis a group over ``axes`` spans is a ring."""
    return all(placement.ring(hw.wraparound, d, e) for d, e in placement.group(axes).items() if d in CHIP_DIMS)


def cost_collective(coll, mesh, sizes, dtype: str, hw: Hardware, topology: str | None = None) -> CollectiveCost:
    """V and predicted time of a parsed collective (``notation.Collective``) on a mesh with
    global dim sizes."""
    check(coll, mesh, sizes)
    return CostContext.build(mesh, sizes, dtype, hw, topology).cost(coll)
