"""A collective is a row, a cost and a program: every consumer agrees with its row in
:data:`analysis.book.collectives.KINDS`, and a new row is all the lookups need.

Per row: the runner has its program (:data:`runner.worker.programs.collectives.PROGRAMS`), a
``jax.grad`` program exactly where the row offers ``op.grad``, a memory working set and a
``conf/op`` YAML; the book's V of the program's own compiled instruction is the V it was built
for; the bytes the memory estimate counts per device are the program's real buffers; the
spec's checks (``op.grad``, the sums, the divisibility) follow the row.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from jax.sharding import AxisType
from omegaconf import OmegaConf

from analysis.book import collectives as book
from analysis.book.collective_cost import predict_collective
from analysis.book.collectives import BY_OP, KINDS, V_from_hlo, bus_bytes, local_bytes, nccl_S_bytes
from analysis.book.hardware import load_hardware
from analysis.hlo import parse_collectives
from runner.config import memory
from runner.config.op_spec import CollectiveOp
from runner.config.spec import check_shapes
from runner.errors import ConfigError
from runner.worker import programs
from runner.worker.programs import collectives as progs

ROWS = pytest.mark.parametrize("row", KINDS, ids=lambda k: k.op)


def test_the_runner_tables_hold_exactly_the_book_s_kinds(repo_root):
    ops = [k.op for k in KINDS]
    assert ops == ["all_gather", "reduce_scatter", "all_reduce", "all_to_all"]
    assert list(progs.PROGRAMS) == ops
    assert list(memory.WORKING_SET) == ops
    assert {o: OmegaConf.load(repo_root / "conf" / "op" / f"{o}.yaml").name for o in ops} == {o: o for o in ops}


@ROWS
def test_a_grad_program_exactly_where_the_row_offers_op_grad(row):
    assert (progs.PROGRAMS[row.op].grad is not None) is row.grad
    assert [k.op for k in KINDS if k.grad] == ["all_gather", "reduce_scatter"]
    assert row.backward in BY_OP and (not row.cost_as or row.cost_as in BY_OP)


# An instruction of operand 32 B and result 256 B per device, in a group of 8.
V_OF_INSTRUCTION = {"all-gather": 256, "reduce-scatter": 32, "all-reduce": 32, "all-to-all": 32 * 8}


@ROWS
def test_V_of_a_hand_made_instruction_is_the_row_s_side(row):
    assert V_from_hlo(row.hlo, 32, 256, 8) == V_OF_INSTRUCTION[row.hlo]


def test_V_of_an_unpriced_kind_or_an_all_to_all_of_unknown_group_is_nan():
    assert np.isnan(V_from_hlo("collective-permute", 32, 32, 8))
    assert np.isnan(V_from_hlo("all-to-all", 32, 32, None))


# nccl-tests' busbw factors (doc/PERFORMANCE.md) and S over the book's V, for n = 8
NCCL_8 = {
    "all_gather": (7 / 8, 1.0),
    "reduce_scatter": (7 / 8, 1.0),
    "all_reduce": (14 / 8, 1.0),
    "all_to_all": (7 / 8, 1 / 8),
}


@ROWS
def test_bus_bandwidth_factor_and_S_are_nccl_tests(row):
    assert (row.busbw_factor(8), row.S_over_V(8)) == NCCL_8[row.op]
    # the bytes one device moves: S x factor, in whole bytes; V = 3 MiB over 3 devices
    assert (
        bus_bytes(row.op, 3 << 20, 3)
        == {
            "all_gather": 2 << 20,
            "reduce_scatter": 2 << 20,
            "all_reduce": 4 << 20,
            "all_to_all": (1 << 20) * 2 // 3,
        }[row.op]
    )


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((4, 2), ("X", "Y"), axis_types=(AxisType.Explicit,) * 2)


V = 4096  # 1024 float32 elements: a multiple of 4 * 4 (AllToAll over X splits twice)


@ROWS
def test_the_program_s_instruction_and_buffers_agree_with_the_row(row, mesh):
    prog = progs.build(row.op, ["X"], mesh, V, "float32")
    x = prog.make_input()
    (c,) = parse_collectives(prog.fn.lower(x).compile().as_text())
    assert (c.kind, c.group_size) == (row.hlo, 4)
    assert V_from_hlo(c.kind, c.operand_bytes, c.result_bytes, c.group_size) == V
    out = prog.fn(x)
    assert np.array_equal(np.asarray(out), np.asarray(prog.reference()))
    held = (x.addressable_shards[0].data.nbytes, out.addressable_shards[0].data.nbytes)
    assert local_bytes(row.op, V, 4) == held
    assert nccl_S_bytes(row.op, V, 4) == max(held)  # S: the larger buffer
    # the memory estimate counts those buffers: input + 3 outputs + the working set x S
    spec = {"op": CollectiveOp(row.op, ("X",), V), "dtype": "float32", "timing": {"loop": False}}
    est = memory.estimate(spec, {"X": 4, "Y": 2})
    assert est["per_device_bytes"] == held[0] + 3 * held[1] + memory.WORKING_SET[row.op] * max(held)


@pytest.mark.parametrize("row", [k for k in KINDS if k.grad], ids=lambda k: k.op)
def test_the_grad_program_runs_the_row_s_backward_collective(row, mesh):
    prog = programs.build({"op": CollectiveOp(row.op, ("X",), V, grad=True), "dtype": "float32"}, mesh)
    x = prog.make_input()
    kinds = {c.kind for c in parse_collectives(prog.fn.lower(x).compile().as_text())}
    assert BY_OP[row.backward].hlo in kinds and prog.expr.startswith("grad of ")


@ROWS
def test_op_grad_is_accepted_exactly_where_the_row_offers_it(row):
    op = {"name": row.op, "axes": ["X"], "size_bytes": "4KiB", "grad": True}
    if row.grad:
        assert CollectiveOp.from_config(op, {"X": 8}, "x8", "float32").grad is True
    else:
        with pytest.raises(ConfigError) as e:
            CollectiveOp.from_config(op, {"X": 8}, "x8", "float32")
        assert str(e.value) == f"op.grad=true: allowed only for all_gather and reduce_scatter, not {row.op}"


@ROWS
def test_sizes_must_split_over_the_group_as_often_as_the_row_says(row):
    def fits(elems: int) -> bool:
        spec = {"op": CollectiveOp(row.op, ("X",), 4 * elems), "dtype": "float32"}
        try:
            check_shapes(dict(spec, check_result=False), {"X": 4})
        except ConfigError:
            return False
        return True

    first = [e for e in range(1, 40) if fits(e)][:3]
    assert (
        first
        == {"all_gather": [4, 8, 12], "reduce_scatter": [4, 8, 12], "all_reduce": [1, 2, 3], "all_to_all": [16, 32]}[
            row.op
        ]
    )


@ROWS
def test_the_sums_are_checked_for_the_reducing_kinds_only(row):
    # int8 holds sums up to 127: 0s and 1s over 128 devices can exceed it
    spec = {"op": CollectiveOp(row.op, ("X",), 128 * 128), "dtype": "int8", "check_result": True}
    if row.sums:
        with pytest.raises(ConfigError, match="the result cannot be checked"):
            check_shapes(spec, {"X": 128})
    else:
        check_shapes(spec, {"X": 128})
    assert [k.op for k in KINDS if k.sums] == ["reduce_scatter", "all_reduce"]


# ------------------------------------------------------------- a new row is enough
BROADCAST = book.CollectiveKind(
    op="broadcast",
    notation="Broadcast",
    hlo="collective-broadcast",
    V_meaning="the array the root sends",
    V_side="result",
    input="whole",
    output="whole",
    busbw_factor=lambda n: 1.0,
    backward=None,
    cost_as="all_gather",
)


@pytest.fixture
def with_broadcast(monkeypatch):
    """The table with one more row, and the runner's two entries for it."""
    monkeypatch.setattr(book, "KINDS", (*KINDS, BROADCAST))
    for table, key in ((book.BY_OP, "broadcast"), (book.BY_HLO, "collective-broadcast")):
        monkeypatch.setitem(table, key, BROADCAST)
    monkeypatch.setitem(memory.WORKING_SET, "broadcast", 2)
    built = []

    def program(axes, mesh, size_bytes, dtype):
        built.append((tuple(axes), size_bytes, dtype))
        return "the broadcast program"

    monkeypatch.setitem(progs.PROGRAMS, "broadcast", progs.CollectivePrograms(program))
    return built


