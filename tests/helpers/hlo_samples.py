"""HLO text for the parser and CLI tests, and helpers to read it.

The modules live in ``tests/data/hlo/`` (one ``<name>.hlo.txt`` each, read verbatim). The
``CPU_*`` ones are real ``compile().as_text()`` output of jax 0.10.2 on 8 CPU devices (a 4x2
mesh, axes X,Y; device (x, y) has logical id 2*x + y); the others are written by hand in the
syntax XLA prints for GPU/TPU. The tests work their expected values out in comments.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from analysis.hlo import Collective, parse_collectives

REPO = Path(__file__).resolve().parents[2]
HLO_DIR = REPO / "tests" / "data" / "hlo"
MESH_4x2 = np.arange(8).reshape(4, 2)  # logical ids laid out as the X=4, Y=2 mesh
X_GROUPS = ((0, 2, 4, 6), (1, 3, 5, 7))  # fix y, vary x
Y_GROUPS = ((0, 1), (2, 3), (4, 5), (6, 7))  # fix x, vary y


def hlo_path(name: str) -> Path:
    return HLO_DIR / f"{name}.hlo.txt"


def _read(name: str) -> str:
    return hlo_path(name).read_text()


def one_op(op: str, attrs: str, dtype: str = "f32[8]{0}") -> str:
    """A minimal entry computation: parameter p feeding one instruction `op(p), attrs`."""
    return f"ENTRY e {{\n  p = {dtype} parameter(0)\n  ROOT c = {dtype} {op}(p), {attrs}\n}}\n"


def only(text: str, **kw) -> Collective:
    found = parse_collectives(text, **kw)
    assert len(found) == 1, found
    return found[0]


# ----------------------------------------------------------------------------- real CPU text

# shard_map(lambda a: all_gather(a, ('X','Y'), tiled=True)), in P(('X','Y')), on f32[8192].
CPU_ALL_GATHER = _read("cpu_all_gather")
# shard_map(lambda a: psum_scatter(a, 'X', tiled=True)), in P(), on f32[8192].
CPU_REDUCE_SCATTER = _read("cpu_reduce_scatter")
# shard_map(lambda a: all_to_all(a.reshape(4,-1), 'X', 0, 0, tiled=True)), in P('Y'), on f32[8192].
CPU_ALL_TO_ALL = _read("cpu_all_to_all")
# shard_map(lambda a: ppermute(a, 'X', [(i, (i+1) % 4) ...])), in P(('X','Y')), on f32[8192].
CPU_PPERMUTE = _read("cpu_ppermute")
# shard_map(lambda x: fori_loop(0, 3, lambda i, c: psum(c, 'Y') * 0.5, x)), in P('X'), on f32[64].
CPU_WHILE_PSUM = _read("cpu_while_psum")
# jit(a @ b) with a: f32[16,32] P(None,'Y'), b: f32[32,8] P('Y',None), out P(): GSPMD, Auto axes.
CPU_GSPMD_MESH_GROUPS = _read("cpu_gspmd_mesh_groups")

# ----------------------------------------------------------------------------- hand-made text

# Older printers put operand shapes inline and names behind '%'. The header says 4 partitions.
OLD_STYLE = _read("old_style")
# Newer printers drop '%' and may omit the computation signature.
NEW_STYLE = _read("new_style")
# TPU style: tiled layouts with memory spaces, iota groups, a collective inside a fusion's
# computation, frontend_attributes, and backend_config JSON with braces and escapes in strings.
TPU_MODULE = _read("tpu_module")
# GPU style async pairs. Written as XLA's GPU pipeline prints them after optimisation.
GPU_ASYNC = _read("gpu_async")
# Sugared async reduce-scatter with two operands: start = ((operands), (results)).
SUGARED_VARIADIC = _read("sugared_variadic")
# Hand-written style: instructions split over lines, shape-less ops, execution threads.
MULTILINE = _read("multiline")
# Comments inside tuples, nested quotes/braces in metadata, frontend_attributes, a while body.
# Operand shapes come from the computation signature only where no instruction defines them.
COMMENTS_AND_LOOPS = _read("comments_and_loops")

# Every shape a TPU runs a collective in (XLA's TPU printing: tiled layouts, backend_config):
# an async all-gather pair; the all-reduce-scatter fusion of seed 003 (an all-reduce sliced by
# a dynamic-slice inside a kCustom fusion); an all-to-all wrapped by async-start/async-done;
# a psum (an all-reduce named by JAX) in a while body. 4 partitions.
TPU_COLLECTIVE_SHAPES = _read("tpu_collective_shapes")
# A SparseCore offload: call-start/call-done running an all-gather on the "sparsecore" thread,
# then an all-reduce fusion (XProf's "all-reduce fusion": the all-reduce and a multiply).
TPU_SPARSECORE = _read("tpu_sparsecore")
# An all-reduce XLA TPU compiled as its all-reduce-scatter fusion (an all-reduce sliced by a
# dynamic-slice: a reduce-scatter's work) and an async all-gather; written by hand.
TPU_AR_SPLIT = _read("tpu_ar_split")
# PyTorch/XLA SPMD style: a header without num_partitions or replica_count, and an all-reduce
# with replica_groups={} (every device, one group, of a size the module does not state).
PYTORCH_XLA_SPMD = _read("pytorch_xla_spmd")

# ----------------------------------------------------------------------------- compiled here

_COMPILE_SCRIPT = textwrap.dedent("""
    import json, os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax, jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((4, 2), ("X", "Y"))
    ring = [(i, (i + 1) % 4) for i in range(4)]
    programs = {
        "all-gather": (lambda a: jax.lax.all_gather(a, "X", tiled=True), P(("X", "Y")), P("Y")),
        "all-reduce": (lambda a: jax.lax.psum(a, "Y"), P("X"), P("X")),
        "reduce-scatter": (lambda a: jax.lax.psum_scatter(a, "X", tiled=True), P(), P("X")),
        "all-to-all": (
            lambda a: jax.lax.all_to_all(a.reshape(4, -1), "X", 0, 0, tiled=True).reshape(-1),
            P("Y"),
            P("Y"),
        ),
        "collective-permute": (lambda a: jax.lax.ppermute(a, "X", ring), P(("X", "Y")), P(("X", "Y"))),
    }
    x = jnp.ones((512,), jnp.float32)
    out = {}
    for kind, (f, spec_in, spec_out) in programs.items():
        g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=spec_in, out_specs=spec_out, check_vma=False))
        out[kind] = g.lower(jax.device_put(x, NamedSharding(mesh, spec_in))).compile().as_text()
    print(json.dumps({"texts": out, "device_ids": mesh.device_ids.tolist(), "axes": list(mesh.axis_names)}))
""")


def compile_cpu_collectives() -> dict:
    """Compile five shard_map collectives on f32[512] over a 4x2 CPU mesh (X, Y) in a fresh JAX
    process: ``{"texts": {kind: compiled HLO text}, "device_ids": ..., "axes": ["X", "Y"]}``.

    ``$SHARDLAB_HLO_SAMPLES_CACHE`` names a file that keeps the answer between pytest runs: the
    mutation check (tests/bench/mutation.py) runs the HLO tests once per mutant, and the script
    uses nothing of shardlab, so no mutant can change what it compiles."""
    cache = os.environ.get("SHARDLAB_HLO_SAMPLES_CACHE")
    if cache and os.path.exists(cache):
        with open(cache) as f:
            return json.load(f)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-c", _COMPILE_SCRIPT], capture_output=True, text=True, env=env, timeout=300, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if cache:
        with open(cache, "w") as f:
            json.dump(out, f)
    return out
