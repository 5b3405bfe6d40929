"""A user's own training step, as the README's example writes it (tests/analysis/profiling/test_training_steps.py
checks that the two stay the same)."""

import jax
import jax.numpy as jnp


def train_step(x, w1, w2):
    """One SGD step of a two-layer MLP; XLA shards it from its inputs' shardings."""

    def loss(params):
        a, b = params
        return jnp.mean((jax.nn.relu(x @ a) @ b) ** 2)

    value, (g1, g2) = jax.value_and_grad(loss)((w1, w2))
    return value, w1 - 0.01 * g1, w2 - 0.01 * g2
