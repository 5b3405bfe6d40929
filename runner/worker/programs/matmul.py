"""Sharded matmul programs, one per strategy, from a :class:`runner.config.matmul_plan.Plan`.

``auto`` is plain ``jax.jit`` with the inputs' shardings and the output sharding on the
einsum itself (jax 0.10's explicit mesh axes require ``out_sharding=`` when a contracting
dim is sharded): XLA picks the collectives. The other strategies are ``jax.shard_map``
programs that state every collective: gather then multiply, multiply then AllReduce or
ReduceScatter, or a ``ppermute`` ring that multiplies one block while the next is in flight
(collective matmul). Inputs are small integers, so float32 results are exact and every
strategy can be checked against NumPy.

Every product runs at ``precision=HIGHEST`` (the reference is NumPy in float64): a float32
matmul is then float32 arithmetic on TPU and GPU too, not bfloat16 passes or TF32, so a check
there fails only for a wrong result, and a float32 point times the float32 product it names.
On bfloat16 inputs HIGHEST changes nothing.
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
from runner.worker.programs.base import Program

HIGHEST = jax.lax.Precision.HIGHEST


def _host(shape: tuple[int, ...], period: int, dtype) -> np.ndarray:
    # Values 0..period-1 tiled: small integers keep float32 sums exact up to 2^24.
    n = math.prod(shape)
    return np.tile(np.arange(period, dtype=np.float32), -(-n // period))[:n].reshape(shape).astype(dtype)


def build(op: dict, mesh: jax.sharding.Mesh, dtype: str) -> Program:
    """The program for the matmul op spec ``op`` (expr, dims, strategy) on ``mesh``."""
    mm = parse_matmul(op["expr"])
    dims = op["dims"]
    steps = plan(mm, op["strategy"], dict(mesh.shape))
    np_dtype = jnp.dtype(dtype)
    letters = {
        n: string.ascii_lowercase[i]
        for i, n in enumerate(dict.fromkeys(d.name for arr in (mm.lhs, mm.rhs, mm.out) for d in arr.dims))
    }
    sub = lambda arr: "".join(letters[d.name] for d in arr.dims)  # noqa: E731
    eq = f"{sub(mm.lhs)},{sub(mm.rhs)}->{sub(mm.out)}"
    a = _host(tuple(dims[d.name] for d in mm.lhs.dims), 7, np_dtype)
    b = _host(tuple(dims[d.name] for d in mm.rhs.dims), 5, np_dtype)
    specs = [to_partition_spec(x) for x in (mm.lhs, mm.rhs, mm.out)]
    out_sharding = NamedSharding(mesh, specs[2])

    if steps.strategy == "auto":
        fn = jax.jit(lambda x, y: jnp.einsum(eq, x, y, out_sharding=out_sharding, precision=HIGHEST))
    else:
        body = _ring_body(mm, steps, eq, mesh) if steps.ring else _steps_body(mm, steps, eq, mesh)
        # check_vma=False: replication after the gathers and sums is by construction.
        fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=tuple(specs[:2]), out_specs=specs[2], check_vma=False))

    def make_input():
        return (jax.device_put(a, NamedSharding(mesh, specs[0])), jax.device_put(b, NamedSharding(mesh, specs[1])))

    def reference():
        return np.einsum(eq, a.astype(np.float64), b.astype(np.float64)).astype(np_dtype)

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


def _steps_body(mm: Matmul, p: Plan, eq: str, mesh):
    """Gather / slice the inputs, multiply locally, sum, then reach the output sharding."""

    def body(x, y):
        for side, arr in (("lhs", mm.lhs), ("rhs", mm.rhs)):
            v = x if side == "lhs" else y
            for d, axes in p.gather[side].items():
                v = jax.lax.all_gather(v, axes, axis=_axis_of(arr, d), tiled=True)
            for d, axes in p.slice[side].items():
                v = _slice(v, axes, _axis_of(arr, d), mesh)
            x, y = (v, y) if side == "lhs" else (x, v)
        z = jnp.einsum(eq, x, y, precision=HIGHEST)
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


def _ring_body(mm: Matmul, p: Plan, eq: str, mesh):
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
                product = jnp.einsum(eq, block, y, precision=HIGHEST)
                out = jax.lax.dynamic_update_slice_in_dim(out, product, src * rows, row_axis)
                block = nxt
            return out

        return body

    col_axis = _axis_of(mm.rhs, dim)

    def body(x, y):
        idx = jax.lax.axis_index(axis)
        cols = y.shape[col_axis] // n

        def partial(block):
            return jnp.einsum(eq, x, jax.lax.dynamic_slice_in_dim(y, block * cols, cols, col_axis), precision=HIGHEST)

        # The accumulator for block t visits devices t+1, t+2, ..., t and ends at device t.
        acc = partial((idx + n - 1) % n)
        for step in range(1, n):
            acc = jax.lax.ppermute(acc, axis, to_right) + partial((idx + n - 1 - step) % n)
        return acc

    return body
