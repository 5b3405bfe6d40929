"""A step that runs its collective several times: a psum four times inside a ``lax.scan``
(issue 37 item 6: the device estimator must sum an op's runs per step, not take the k-th run
as step k). Measured as ``op=program`` by tests/analysis/trace/test_steps.py."""

import jax
from jax.sharding import PartitionSpec as P

RUNS = 4  # psums per step


def scan_psum(x):
    """x, sharded over X, mixed with its sum over X four times in a row."""

    def body(c, _):
        # half its own, half the mean over X: a psum whose result stays sharded like the carry
        return c * 0.5 + jax.lax.psum(c, "X") * (0.5 / jax.lax.axis_size("X")), None

    def per_shard(xs):
        out, _ = jax.lax.scan(body, xs, None, length=RUNS)
        return out

    return jax.shard_map(per_shard, in_specs=P("X"), out_specs=P("X"))(x)