def test_a_new_row_is_enough_for_the_book_s_lookups(with_broadcast):
    assert book.kind("Broadcast") is BROADCAST and book.normalize_kind("broadcast") == "broadcast"
    assert V_from_hlo("collective-broadcast", 32, 32, 8) == 32
    assert local_bytes("broadcast", 4096, 8) == (4096, 4096) and bus_bytes("broadcast", 4096, 8) == 4096
    assert nccl_S_bytes("broadcast", 4096, 8) == 4096 and book.busbw_factor("broadcast", 8) == 1.0
    # cost_as: priced by AllGather's formula
    hw = load_hardware("tpu_v5e")
    assert (
        predict_collective("broadcast", 1 << 20, [8], hw).time_s
        == predict_collective("all_gather", 1 << 20, [8], hw).time_s
    )


def test_a_new_row_is_enough_for_the_runner_s_checks_memory_and_program(with_broadcast):
    op = {"name": "broadcast", "axes": ["X"], "size_bytes": "4KiB", "grad": True}
    with pytest.raises(ConfigError, match="allowed only for all_gather and reduce_scatter, not broadcast"):
        CollectiveOp.from_config(op, {"X": 8}, "x8", "float32")
    spec = {"op": CollectiveOp.from_config(dict(op, grad=False), {"X": 8}, "x8", "float32"), "dtype": "float32"}
    check_shapes(dict(spec, check_result=False), {"X": 8})
    est = memory.estimate(dict(spec, timing={"loop": False}, check_result=False), {"X": 8})
    assert est["per_device_bytes"] == 4096 + 3 * 4096 + 2 * 4096
    assert programs.build(spec, mesh=None) == "the broadcast program"
    assert with_broadcast == [(("X",), 4096, "float32")]


