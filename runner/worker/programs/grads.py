"""The backward pass of a collective: ``jax.grad`` through an AllGather or a ReduceScatter.

The book says the transpose of an AllGather is a ReduceScatter and vice versa, so the
backward pass of one costs what the forward pass of the other does. ``op.grad=true`` runs
``grad(sum(collective(x) * w))`` instead of the collective; the compiled HLO then shows
which collective JAX and XLA chose for the backward pass, and the timing what it cost.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from runner.worker.programs.base import Program, small_ints

GRAD_OPS = ("all_gather", "reduce_scatter")


def build(op: str, axes: list[str], mesh: jax.sharding.Mesh, size_bytes: int, dtype: str) -> Program:
    """``grad`` of ``op`` over ``axes``; V (``size_bytes``) is the forward pass's V."""
    np_dtype = jnp.dtype(dtype)
    elems = size_bytes // np_dtype.itemsize
    p = int(np.prod([mesh.shape[a] for a in axes]))
    ax, sub = tuple(axes), "".join(axes)
    w = small_ints(elems, np_dtype)  # the cotangent: d/dx of sum(y * w) sends w back through the collective

    if op == "all_gather":
        fwd = jax.shard_map(
            lambda x: jax.lax.all_gather(x, ax, tiled=True), mesh=mesh, in_specs=P(ax), out_specs=P(), check_vma=False
        )
        host = np.ones(elems, np_dtype)  # x: V bytes gathered from V/p per device
        want = w  # every element of x lands once in y, where it meets w
        expr = f"grad of AllGather_{sub}(A[I_{sub}]) -> A[I]"
    elif op == "reduce_scatter":
        fwd = jax.shard_map(
            lambda x: jax.lax.psum_scatter(x, ax, scatter_dimension=0, tiled=True),
            mesh=mesh,
            in_specs=P(ax),
            out_specs=P(ax),
            check_vma=False,
        )
        host = np.ones(elems * p, np_dtype)  # each device's V bytes of partial sums
        want = np.tile(w, p)  # every device's partial sum of element i meets w[i]
        expr = f"grad of ReduceScatter_{{{sub},I}}(A[I]{{U_{sub}}}) -> A[I_{sub}]"
    else:
        raise ValueError(f"no grad program for {op!r}; allowed: {', '.join(GRAD_OPS)}")
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
