"""``op=program`` takes a function returning any pytree: a dict (it failed with "'dict' object
has no attribute 'block_until_ready'"), a named tuple, a dataclass registered with JAX or not,
nested ones. The runner waits on and checks every array leaf, in flattening order.

A user's function that raises a ``BaseException`` (KeyboardInterrupt, SystemExit, its own
subclass) is a failed point like any other: one line naming it, its traceback in the point's
log, and the next point of the sweep measured by a fresh worker. (It was a 45-line traceback on
the console, then "WorkerDied ... exited with code 1" with an empty log tail.)
"""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from runner import run
from runner.config.op_spec import ProgramOp
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
    op = ProgramOp(f"{user_file}:{function}", ("x[B_X, D]", "w[D, F]"), {"B": 16, "D": 4, "F": 8}, ("X",))
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


BASE_EXCEPTION_MODULE = """
class Boom(BaseException):
    pass


def interrupted(x):
    raise KeyboardInterrupt("raised by the user's step")


def boom(x):
    raise Boom("a BaseException of its own")
"""
QUICK = ["timing.min_iters=5", "timing.budget_s=0.3", "trace.iters=3", "timing.rounds=1"]


def test_a_user_base_exception_is_a_failed_point_and_the_sweep_goes_on(compose_cfg, tmp_path, capfd):
    (tmp_path / "bad_step.py").write_text(BASE_EXCEPTION_MODULE)
    for fn, error_type, error in [
        ("interrupted", "KeyboardInterrupt", "raised by the user's step"),
        ("boom", "Boom", "a BaseException of its own"),
    ]:
        cfg = compose_cfg(
            [
                *QUICK,
                "op=program",
                f"op.target={tmp_path / 'bad_step.py'}:{fn}",
                "op.inputs=['x[B_X, D]']",
                "op.dims={B: 64, D: 512}",
            ]
        )
        r = run(cfg, tmp_path / fn)
        assert (r["status"], r["error_type"], r["error"]) == ("failed", error_type, error)
        on_disk = json.loads((tmp_path / fn / "result.json").read_text())
        assert (on_disk["status"], on_disk["error_type"]) == ("failed", error_type)
        log = (tmp_path / fn / "worker.log").read_text()
        assert "Traceback" in log and f"in {fn}" in log  # the user's frame, in the point's log
        assert "Traceback" not in capfd.readouterr().err  # and not on the console
    # the next point runs (a fresh worker: the one that saw the BaseException was let go)
    ok = run(compose_cfg([*QUICK, "op.size_bytes=4KiB"]), tmp_path / "next")
    assert ok["status"] == "ok"
