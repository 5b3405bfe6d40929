"""The JAX programs shardlab measures, behind one :func:`build`.

* :mod:`.collectives` - one ``shard_map`` around one ``jax.lax`` collective;
* :mod:`.grads` - ``jax.grad`` through an AllGather or a ReduceScatter (the backward pass);
* :mod:`.matmul` - sharded matmuls in the book's notation, one program per strategy;
* :mod:`.block` - a transformer block's training step, FSDP and/or tensor parallel;
* :mod:`.user` - a user's own function, its inputs written in the book's notation.

Each returns a :class:`~runner.worker.programs.base.Program`. Importing this package imports JAX:
only the worker process does (after :func:`runner.config.jaxenv.start_jax`).

May import: jax, numpy, :mod:`runner.worker.meshes`, :mod:`runner.config.matmul_plan` and
:mod:`~runner.config.op_spec`, :mod:`analysis.book`.
"""

from __future__ import annotations

from jax.sharding import Mesh

from runner.config.op_spec import BlockOp, CollectiveOp, MatmulOp, ProgramOp
from runner.worker.programs import block, collectives, matmul, user
from runner.worker.programs.base import Program

# The program of each kind of op (runner.config.op_spec): f(op, mesh, spec).
BUILDERS = {
    CollectiveOp: lambda op, mesh, spec: collectives.build(
        op.name, list(op.axes), mesh, op.size_bytes, spec["dtype"], grad=op.grad
    ),
    MatmulOp: lambda op, mesh, spec: matmul.build(op, mesh, spec["dtype"], spec["precision"]),
    BlockOp: lambda op, mesh, spec: block.build(op, mesh, spec["dtype"], spec["precision"]),
    ProgramOp: lambda op, mesh, spec: user.build(op, mesh, spec["dtype"]),
}


def build(spec: dict, mesh: Mesh) -> Program:
    """The program for the checked spec (:func:`runner.config.spec.build_spec`) on ``mesh``."""
    return BUILDERS[type(spec["op"])](spec["op"], mesh, spec)


__all__ = ["BUILDERS", "Program", "build"]
