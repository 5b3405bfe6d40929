"""Sharded matmul programs, one per strategy, from a :class:`runner.config.matmul_plan.Plan`.

``auto`` is plain ``jax.jit`` with the inputs' shardings and the output sharding on the
einsum itself (jax 0.10's explicit mesh axes require ``out_sharding=`` when a contracting
dim is sharded): XLA picks the collectives. The other strategies are ``jax.shard_map``
programs that state every collective: gather then multiply, multiply then AllReduce or
ReduceScatter, or a ``ppermute`` ring that multiplies one block while the next is in flight
(collective matmul). Inputs are small integers, so float32 results are exact and every
strategy can be checked exactly.

Every product runs at the config's ``precision`` (``jax.lax.Precision``: default, high,
highest), so a float32 point times what a user's own float32 matmul runs: TF32 on an NVIDIA
GPU and one bfloat16 pass on TPU at ``default``, float32 arithmetic at ``highest``. The check
stays exact at every precision: the inputs (0..6 and 0..4) are exact in bfloat16 (8
significant bits) and TF32 (11), so is every product (at most 24), and float32 accumulates
their sums exactly below 2^24. On 16-bit inputs the precision changes nothing.

The reference (:class:`ExactProduct`) is the exact product, built one shard's slice at a time
from the inputs' period in O(elements of the slice): the same values NumPy's float64 einsum
gives (which is O(n^3) on one core: 11.5 s of a 2048^3 point here, minutes at 8192^3).
"""

from __future__ import annotations

import math
import string

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding

from analysis.book.notation import Array, Matmul, to_partition_spec
from runner.config.matmul_plan import Plan, flops, parse_matmul, plan, used_axes
from runner.config.op_spec import MatmulOp
from runner.worker.programs.base import Program

A_PERIOD, B_PERIOD = 7, 5  # the inputs' values: A's flat index mod 7, B's mod 5


