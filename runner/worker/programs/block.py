"""A transformer block's training step (forward and backward, no optimizer), sharded by
the book's recipes, so that shardlab measures what a real step's collectives cost.

The block is pre-norm-free and bias-free to keep the communication plain: multi-head
attention (weights ``Wq, Wk, Wv: [D, H, K]``, ``Wo: [H, K, D]``, K = D / H) then an MLP
(``Win: [D, F]``, GELU, ``Wout: [F, D]``), each added to the residual stream ``x: [B, S, D]``.
The loss is the mean square of the output; the step returns the loss and every weight's
gradient. ``op.sharding`` picks the recipe (``op.axes`` names the mesh axes it uses):

* ``fsdp`` over one axis (call it X): the batch is split over X (``x[B_X, S, D]``) and so
  is every weight, along D (``Win[D_X, F]``). Each layer first gathers its weights
  (AllGather_X), and the backward pass of that gather is a ReduceScatter_X of the weight
  gradients: the book's FSDP.
* ``tp`` over one axis (Y): heads and the MLP's hidden dim are split over Y
  (``Wq[D, H_Y, K]``, ``Win[D, F_Y]``, ``Wout[F_Y, D]``): each device computes its heads
  and its slice of F, and the output projections contract over a sharded dim, so each is an
  AllReduce_Y of a partial sum (the matmul's case 3); the backward pass has the matching
  AllReduce_Y of the activations' gradients (Megatron's f and g).
* ``fsdp_tp`` over two axes [X, Y]: both at once, weights ``Win[D_X, F_Y]``.

Written with ``jax.shard_map`` and explicit collectives so that the compiled step holds
exactly these recipes (``jax.grad`` derives the backward collectives); ``check_vma`` stays on
so that the gradients of replicated values are summed where they must be. The check runs
the same step unsharded on one device (one more execution, on the device: no host work
beyond reading the outputs) and compares every output: softmax and GELU are not exact in
integers, so the inputs are random and the check has a tolerance.

Every matmul of the step, forward and backward (``jax.grad`` keeps the precision in the
backward matmuls), runs at the config's ``precision``; the reference's always at
``highest``, so that it is float32 arithmetic wherever it runs. The tolerance follows: 1e-4
relative for float32 at ``highest``, or on a CPU (which computes float32 at every
precision); 2e-2, the bfloat16 step's, for float32 at ``default`` or ``high`` on an
accelerator, where a float32 matmul is one or three bfloat16 passes (TPU) or TF32 (GPU),
about 1e-3 relative per product, which a 1e-4 check would fail for reasons that are not
sharding. On 16-bit inputs the precision changes nothing (one pass either way).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from runner.config.op_spec import BlockOp
from runner.worker.programs.base import Program

WEIGHTS = ("wq", "wk", "wv", "wo", "win", "wout")
HIGHEST = jax.lax.Precision.HIGHEST  # the reference's (see the module docstring)


def roles(sharding: str, axes: list[str]) -> tuple[str | None, str | None]:
    """(the FSDP axis, the tensor-parallel axis) of ``op.sharding`` over ``op.axes``."""
    if sharding == "fsdp":
        return axes[0], None
    if sharding == "tp":
        return None, axes[0]
    return axes[0], axes[1]


def specs(fsdp: str | None, tp: str | None) -> dict[str, P]:
    """The PartitionSpec of the input and of each weight."""
    return {
        "x": P(fsdp, None, None),
        "wq": P(fsdp, tp, None),
        "wk": P(fsdp, tp, None),
        "wv": P(fsdp, tp, None),
        "wo": P(tp, None, fsdp),
        "win": P(fsdp, tp),
        "wout": P(tp, fsdp),
    }


def forward(x, w, gather, reduce_tp, precision):
    """The block on one device's shards, every matmul at ``precision``. ``gather(w, dim)``:
    AllGather a weight over the FSDP axis along ``dim`` (identity without FSDP);
    ``reduce_tp(y)``: AllReduce a partial sum over the tensor-parallel axis (identity without TP)."""

    def _einsum(eq, a, b):
        return jnp.einsum(eq, a, b, precision=precision)

    wq, wk, wv = (gather(w[k], 0) for k in ("wq", "wk", "wv"))
    wo, win, wout = gather(w["wo"], 2), gather(w["win"], 0), gather(w["wout"], 1)
    q, k, v = (_einsum("bsd,dhk->bshk", x, m) for m in (wq, wk, wv))
    scores = _einsum("bshk,bthk->bhst", q, k) / math.sqrt(q.shape[-1])
    attn = _einsum("bhst,bthk->bshk", jax.nn.softmax(scores, axis=-1), v)
    h = x + reduce_tp(_einsum("bshk,hkd->bsd", attn, wo))
    u = jax.nn.gelu(_einsum("bsd,df->bsf", h, win))
    return h + reduce_tp(_einsum("bsf,fd->bsd", u, wout))


def flops(dims: dict[str, int]) -> int:
    """FLOPs of one step, forward and backward (3x the forward's matmuls), all devices."""
    B, S, D, F = dims["B"], dims["S"], dims["D"], dims["F"]
    fwd = 2 * B * S * D * D * 4 + 2 * B * S * S * D * 2 + 2 * B * S * D * F * 2
    return 3 * fwd


def host_inputs(dims: dict[str, int], dtype) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Seeded inputs, scaled as a trained model's would be (weights ~ 1/sqrt(fan-in))."""
    B, S, D, F, H = dims["B"], dims["S"], dims["D"], dims["F"], dims["H"]
    K = D // H
    rng = np.random.default_rng(0)
    shapes = {
        "wq": (D, H, K),
        "wk": (D, H, K),
        "wv": (D, H, K),
        "wo": (H, K, D),
        "win": (D, F),
        "wout": (F, D),
    }
    fan_in = {"wq": D, "wk": D, "wv": D, "wo": D, "win": D, "wout": F}
    w = {k: (rng.standard_normal(s) / math.sqrt(fan_in[k])).astype(dtype) for k, s in shapes.items()}
    return rng.standard_normal((B, S, D)).astype(dtype), w


def tolerance(dtype: str, precision: str, platform: str) -> float:
    """The check's relative tolerance (see the module docstring)."""
    if jnp.dtype(dtype) != jnp.float32:
        return 2e-2
    return 1e-4 if precision == "highest" or platform == "cpu" else 2e-2


def build(op: BlockOp, mesh: jax.sharding.Mesh, dtype: str, precision: str) -> Program:
    """The block's step for ``op`` (its dims, sharding and axes) on ``mesh``, its matmuls
    at ``precision`` (a ``jax.lax.Precision`` name)."""
    dims, sharding = op.dims, op.sharding
    prec = jax.lax.Precision(precision)
    fsdp, tp = roles(sharding, list(op.axes))
    spec = specs(fsdp, tp)
    np_dtype = jnp.dtype(dtype)
    x_host, w_host = host_inputs(dims, np_dtype)
    n = dims["B"] * dims["S"] * dims["D"]

    def gather(a, dim):
        return jax.lax.all_gather(a, fsdp, axis=dim, tiled=True) if fsdp else a

    def reduce_tp(y):
        return jax.lax.psum(y, tp) if tp else y

    def local_loss(w, x):
        out = forward(x, w, gather, reduce_tp, prec).astype(jnp.float32)
        part = jnp.sum(out * out) / n
        return jax.lax.psum(part, fsdp) if fsdp else part

    def device_step(x, *ws):
        w = dict(zip(WEIGHTS, ws))
        loss, grads = jax.value_and_grad(local_loss)(w, x)
        return (loss, *(grads[k] for k in WEIGHTS))

    w_specs = tuple(spec[k] for k in WEIGHTS)
    step = jax.shard_map(device_step, mesh=mesh, in_specs=(spec["x"], *w_specs), out_specs=(P(), *w_specs))
    fn = jax.jit(step)

    def make_input():
        put = lambda a, s: jax.device_put(a, NamedSharding(mesh, s))  # noqa: E731
        return (put(x_host, spec["x"]), *(put(w_host[k], spec[k]) for k in WEIGHTS))

    def reference():
        # the same step on one device, no sharding: what the sharded step must equal
        ident = lambda a, *_: a  # noqa: E731

        def loss(w, x):
            out = forward(x, w, ident, ident, HIGHEST).astype(jnp.float32)
            return jnp.sum(out * out) / n

        cpu = jax.local_devices()[0]
        x1, w1 = jax.device_put(x_host, cpu), jax.device_put(w_host, cpu)
        value, grads = jax.jit(jax.value_and_grad(loss))(w1, x1)
        return (np.asarray(value), *(np.asarray(grads[k]) for k in WEIGHTS))

    params = sum(a.size for a in w_host.values())
    return Program(
        f"TransformerBlock[{sharding} over {','.join(a for a in (fsdp, tp) if a)}]",
        fn,
        make_input,
        reference,
        None,
        extra={
            "dims": dict(dims),
            "sharding": sharding,
            "fsdp_axis": fsdp,
            "tp_axis": tp,
            "flops": flops(dims),
            "params": int(params),
            "size_bytes": int((x_host.size + params) * np_dtype.itemsize),
        },
        tolerance=tolerance(dtype, precision, mesh.devices.flat[0].platform),
    )
