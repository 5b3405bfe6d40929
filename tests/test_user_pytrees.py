"""``op=program`` takes a function returning any pytree: a dict (it failed with "'dict' object
has no attribute 'block_until_ready'"), a named tuple, a dataclass registered with JAX or not,
nested ones. The runner waits on and checks every array leaf, in flattening order."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from runner.worker.programs.user import build
from runner.worker.result_check import check
from runner.worker.timing import wait

USER_MODULE = """
import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp


def as_dict(x, w):
    return {"y": x @ w, "loss": jnp.sum(x)}


class Pair(NamedTuple):
    a: jax.Array
    b: jax.Array


def as_namedtuple(x, w):
    return Pair(x @ w, x * 2)


@dataclasses.dataclass
class Out:  # not registered with JAX
    y: jax.Array
    name: str = "step"
    extra: dict = dataclasses.field(default_factory=dict)


def as_dataclass(x, w):
    return Out(x @ w, extra={"s": jnp.sum(w), "none": None})


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Registered:
    y: jax.Array
    z: jax.Array


def as_registered(x, w):
    return Registered(x @ w, w + 1)


def nested(x, w):
    return [({"a": x}, (w, [x @ w])), Out(x + 1)]


def one_array(x, w):
    return x @ w
"""


@pytest.fixture(scope="module")
def user_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("user") / "user_steps.py"
    path.write_text(USER_MODULE)
    return path


@pytest.mark.parametrize(
    "function,shapes",
    [
        ("as_dict", [(), (16, 8)]),  # dict leaves in key order: loss, then y
        ("as_namedtuple", [(16, 8), (16, 4)]),
        ("as_dataclass", [(16, 8), ()]),  # y, then extra's s; the name string and None dropped
        ("as_registered", [(16, 8), (4, 8)]),
        ("nested", [(16, 4), (4, 8), (16, 8), (16, 4)]),
        ("one_array", None),
    ],
)
def test_a_program_returning_any_pytree_is_waited_on_and_checked_leaf_by_leaf(user_file, function, shapes):
    mesh = jax.make_mesh((8,), ("X",))
    op = {"target": f"{user_file}:{function}", "inputs": ["x[B_X, D]", "w[D, F]"], "dims": {"B": 16, "D": 4, "F": 8}}
    program = build(op, mesh, "float32")
    out = program.fn(*program.make_input())
    wait(out)
    result = check(out, None, "float32")
    if shapes is None:  # a single array stays one array
        assert isinstance(out, jax.Array) and out.shape == (16, 8)
        assert result["outputs"] == 1 and result["passed"]
        return
    assert isinstance(out, tuple)
    assert [np.shape(x) for x in out] == shapes
    if function == "as_dict":
        np.testing.assert_allclose(np.asarray(out[0]), np.asarray(program.make_input()[0]).sum(), rtol=1e-5)
    assert result == {
        "passed": True,
        "kind": "finite",
        "outputs": len(shapes),
        "max_rel_error": None,
        "tolerance": None,
    }
