"""A user's own function as a measured program (``op=program``).

``op.target`` names it (``package.module:function``, importable from the folder shardlab
was started in, or ``path/to/file.py:function``); ``op.inputs`` gives its positional
arguments in the book's notation (``x[B_X, D]``: dims B and D, B split over mesh axis X) and
``op.dims`` their sizes. shardlab makes seeded inputs with those shardings, jits the function
inside the mesh (the abstract mesh is set while it traces, so ``jax.shard_map`` and sharding
constraints in it find the mesh), and measures it like any other point: compile, run, time, trace, HLO. There is
no reference answer, so the check is that it runs and every output is finite.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import math
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding

from analysis.book.notation import parse, to_partition_spec
from runner.config.op_spec import ProgramOp
from runner.errors import ConfigError
from runner.worker.programs.base import Program


def load_target(target: str):
    """The function ``target`` names, or ConfigError saying what is missing."""
    where, _, name = target.rpartition(":")
    if where.endswith(".py") or "/" in where:
        path = Path(where).expanduser().resolve()
        spec = importlib.util.spec_from_file_location(f"shardlab_user_{path.stem}", path)
        if spec is None or not path.is_file():
            raise ConfigError(f"op.target={target}: no file {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        if os.getcwd() not in sys.path:  # as `python -m` would: the folder the user is in
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise ConfigError(f"op.target={target}: cannot import {where} ({exc})") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(f"op.target={target}: {where} has no function {name}")
    return fn


def outputs(out):
    """A user function's result as what the runner waits on and checks: one array as it is,
    any other pytree (dicts, lists, named tuples, dataclasses, registered or not, nested) as
    the tuple of its array leaves in flattening order. Leaves that are not numbers (a
    dataclass's name string, None) are dropped: jit cannot return them."""
    if isinstance(out, jax.Array | np.ndarray):
        return out
    leaves: list = []

    def walk(x):
        for leaf in jax.tree.leaves(x):  # registered pytrees (flax structs too) flatten as jax does
            if dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
                for f in dataclasses.fields(leaf):  # unregistered: jax sees it as one opaque leaf
                    walk(getattr(leaf, f.name))
            elif isinstance(leaf, jax.Array | np.ndarray | np.number | int | float | complex):
                leaves.append(leaf)

    walk(out)
    return tuple(leaves)


def build(op: ProgramOp, mesh: jax.sharding.Mesh, dtype: str) -> Program:
    """The user's function ``op.target`` on seeded, sharded inputs (see the module)."""
    fn = load_target(op.target)
    # Auto axes, as most users' code is written for (XLA picks the shardings in between);
    # shardlab's own programs use the Explicit axes jax.make_mesh gives
    mesh = Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(mesh.axis_names))
    np_dtype = jnp.dtype(dtype)
    arrays = [parse(text) for text in op.inputs]
    rng = np.random.default_rng(0)
    hosts = []
    for arr in arrays:
        shape = tuple(op.dims[d.name] for d in arr.dims)
        hosts.append((rng.standard_normal(shape) / math.sqrt(max(shape[-1] if shape else 1, 1))).astype(np_dtype))

    def run(*args):
        # the mesh as context while tracing: shard_map and sharding constraints in the
        # user's code find it without being handed it (jax.set_mesh is refused inside jit)
        with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
            return outputs(fn(*args))

    def make_input():
        return tuple(jax.device_put(h, NamedSharding(mesh, to_partition_spec(a))) for h, a in zip(hosts, arrays))

    return Program(
        f"{op.target}({', '.join(op.inputs)})",
        jax.jit(run),
        make_input,
        None,
        None,
        extra={
            "target": op.target,
            "inputs": list(op.inputs),
            "dims": dict(op.dims),
            "size_bytes": int(sum(h.nbytes for h in hosts)),
        },
    )
