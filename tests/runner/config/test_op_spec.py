"""Each kind of op answers for itself, and for no other kind: the class a config's ``op.name``
becomes, its plain form, its shape checks, its memory count, the collective that times it and
its program's builder. A behaviour wired to the wrong kind fails here."""

from __future__ import annotations

import dataclasses

import pytest

from runner.config import memory
from runner.config.op_spec import KINDS, BlockOp, CollectiveOp, MatmulOp, ProgramOp, kind
from runner.config.spec import build_spec, check_shapes
from runner.errors import ConfigError

BASE = ["hardware=cpu", "mesh=x8"]
# one config of each kind, the class it becomes and the plain dict its op was before it was typed
CONFIGS = {
    "collective": (
        ["op=all_to_all", "op.size_bytes=4KiB"],
        CollectiveOp,
        {"name": "all_to_all", "axes": ["X"], "size_bytes": 4096, "grad": False},
    ),
    "matmul": (
        ["op=matmul", "op.dims={I: 16, J: 16, K: 8}"],
        MatmulOp,
        {
            "name": "matmul",
            "expr": "A[I, J_X] * B[J, K] -> C[I, K]",
            "dims": {"I": 16, "J": 16, "K": 8},
            "strategy": "auto",
            "axes": ["X"],
        },
    ),
    "block": (
        ["op=transformer_block", "op.dims={B: 8, S: 4, D: 16, F: 32, H: 2}"],
        BlockOp,
        {
            "name": "transformer_block",
            "sharding": "fsdp",
            "axes": ["X"],
            "dims": {"B": 8, "S": 4, "D": 16, "F": 32, "H": 2},
        },
    ),
    "program": (
        ["op=program", "op.target=math:sqrt", "op.inputs=['x[B_X, D]', 'w[D, F]']", "op.dims={B: 16, D: 4, F: 8}"],
        ProgramOp,
        {
            "name": "program",
            "target": "math:sqrt",
            "inputs": ["x[B_X, D]", "w[D, F]"],
            "dims": {"B": 16, "D": 4, "F": 8},
            "axes": ["X"],
        },
    ),
}
KIND_NAMES = pytest.mark.parametrize("which", list(CONFIGS))


def _spec(compose_cfg, which: str, *more: str) -> dict:
    return build_spec(compose_cfg([*BASE, *CONFIGS[which][0], *more]))


@KIND_NAMES
def test_each_op_name_becomes_its_kind_and_its_plain_form_is_the_dict_it_was(compose_cfg, which):
    _, cls, plain = CONFIGS[which]
    op = _spec(compose_cfg, which)["op"]
    assert type(op) is cls and kind(plain["name"]) is cls
    assert op.to_json() == plain and list(op.to_json()) == list(plain)  # the same keys, in the same order


def test_every_name_not_a_whole_program_is_a_collective():
    assert KINDS == {"matmul": MatmulOp, "transformer_block": BlockOp, "program": ProgramOp}
    assert [kind(n) for n in ("all_gather", "reduce_scatter", "all_reduce")] == [CollectiveOp] * 3


# a shape that does not split over X=8, and the kind's own words for it
UNEVEN = {
    "collective": (
        {"size_bytes": 96},
        "op.size_bytes=96: 24 float32 elements do not split over X (8 devices); all_to_all needs a multiple of 64",
    ),
    "matmul": ({"dims": {"I": 16, "J": 12, "K": 8}}, "op.expr / op.dims: A[I, J_X]: dim J=12 is not divisible"),
    "block": ({"dims": {"B": 4, "S": 4, "D": 16, "F": 32, "H": 2}}, "op.dims.B=4 does not split over X (8 devices)"),
    "program": ({"dims": {"B": 12, "D": 4, "F": 8}}, "op.dims.B=12 does not split over X (8)"),
}


@KIND_NAMES
def test_each_kind_checks_its_own_shapes(compose_cfg, which):
    change, words = UNEVEN[which]
    op = _spec(compose_cfg, which)["op"]
    check_shapes({"op": op, "dtype": "float32"}, {"X": 8})  # the config of CONFIGS splits
    with pytest.raises(ConfigError) as e:
        check_shapes({"op": dataclasses.replace(op, **change), "dtype": "float32"}, {"X": 8})
    assert str(e.value).startswith(words)


@KIND_NAMES
def test_each_kind_counts_its_memory_with_its_own_function(compose_cfg, which, monkeypatch):
    spec = _spec(compose_cfg, which)
    for name in ("collective_bytes", "matmul_bytes", "block_bytes", "program_bytes"):
        monkeypatch.setattr(memory, name, lambda *a, name=name: name)
    want = {"collective": "collective", "matmul": "matmul", "block": "block", "program": "program"}[which]
    assert memory.estimate(spec, {"X": 8}) == f"{want}_bytes"


def test_a_too_large_point_names_its_own_setting(compose_cfg):
    sizes = {w: _spec(compose_cfg, w)["op"].size_setting for w in CONFIGS}
    assert sizes == {
        "collective": "op.size_bytes=4KiB",
        "matmul": "op.dims={'I': 16, 'J': 16, 'K': 8}",
        "block": "op.dims={'B': 8, 'S': 4, 'D': 16, 'F': 32, 'H': 2}",
        "program": "op.dims={'B': 16, 'D': 4, 'F': 8}",
    }
    assert [_spec(compose_cfg, w)["op"].size_bytes for w in CONFIGS] == [4096, None, None, None]


def test_only_a_collective_of_two_devices_or_more_is_timed_by_its_own_instructions(compose_cfg):
    ops = {w: _spec(compose_cfg, w)["op"] for w in CONFIGS}
    assert {w: op.timed_collective(8) for w, op in ops.items()} == {
        "collective": "all_to_all",
        "matmul": None,
        "block": None,
        "program": None,
    }
    assert ops["collective"].timed_collective(1) is None  # XLA runs a copy: timed whole, flagged
    grad = _spec(compose_cfg, "collective", "op=all_gather", "op.grad=true")["op"]
    assert grad.timed_collective(8) is None and grad.collective == "all_gather"  # its backward: timed whole
    assert [op.collective for op in ops.values()] == ["all_to_all", None, None, None]


@KIND_NAMES
def test_each_kind_is_built_by_its_own_program(compose_cfg, which, monkeypatch):
    from runner.worker import programs
    from runner.worker.programs import block, collectives, matmul, user

    assert set(programs.BUILDERS) == {CollectiveOp, *KINDS.values()}  # every kind has a builder
    for module in (block, collectives, matmul, user):
        monkeypatch.setattr(module, "build", lambda *a, module=module, **k: (module.__name__, a, k))
    spec = _spec(compose_cfg, which)
    name, args, kwargs = programs.build(spec, mesh="the mesh")
    want = {"collective": collectives, "matmul": matmul, "block": block, "program": user}[which]
    assert name == want.__name__
    if which == "collective":  # the collective's builder takes the op's values, the others the op
        assert args == ("all_to_all", ["X"], "the mesh", 4096, "float32") and kwargs == {"grad": False}
    else:
        assert args[:2] == (spec["op"], "the mesh") and args[0].to_json() == CONFIGS[which][2]
