"""The JAX programs shardlab measures, behind one :func:`build`.

* :mod:`.collectives` - one ``shard_map`` around one ``jax.lax`` collective;
* :mod:`.grads` - ``jax.grad`` through an AllGather or a ReduceScatter (the backward pass);
* :mod:`.matmul` - sharded matmuls in the book's notation, one program per strategy;
* :mod:`.block` - a transformer block's training step, FSDP and/or tensor parallel;
* :mod:`.user` - a user's own function, its inputs written in the book's notation.

Each returns a :class:`~runner.worker.programs.base.Program`. Importing this package imports JAX:
only the worker process does (after :func:`runner.config.jaxenv.start_jax`).

May import: jax, numpy, :mod:`runner.worker.meshes`, :mod:`runner.config.matmul_plan`, :mod:`analysis.book`.
"""

from __future__ import annotations

from jax.sharding import Mesh

from runner.worker.programs import block, collectives, matmul, user
from runner.worker.programs.base import Program


def build(spec: dict, mesh: Mesh) -> Program:
    """The program for the checked spec (:func:`runner.config.spec.build_spec`) on ``mesh``."""
    op = spec["op"]
    if op["name"] == "matmul":
        return matmul.build(op, mesh, spec["dtype"], spec["precision"])
    if op["name"] == "transformer_block":
        return block.build(op, mesh, spec["dtype"], spec["precision"])
    if op["name"] == "program":
        return user.build(op, mesh, spec["dtype"])
    return collectives.build(op["name"], op["axes"], mesh, op["size_bytes"], spec["dtype"], grad=bool(op.get("grad")))


__all__ = ["Program", "build"]