def test_the_cost_prices_a_row_as_its_cost_as_times_cost_times(monkeypatch):
    thrice = dataclasses.replace(BY_OP["all_reduce"], cost_times=3, cost_why="three ReduceScatters")
    monkeypatch.setattr(book, "KINDS", tuple(thrice if k.op == "all_reduce" else k for k in KINDS))
    monkeypatch.setitem(book.BY_OP, "all_reduce", thrice)
    hw = load_hardware("tpu_v5e")
    ar, rs = (predict_collective(op, 1 << 20, [8], hw) for op in ("all_reduce", "reduce_scatter"))
    assert ar.time_s == 3 * rs.time_s
    assert ar.formula.startswith("3 * (ReduceScatter: ") and ar.formula.endswith("[AllReduce = three ReduceScatters]")


def test_a_row_with_an_unknown_side_is_refused_naming_the_key_and_the_choices():
    with pytest.raises(book.NotationError) as e:
        dataclasses.replace(BROADCAST, V_side="outcome")
    assert str(e.value) == "broadcast: V_side='outcome'; allowed: result, operand, operand x group"
    with pytest.raises(book.NotationError, match=r"input='half'; allowed: shard, whole"):
        dataclasses.replace(BROADCAST, input="half")
    with pytest.raises(book.NotationError) as e:
        dataclasses.replace(BROADCAST, output="half")
    assert str(e.value) == "broadcast: output='half'; allowed: shard, whole"


def test_every_spelling_names_a_kind_and_an_unknown_one_lists_them():
    assert [book.kind(s).op for s in ("AllGather", "all-gather", "all_gather", "allgather")] == ["all_gather"] * 4
    assert book.normalize_kind("reduce-scatter") == "reduce_scatter"
    with pytest.raises(book.NotationError) as e:
        book.kind("broadcast")
    assert str(e.value) == "unknown collective 'broadcast' (one of all_gather, reduce_scatter, all_reduce, all_to_all)"


def test_a_shard_is_whole_bytes_rounded_down():
    # 10 B over 3 devices: a shard is 3 B, not 3.33
    assert local_bytes("all_gather", 10, 3) == (3, 10) and type(local_bytes("all_gather", 10, 3)[0]) is int
    assert book.per_device_bytes("shard", 10, 3, times=2) == 6
