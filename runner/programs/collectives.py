"""The sharded JAX programs that shardlab measures, one per collective.

Each is a ``jax.shard_map`` around one ``jax.lax`` collective, so the compiled HLO holds
exactly that collective (XLA lowers them to ``all-gather``, ``reduce-scatter``,
``all-reduce`` and ``all-to-all``). Inputs are small integers so that every sum is exact in
every dtype and the result can be checked against NumPy bit for bit.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from runner.meshes import global_array
from runner.programs.base import Program, small_ints
from runner.spec import sum_inputs


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

    def placed(host: np.ndarray, spec) -> Callable[[], jax.Array]:
        # Not device_put: when the mesh spans processes each fills only its own devices.
        return lambda: global_array(host, NamedSharding(mesh, spec))

    if op == "all_gather":
        host = small_ints(elems, np_dtype)
        fn = sharded(lambda x: jax.lax.all_gather(x, ax, tiled=True), P(ax), P())
        return Program(f"AllGather_{sub}(A[I_{sub}]) -> A[I]", fn, placed(host, P(ax)), lambda: host, size_bytes)
    if op in ("reduce_scatter", "all_reduce"):
        # Device k of the group holds its own V bytes of partial sums: block k of the input,
        # small integers whose sum the dtype holds exactly (see runner.spec.sum_inputs).
        period, offset = sum_inputs(dtype, p)
        base = small_ints(elems, np.int64, period)
        k = np.arange(p, dtype=np.int64)[:, None] if offset else np.zeros((p, 1), np.int64)
        blocks = (base[None, :] + k).astype(np_dtype)
        total = (base * p + int(k.sum())).astype(np_dtype)  # sum over devices of (base + k)
        if op == "reduce_scatter":
            fn = sharded(lambda x: jax.lax.psum_scatter(x, ax, scatter_dimension=0, tiled=True), P(ax), P(ax))
            expr = f"ReduceScatter_{{{sub},I}}(A[I]{{U_{sub}}}) -> A[I_{sub}]"
        else:
            fn = sharded(lambda x: jax.lax.psum(x, ax), P(ax), P())
            expr = f"AllReduce_{sub}(A[I]{{U_{sub}}}) -> A[I]"
        return Program(expr, fn, placed(blocks.reshape(-1), P(ax)), lambda: total, size_bytes)
    if op == "all_to_all":
        # A[I_X, J] with I = p rows: each device holds one contiguous row and ends with one
        # contiguous column block of every row, A[I, J_X].
        host = small_ints(elems, np_dtype).reshape(p, elems // p)
        fn = sharded(lambda x: jax.lax.all_to_all(x, ax, 1, 0, tiled=True), P(ax, None), P(None, ax))
        return Program(f"AllToAll_{{{sub},J}}(A[I_{sub}, J]) -> A[I, J_{sub}]", fn, placed(host, P(ax, None)),
                       lambda: host, size_bytes)
    raise ValueError(f"unknown op {op!r}")
