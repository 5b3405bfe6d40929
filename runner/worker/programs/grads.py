"""The backward pass of a collective: ``jax.grad`` through an AllGather or a ReduceScatter.

The book says the transpose of an AllGather is a ReduceScatter and vice versa, so the
backward pass of one costs what the forward pass of the other does. ``op.grad=true`` runs
``grad(sum(collective(x) * w))`` instead of the collective; the compiled HLO then shows
which collective JAX and XLA chose for the backward pass, and the timing what it cost.
Each builder is the ``grad`` of its row in :data:`runner.worker.programs.collectives.PROGRAMS`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from runner.worker.programs.base import Program, small_ints


def all_gather(axes: list[str], mesh: jax.sharding.Mesh, size_bytes: int, dtype: str) -> Program:
    """``grad`` of an AllGather over ``axes``; V (``size_bytes``) is the forward pass's V."""
    ax, sub = tuple(axes), "".join(axes)
    elems = size_bytes // jnp.dtype(dtype).itemsize
    fwd = jax.shard_map(
        lambda x: jax.lax.all_gather(x, ax, tiled=True), mesh=mesh, in_specs=P(ax), out_specs=P(), check_vma=False
    )
    host = np.ones(elems, jnp.dtype(dtype))  # x: V bytes gathered from V/p per device
    w = small_ints(elems, jnp.dtype(dtype))  # the cotangent: d/dx of sum(y * w) sends w back
    want = w  # every element of x lands once in y, where it meets w
    return _grad(fwd, host, w, want, f"grad of AllGather_{sub}(A[I_{sub}]) -> A[I]", mesh, ax, size_bytes)


def reduce_scatter(axes: list[str], mesh: jax.sharding.Mesh, size_bytes: int, dtype: str) -> Program:
    """``grad`` of a ReduceScatter over ``axes``; V (``size_bytes``) is the forward pass's V."""
    ax, sub = tuple(axes), "".join(axes)
    elems = size_bytes // jnp.dtype(dtype).itemsize
    p = int(np.prod([mesh.shape[a] for a in axes]))
    fwd = jax.shard_map(
        lambda x: jax.lax.psum_scatter(x, ax, scatter_dimension=0, tiled=True),
        mesh=mesh,
        in_specs=P(ax),
        out_specs=P(ax),
        check_vma=False,
    )
    host = np.ones(elems * p, jnp.dtype(dtype))  # each device's V bytes of partial sums
    w = small_ints(elems, jnp.dtype(dtype))  # the cotangent: d/dx of sum(y * w) sends w back
    want = np.tile(w, p)  # every device's partial sum of element i meets w[i]
    expr = f"grad of ReduceScatter_{{{sub},I}}(A[I]{{U_{sub}}}) -> A[I_{sub}]"
    return _grad(fwd, host, w, want, expr, mesh, ax, size_bytes)


def _grad(fwd, host: np.ndarray, w: np.ndarray, want: np.ndarray, expr: str, mesh, ax, size_bytes: int) -> Program:
    """The program ``x -> grad(sum(fwd(x) * w))`` on ``host`` sharded over ``ax``."""
    w_dev = jnp.asarray(w)
    fn = jax.jit(jax.grad(lambda x: (fwd(x) * w_dev).sum()))
    return Program(
        expr,
        fn,
        lambda: jax.device_put(host, NamedSharding(mesh, P(ax))),
        lambda: want,
        size_bytes,
        extra={"grad": True},
    )
