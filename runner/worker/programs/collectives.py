"""The sharded JAX programs that shardlab measures, one per collective, in one table.

Each is a ``jax.shard_map`` around one ``jax.lax`` collective, so the compiled HLO holds
exactly that collective (XLA lowers them to ``all-gather``, ``reduce-scatter``,
``all-reduce`` and ``all-to-all``). Inputs are small integers so that every sum is exact in
every dtype and the result can be checked against NumPy bit for bit. Inputs and answers
are :class:`~runner.worker.programs.base.LazyArray`: each process builds only its own shards.

:data:`PROGRAMS` is the runner's row of each collective in the book's table
(:data:`analysis.book.collectives.KINDS`): its program, and its ``jax.grad`` program where the
book's row offers ``op.grad`` (:mod:`runner.worker.programs.grads`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from runner.config.op_spec import sum_inputs
from runner.worker.meshes import global_array
from runner.worker.programs import grads
from runner.worker.programs.base import LazyArray, Program, cyclic

# (axes, mesh, size_bytes = V, dtype) -> the program
Builder = Callable[[list[str], jax.sharding.Mesh, int, str], Program]


@dataclass(frozen=True)
class CollectivePrograms:
    """One collective's programs: the collective itself, and ``jax.grad`` through it."""

    step: Builder
    grad: Builder | None = None


def _group(axes, mesh, size_bytes: int, dtype: str):
    """(NumPy dtype, elements of V, devices in the group, the axes as a tuple)."""
    np_dtype = jnp.dtype(dtype)
    return np_dtype, size_bytes // np_dtype.itemsize, int(np.prod([mesh.shape[a] for a in axes])), tuple(axes)


def _sharded(mesh, body, in_spec, out_spec):
    # check_vma=False: the outputs of these collectives are replicated over `axes` by
    # construction, which JAX's varying-axes inference cannot always prove.
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=in_spec, out_specs=out_spec, check_vma=False))


def _placed(mesh, host: LazyArray, spec) -> Callable[[], jax.Array]:
    # Not device_put: when the mesh spans processes each fills only its own devices.
    return lambda: global_array(host, NamedSharding(mesh, spec))


def all_gather(axes, mesh, size_bytes: int, dtype: str) -> Program:
    """AllGather over ``axes``: each device's V/p block of a small-integer array -> all of V."""
    np_dtype, elems, _, ax = _group(axes, mesh, size_bytes, dtype)
    host = LazyArray((elems,), np_dtype, lambda i: i % 7, lambda a, b: cyclic(a, b, 7, np_dtype))
    fn = _sharded(mesh, lambda x: jax.lax.all_gather(x, ax, tiled=True), P(ax), P())
    sub = "".join(ax)
    return Program(f"AllGather_{sub}(A[I_{sub}]) -> A[I]", fn, _placed(mesh, host, P(ax)), lambda: host, size_bytes)


def _partial_sums(elems: int, p: int, np_dtype, dtype: str) -> tuple[LazyArray, LazyArray]:
    """(the group's inputs, their sum): device k of the group holds its own V bytes of partial
    sums, block k of the input, base + k with base cycling 0..period-1: small integers whose
    sum the dtype holds exactly (see runner.config.op_spec.sum_inputs)."""
    period, offset = sum_inputs(dtype, p)

    def block_runs(start: int, stop: int) -> np.ndarray:  # the same values, block by block
        parts = []
        for k in range(start // elems, (stop - 1) // elems + 1):
            lo, hi = max(start, k * elems) - k * elems, min(stop, (k + 1) * elems) - k * elems
            parts.append(cyclic(lo, hi, period, np_dtype, offset=k if offset else 0))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    blocks = LazyArray((p * elems,), np_dtype, lambda i: i % elems % period + (i // elems if offset else 0), block_runs)
    extra = p * (p - 1) // 2 if offset else 0
    # sum over k of (base + k)
    total = LazyArray(
        (elems,), np_dtype, lambda i: i % period * p + extra, lambda a, b: cyclic(a, b, period, np_dtype, p, extra)
    )
    return blocks, total


def reduce_scatter(axes, mesh, size_bytes: int, dtype: str) -> Program:
    """ReduceScatter over ``axes``: each device's V of partial sums -> its V/p block of the sum."""
    np_dtype, elems, p, ax = _group(axes, mesh, size_bytes, dtype)
    blocks, total = _partial_sums(elems, p, np_dtype, dtype)
    fn = _sharded(mesh, lambda x: jax.lax.psum_scatter(x, ax, scatter_dimension=0, tiled=True), P(ax), P(ax))
    sub = "".join(ax)
    expr = f"ReduceScatter_{{{sub},I}}(A[I]{{U_{sub}}}) -> A[I_{sub}]"
    return Program(expr, fn, _placed(mesh, blocks, P(ax)), lambda: total, size_bytes)


def all_reduce(axes, mesh, size_bytes: int, dtype: str) -> Program:
    """AllReduce over ``axes``: each device's V of partial sums -> the whole sum on every device."""
    np_dtype, elems, p, ax = _group(axes, mesh, size_bytes, dtype)
    blocks, total = _partial_sums(elems, p, np_dtype, dtype)
    fn = _sharded(mesh, lambda x: jax.lax.psum(x, ax), P(ax), P())
    sub = "".join(ax)
    expr = f"AllReduce_{sub}(A[I]{{U_{sub}}}) -> A[I]"
    return Program(expr, fn, _placed(mesh, blocks, P(ax)), lambda: total, size_bytes)


def all_to_all(axes, mesh, size_bytes: int, dtype: str) -> Program:
    """AllToAll over ``axes``: A[I_X, J] with I = p rows: each device holds one contiguous row
    and ends with one contiguous column block of every row, A[I, J_X]."""
    np_dtype, elems, p, ax = _group(axes, mesh, size_bytes, dtype)
    host = LazyArray((p, elems // p), np_dtype, lambda i: i % 7, lambda a, b: cyclic(a, b, 7, np_dtype))
    fn = _sharded(mesh, lambda x: jax.lax.all_to_all(x, ax, 1, 0, tiled=True), P(ax, None), P(None, ax))
    sub = "".join(ax)
    expr = f"AllToAll_{{{sub},J}}(A[I_{sub}, J]) -> A[I, J_{sub}]"
    return Program(expr, fn, _placed(mesh, host, P(ax, None)), lambda: host, size_bytes)


# One row per collective of analysis.book.collectives.KINDS (tests/analysis/book/test_collectives.py
# checks they agree: a builder for every kind, a grad builder exactly where the book offers it).
PROGRAMS: dict[str, CollectivePrograms] = {
    "all_gather": CollectivePrograms(all_gather, grad=grads.all_gather),
    "reduce_scatter": CollectivePrograms(reduce_scatter, grad=grads.reduce_scatter),
    "all_reduce": CollectivePrograms(all_reduce),
    "all_to_all": CollectivePrograms(all_to_all),
}


def build(op: str, axes: list[str], mesh: jax.sharding.Mesh, size_bytes: int, dtype: str, grad: bool = False):
    """The program for ``op`` over mesh ``axes`` moving ``size_bytes`` (V) of ``dtype``; with
    ``grad``, ``jax.grad`` through it (the backward pass)."""
    row = PROGRAMS.get(op)
    if row is None:
        raise ValueError(f"unknown op {op!r}")
    if grad and row.grad is None:
        allowed = ", ".join(name for name, r in PROGRAMS.items() if r.grad)
        raise ValueError(f"no grad program for {op!r}; allowed: {allowed}")
    return (row.grad if grad else row.step)(axes, mesh, size_bytes, dtype)