def _host(shape: tuple[int, ...], period: int, dtype) -> np.ndarray:
    # Values 0..period-1 tiled: small integers keep float32 sums exact up to 2^24.
    n = math.prod(shape)
    return np.tile(np.arange(period, dtype=np.float32), -(-n // period))[:n].reshape(shape).astype(dtype)


def _strides(shape: list[int]) -> list[int]:
    """Row-major strides, in elements."""
    out = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        out[i] = out[i + 1] * shape[i + 1]
    return out


class ExactProduct:
    """``lhs * rhs -> out`` of the inputs :func:`build` makes, exactly, one slice at a time.

    ``A`` at a flat index ``f`` holds ``f mod 7`` and ``B`` ``f mod 5``. Split an element of
    ``A`` by its dims: its flat index mod 7 is ``u + g`` with ``u`` from the dims it shares with
    the output and ``g`` from the contracting dims; likewise ``v + h`` (mod 5) for ``B``. An
    output element is then ``T[u, v] = sum over contracting indices of ((u + g) mod 7) *
    ((v + h) mod 5)``, and only how many contracting indices have each ``(g, h)`` matters: a
    7 x 5 table, built once in O(contracting size), and a lookup per element. Each process
    builds only the slices its own devices hold (as :class:`~.base.LazyArray` does)."""

    def __init__(self, mm: Matmul, dims: dict[str, int], dtype):
        P, Q = A_PERIOD, B_PERIOD
        lhs, rhs = [d.name for d in mm.lhs.dims], [d.name for d in mm.rhs.dims]
        sa = dict(zip(lhs, _strides([dims[n] for n in lhs])))
        sb = dict(zip(rhs, _strides([dims[n] for n in rhs])))
        self.shape = tuple(dims[d.name] for d in mm.out.dims)
        self.dtype = np.dtype(dtype)
        # per output dim: its steps in u (mod 7) and v (mod 5); 0 where the input lacks the dim
        self._steps = [(sa.get(d.name, 0) % P, sb.get(d.name, 0) % Q) for d in mm.out.dims]
        count = np.zeros((P, Q), np.int64)  # contracting indices per (g, h)
        count[0, 0] = 1
        for c in mm.contracting:
            i = np.arange(dims[c], dtype=np.int64)
            hist = np.bincount((i * sa[c]) % P * Q + (i * sb[c]) % Q, minlength=P * Q).reshape(P, Q)
            count = sum(hist[g, h] * np.roll(count, (g, h), axis=(0, 1)) for g in range(P) for h in range(Q))
        table = (
            (np.add.outer(np.arange(P), np.arange(P)) % P) @ count @ (np.add.outer(np.arange(Q), np.arange(Q)) % Q).T
        )
        # (u, v) as one residue w mod 35 (7 and 5 are coprime): u = w mod 7, v = w mod 5. The
        # table repeats once per output dim, so a sum of per-dim residues needs no mod.
        w = np.arange(P * Q * len(self.shape))
        values = table[w % P, w % Q]  # exact in int64; through float64, as NumPy's float64 einsum was
        self._table = values.astype(np.float64).astype(self.dtype)
        self._index_dtype = np.uint8 if len(w) <= 256 else np.int32

    def __getitem__(self, index) -> np.ndarray:
        P, Q = A_PERIOD, B_PERIOD
        index = index if isinstance(index, tuple) else (index,)
        index = index + (slice(None),) * (len(self.shape) - len(index))
        w = self._index_dtype(0)
        for axis, (i, n, (su, sv)) in enumerate(zip(index, self.shape, self._steps)):
            at = np.arange(*i.indices(n), dtype=np.int64)
            shape = [1] * len(self.shape)
            shape[axis] = -1
            # the residue mod 35 that is u mod 7 and v mod 5: 15 is 1 mod 7 and 0 mod 5, 21 the reverse
            w = w + ((at * su % P * 15 + at * sv % Q * 21) % (P * Q)).astype(self._index_dtype).reshape(shape)
        return self._table[w]

    def __array__(self, dtype=None, copy=None):
        out = self[tuple(slice(None) for _ in self.shape)]
        return out.astype(dtype) if dtype is not None else out


def build(op: MatmulOp, mesh: jax.sharding.Mesh, dtype: str, precision: str) -> Program:
    """The program for the matmul ``op`` (its expr, dims and strategy) on ``mesh``, every
    product at ``precision`` (a ``jax.lax.Precision`` name)."""
    mm = parse_matmul(op.expr)
    dims = op.dims
    steps = plan(mm, op.strategy, dict(mesh.shape))
    prec = jax.lax.Precision(precision)
    np_dtype = jnp.dtype(dtype)
    letters = {
        n: string.ascii_lowercase[i]
        for i, n in enumerate(dict.fromkeys(d.name for arr in (mm.lhs, mm.rhs, mm.out) for d in arr.dims))
    }
    sub = lambda arr: "".join(letters[d.name] for d in arr.dims)  # noqa: E731
    eq = f"{sub(mm.lhs)},{sub(mm.rhs)}->{sub(mm.out)}"
    a = _host(tuple(dims[d.name] for d in mm.lhs.dims), A_PERIOD, np_dtype)
    b = _host(tuple(dims[d.name] for d in mm.rhs.dims), B_PERIOD, np_dtype)
    specs = [to_partition_spec(x) for x in (mm.lhs, mm.rhs, mm.out)]
    out_sharding = NamedSharding(mesh, specs[2])

    if steps.strategy == "auto":
        fn = jax.jit(lambda x, y: jnp.einsum(eq, x, y, out_sharding=out_sharding, precision=prec))
    else:
        body = _ring_body(mm, steps, eq, mesh, prec) if steps.ring else _steps_body(mm, steps, eq, mesh, prec)
        # check_vma=False: replication after the gathers and sums is by construction.
        fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=tuple(specs[:2]), out_specs=specs[2], check_vma=False))

    def make_input():
        return (jax.device_put(a, NamedSharding(mesh, specs[0])), jax.device_put(b, NamedSharding(mesh, specs[1])))

    def reference():
        return ExactProduct(mm, dims, np_dtype)

    total = flops(mm, dims)
    return Program(
        f"{mm}",
        fn,
        make_input,
        reference,
        None,
        extra={
            "strategy": steps.strategy,
            "dims": dict(dims),
            "flops": total,
            "axes": used_axes(mm),
            "size_bytes": int((a.size + b.size) * np_dtype.itemsize),
            "plan": {k: v for k, v in vars(steps).items() if v},
        },
    )


