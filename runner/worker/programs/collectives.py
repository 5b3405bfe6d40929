"""The sharded JAX programs that shardlab measures, one per collective.

Each is a ``jax.shard_map`` around one ``jax.lax`` collective, so the compiled HLO holds
exactly that collective (XLA lowers them to ``all-gather``, ``reduce-scatter``,
``all-reduce`` and ``all-to-all``). Inputs are small integers so that every sum is exact in
every dtype and the result can be checked against NumPy bit for bit. Inputs and answers
are :class:`~runner.worker.programs.base.LazyArray`: each process builds only its own shards.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from runner.config.spec import sum_inputs
from runner.worker.meshes import global_array
from runner.worker.programs.base import LazyArray, Program


def build(op: str, axes: list[str], mesh: jax.sharding.Mesh, size_bytes: int, dtype: str) -> Program:
    """The program for ``op`` over mesh ``axes`` moving ``size_bytes`` (V) of ``dtype``."""
    np_dtype = jnp.dtype(dtype)
    elems = size_bytes // np_dtype.itemsize
    p = int(np.prod([mesh.shape[a] for a in axes]))
    ax = tuple(axes)
    sub = "".join(axes)

    def sharded(body, in_spec, out_spec):
        # check_vma=False: the outputs of these collectives are replicated over `axes` by
        # construction, which JAX's varying-axes inference cannot always prove.
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=in_spec, out_specs=out_spec, check_vma=False))

    def placed(host: LazyArray, spec) -> Callable[[], jax.Array]:
        # Not device_put: when the mesh spans processes each fills only its own devices.
        return lambda: global_array(host, NamedSharding(mesh, spec))

    if op == "all_gather":
        host = LazyArray((elems,), np_dtype, lambda i: i % 7)
        fn = sharded(lambda x: jax.lax.all_gather(x, ax, tiled=True), P(ax), P())
        return Program(f"AllGather_{sub}(A[I_{sub}]) -> A[I]", fn, placed(host, P(ax)), lambda: host, size_bytes)
    if op in ("reduce_scatter", "all_reduce"):
        # Device k of the group holds its own V bytes of partial sums: block k of the input,
        # base + k with base cycling 0..period-1: small integers whose sum the dtype holds
        # exactly (see runner.config.spec.sum_inputs).
        period, offset = sum_inputs(dtype, p)
        blocks = LazyArray((p * elems,), np_dtype, lambda i: i % elems % period + (i // elems if offset else 0))
        extra = p * (p - 1) // 2 if offset else 0
        total = LazyArray((elems,), np_dtype, lambda i: i % period * p + extra)  # sum over k of (base + k)
        if op == "reduce_scatter":
            fn = sharded(lambda x: jax.lax.psum_scatter(x, ax, scatter_dimension=0, tiled=True), P(ax), P(ax))
            expr = f"ReduceScatter_{{{sub},I}}(A[I]{{U_{sub}}}) -> A[I_{sub}]"
        else:
            fn = sharded(lambda x: jax.lax.psum(x, ax), P(ax), P())
            expr = f"AllReduce_{sub}(A[I]{{U_{sub}}}) -> A[I]"
        return Program(expr, fn, placed(blocks, P(ax)), lambda: total, size_bytes)
    if op == "all_to_all":
        # A[I_X, J] with I = p rows: each device holds one contiguous row and ends with one
        # contiguous column block of every row, A[I, J_X].
        host = LazyArray((p, elems // p), np_dtype, lambda i: i % 7)
        fn = sharded(lambda x: jax.lax.all_to_all(x, ax, 1, 0, tiled=True), P(ax, None), P(None, ax))
        return Program(
            f"AllToAll_{{{sub},J}}(A[I_{sub}, J]) -> A[I, J_{sub}]",
            fn,
            placed(host, P(ax, None)),
            lambda: host,
            size_bytes,
        )
    raise ValueError(f"unknown op {op!r}")
