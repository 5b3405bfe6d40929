"""The book's prediction for any expression in its notation: a collective, a sharded matmul
or a bare array (:func:`predict_expr`, the one dispatcher)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from analysis.book.dtypes import dtype_bytes
from analysis.book.hardware import Hardware
from analysis.book.matmul_cost import MatmulPrediction, predict_matmul
from analysis.book.notation import Array, Collective, check, mesh_sizes, parse
from analysis.book.notation_cost import CollectiveCost, cost_collective
from analysis.book.units import fmt_num, fmt_time

__all__ = ["ArrayPrediction", "predict_expr"]


@dataclass(frozen=True)
class ArrayPrediction:
    """A bare array: what one device holds and how long reading it from HBM takes."""

    expression: str
    local_shape: tuple[int, ...]
    bytes_per_device: float
    bytes_total: float
    predicted_time_s: float | None
    formula: str

    @property
    def time_s(self) -> float | None:
        return self.predicted_time_s

    def to_dict(self) -> dict:
        d = asdict(self)
        d["time_s"] = d.pop("predicted_time_s")
        return {**d, "V_bytes": self.bytes_per_device, "regime": None, "collectives": []}


def predict_expr(
    expr, mesh, sizes, dtype: str, hw: Hardware, topology: str | None = None, precision: str | None = None
) -> CollectiveCost | MatmulPrediction | ArrayPrediction:
    """Predict an expression (text or parsed): a collective, a matmul (its math at the rate
    ``dtype`` runs at ``precision``, :meth:`Hardware.flops`) or a bare array."""
    expr = parse(expr) if isinstance(expr, str) else expr
    if isinstance(expr, Collective):
        return cost_collective(expr, mesh, sizes, dtype, hw, topology)
    if not isinstance(expr, Array):
        return predict_matmul(expr, mesh, sizes, dtype, hw, topology, precision=precision)
    check(expr, mesh, sizes)
    m, (_, b) = mesh_sizes(mesh), dtype_bytes(dtype)
    shape = tuple(sizes[d.name] // math.prod(m[a] for a in d.axes) for d in expr.dims)
    per = b * math.prod(shape)
    total = per * math.prod(m.values())
    t = per / hw.hbm_bw_Bps if hw.hbm_bw_Bps else None
    txt = f"{fmt_num(b)} B * {' * '.join(map(str, shape))} = {per:,.0f} bytes per device"
    if t is not None:
        txt += f"; read from HBM in {fmt_num(per)} B / {fmt_num(hw.hbm_bw_Bps)} B/s = {fmt_time(t)}"
    return ArrayPrediction(str(expr), shape, per, total, t, txt)