def _axis_of(arr: Array, dim: str) -> int:
    return [d.name for d in arr.dims].index(dim)


def _slice(x, axes: tuple[str, ...], axis: int, mesh):
    n = math.prod(mesh.shape[a] for a in axes)
    size = x.shape[axis] // n
    return jax.lax.dynamic_slice_in_dim(x, jax.lax.axis_index(axes) * size, size, axis)


def _steps_body(mm: Matmul, p: Plan, eq: str, mesh, prec):
    """Gather / slice the inputs, multiply locally, sum, then reach the output sharding."""

    def body(x, y):
        for side, arr in (("lhs", mm.lhs), ("rhs", mm.rhs)):
            v = x if side == "lhs" else y
            for d, axes in p.gather[side].items():
                v = jax.lax.all_gather(v, axes, axis=_axis_of(arr, d), tiled=True)
            for d, axes in p.slice[side].items():
                v = _slice(v, axes, _axis_of(arr, d), mesh)
            x, y = (v, y) if side == "lhs" else (x, v)
        z = jnp.einsum(eq, x, y, precision=prec)
        for d, axes in p.scatter.items():
            z = jax.lax.psum_scatter(z, axes, scatter_dimension=_axis_of(mm.out, d), tiled=True)
        if p.psum:
            z = jax.lax.psum(z, p.psum)
        for d, axes in p.out_gather.items():
            z = jax.lax.all_gather(z, axes, axis=_axis_of(mm.out, d), tiled=True)
        for d, axes in p.out_slice.items():
            z = _slice(z, axes, _axis_of(mm.out, d), mesh)
        return z

    return body


def _ring_body(mm: Matmul, p: Plan, eq: str, mesh, prec):
    """Collective matmul: p-1 ``ppermute`` steps, each started before the block it
    overlaps is multiplied, so a backend with async collectives can hide them."""
    kind, axis, dim = p.ring
    n = mesh.shape[axis]
    to_left = [(j, (j - 1) % n) for j in range(n)]
    to_right = [(j, (j + 1) % n) for j in range(n)]

    if kind == "allgather":
        row_axis = _axis_of(mm.out, dim)

        def body(x, y):
            idx = jax.lax.axis_index(axis)
            rows = x.shape[_axis_of(mm.lhs, dim)]
            out_shape = list(jax.eval_shape(lambda a, b: jnp.einsum(eq, a, b), x, y).shape)
            out_shape[row_axis] = rows * n
            out = jnp.zeros(out_shape, x.dtype)
            block = x
            for step in range(n):
                nxt = jax.lax.ppermute(block, axis, to_left) if step < n - 1 else None
                src = (idx + step) % n  # after `step` shifts left, this device holds block idx+step
                product = jnp.einsum(eq, block, y, precision=prec)
                out = jax.lax.dynamic_update_slice_in_dim(out, product, src * rows, row_axis)
                block = nxt
            return out

        return body

    col_axis = _axis_of(mm.rhs, dim)

    def body(x, y):
        idx = jax.lax.axis_index(axis)
        cols = y.shape[col_axis] // n

        def partial(block):
            return jnp.einsum(eq, x, jax.lax.dynamic_slice_in_dim(y, block * cols, cols, col_axis), precision=prec)

        # The accumulator for block t visits devices t+1, t+2, ..., t and ends at device t.
        acc = partial((idx + n - 1) % n)
        for step in range(1, n):
            acc = jax.lax.ppermute(acc, axis, to_right) + partial((idx + n - 1 - step) % n)
        return acc

    return body
