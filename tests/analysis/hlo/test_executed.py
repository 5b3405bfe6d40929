"""Which top-level instructions run a point's collective, by the names a trace shows them
(analysis.hlo.collective_executions, runner.worker.trace_facts.target_instructions), and the group count
of ``replica_groups={}`` without a device count in the header.

The modules are in tests/data/hlo (tests/helpers/hlo_samples.py says what each holds). A trace names
a device op after the instruction that ran: the entry computation's, or one in a computation
the entry runs as control flow (a while body). A collective nested in a fusion has no event of
its own: the fusion has; one wrapped by a generic async-start has the pair's (TPU) or its own
(GPU's kernel: tests/runner/worker/test_measure.py), listed under both until a trace picks.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from hlo_samples import (
    CPU_WHILE_PSUM,
    GPU_ASYNC,
    PYTORCH_XLA_SPMD,
    REPO,
    TPU_COLLECTIVE_SHAPES,
    TPU_SPARSECORE,
    compile_cpu_collectives,
    hlo_path,
    only,
)

from analysis.hlo import async_pairs, collective_executions, parse_collectives
from analysis.trace import device_samples
from runner.worker.trace_facts import target_instructions

PALLAS = REPO.parent / "shared" / "traces" / "hlo" / "tpu_v6e1_pallas_matmul.after_optimizations.txt"

# ----------------------------------------------------------------------------- TPU shapes


def test_every_tpu_shape_is_named_by_its_top_level_instruction():
    assert collective_executions(TPU_COLLECTIVE_SHAPES) == {
        # the async pair: both halves (the trace shows both; the reader joins them under the start)
        "all-gather-start.1": ("all-gather",),
        "all-gather-done.1": ("all-gather",),
        # the kCustom fusion calling %all-reduce-scatter (all-reduce.2 sliced by dynamic-slice.4):
        # one op named "fusion", doing a reduce-scatter; all-reduce.2 itself never shows
        "fusion": ("reduce-scatter",),
        # async-start(...), calls=%wrapped_all_to_all and its async-done, and all-to-all.1 itself
        # (a GPU trace's kernel name; a trace picks one: tests/runner/worker/test_measure.py)
        "all-to-all-start": ("all-to-all",),
        "all-to-all-done": ("all-to-all",),
        "all-to-all.1": ("all-to-all",),
        # the psum in the while loop's body: the entry runs the body, so its ops are trace ops
        "psum.7": ("all-reduce",),
    }


@pytest.mark.parametrize(
    "op, names",
    [
        ("all_gather", {"all-gather-start.1", "all-gather-done.1"}),
        ("reduce_scatter", {"fusion"}),
        ("all_to_all", {"all-to-all-start", "all-to-all-done", "all-to-all.1"}),
        # the psum only: the all-reduce inside the all-reduce-scatter fusion is not the point's
        ("all_reduce", {"psum.7"}),
    ],
)
def test_a_points_instructions_on_tpu(op, names):
    # By opcode in every computation this was {all-reduce.2, psum.7} for all_reduce and None
    # (nothing: the program timed whole) for reduce_scatter.
    assert target_instructions(TPU_COLLECTIVE_SHAPES, op) == names
    # a TPU trace shows the async pair, not the wrapped all-to-all.1: the pair alone
    seen = {"all-gather-start.1", "fusion", "all-to-all-start", "psum.7"}
    assert target_instructions(TPU_COLLECTIVE_SHAPES, op, seen=seen) == names - {"all-to-all.1"}


def test_a_sparsecore_offload_and_an_all_reduce_fusion():
    assert collective_executions(TPU_SPARSECORE) == {
        # call-start(...), to_apply=%sparsecore_all_gather / call-done: the pair, not all-gather.2
        "call-start": ("all-gather",),
        "call-done": ("all-gather",),
        # XProf's "all-reduce fusion": the fusion's name, not all-reduce.4
        "all-reduce-fusion": ("all-reduce",),
    }
    assert target_instructions(TPU_SPARSECORE, "all_gather") == {"call-start", "call-done"}
    assert target_instructions(TPU_SPARSECORE, "all_reduce") == {"all-reduce-fusion"}
    assert async_pairs(TPU_SPARSECORE) == {"call-done": "call-start"}  # the trace joins them by this


def test_gpu_async_pairs_and_an_async_wrapped_reduce_scatter():
    assert target_instructions(GPU_ASYNC, "all_gather") == {"all-gather-start", "all-gather-done"}
    # %reduce-scatter-start = async-start(...), calls=%reduce-scatter.1, and reduce-scatter.2 inside,
    # whose name XLA GPU's NCCL kernel carries
    assert target_instructions(GPU_ASYNC, "reduce_scatter") == {
        "reduce-scatter-start",
        "reduce-scatter-done",
        "reduce-scatter.2",
    }
    assert target_instructions(GPU_ASYNC, "all_reduce") == {"all-reduce-start", "all-reduce-done"}


def test_async_update_chains_lead_back_to_the_start():
    text = (
        "HloModule m, num_partitions=8\n\n"
        "%wrapped (p.1: f32[8]) -> f32[64] {\n"
        "  %p.1 = f32[8]{0} parameter(0)\n"
        "  ROOT %ag = f32[64]{0} all-gather(%p.1), replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}\n"
        "}\n\n"
        "ENTRY %e (p: f32[8]) -> f32[64] {\n"
        "  %p = f32[8]{0} parameter(0)\n"
        "  %s = ((f32[8]{0}), f32[64]{0}, u32[]) async-start(%p), calls=%wrapped\n"
        "  %u = ((f32[8]{0}), f32[64]{0}, u32[]) async-update(%s), calls=%wrapped\n"
        "  ROOT %d = f32[64]{0} async-done(%u), calls=%wrapped\n"
        "}\n"
    )
    assert async_pairs(text) == {"d": "s"}  # the done's start, through the update
    assert target_instructions(text, "all_gather") == {"s", "d", "ag"}
    assert target_instructions(text, "all_gather", seen={"s", "d"}) == {"s", "d"}


def test_matmuls_and_grads_are_timed_whole_and_a_program_without_the_collective_has_none():
    assert target_instructions(TPU_COLLECTIVE_SHAPES, "matmul") is None
    assert target_instructions(TPU_COLLECTIVE_SHAPES, "all_gather", grad=True) is None
    if PALLAS.exists():  # a real TPU module (CI has ../shared/traces) with no collective at all
        assert target_instructions(PALLAS.read_text(), "all_gather") == set()
    # no all-to-all, but an all-gather and an all-reduce: timed by those (tests/runner/worker/test_measure.py)
    assert target_instructions(TPU_SPARSECORE, "all_to_all") == {"call-start", "call-done", "all-reduce-fusion"}
    # a group of 1: XLA runs a copy, the point is flagged (no communication) and timed whole
    assert target_instructions(TPU_SPARSECORE, "all_gather", group=1) is None


def test_the_device_estimator_times_the_fusion_not_the_program():
    # device_ops rows as a TPU trace gives them: per device and step, the joined all-gather pair,
    # the all-reduce-scatter fusion, a copy. The reduce-scatter point's samples are the fusion's.
    rows = []
    for dev in range(2):
        for it in range(2):
            t0 = 10_000 * it
            for name, start, dur in (
                ("all-gather-start.1", 0, 300),
                ("fusion", 400, 200 + 100 * dev),
                ("copy", 700, 50),
            ):
                rows.append((dev, "jit_step", name, t0 + start, t0 + start + dur, dur, it))
    ops = pd.DataFrame(
        rows, columns=["device", "hlo_module", "hlo_op", "start_ns", "end_ns", "duration_ns", "iteration"]
    )
    names = target_instructions(TPU_COLLECTIVE_SHAPES, "reduce_scatter")
    # median over the two devices of 200 and 300 ns
    assert device_samples(ops, names) == pytest.approx([250e-9, 250e-9])
    assert device_samples(ops, target_instructions(TPU_COLLECTIVE_SHAPES, "all_gather")) == pytest.approx([300e-9] * 2)


# ----------------------------------------------------------------------------- real CPU compiles


def test_cpu_compiles_name_each_collective_by_its_own_instruction():
    compiled = compile_cpu_collectives()
    for kind, text in compiled["texts"].items():
        # on CPU every collective is a plain top-level op of the entry: the same names the
        # parser lists, whatever JAX called them
        want = {c.name for c in parse_collectives(text) if c.kind == kind}
        assert want and collective_executions(text) == dict.fromkeys(want, (kind,))
    assert target_instructions(compiled["texts"]["all-reduce"], "all_reduce") == {
        c.name for c in parse_collectives(compiled["texts"]["all-reduce"])
    }
    # the fori_loop's psum sits in the while body %region_0.2_spmd, which the entry runs
    assert target_instructions(CPU_WHILE_PSUM, "all_reduce") == {"psum.7"}


# ----------------------------------------------------------------------------- replica_groups={}


def test_empty_replica_groups_are_one_group_without_a_device_count():
    c = only(PYTORCH_XLA_SPMD)
    # f32[16,64] = 4096 B; replica_groups={}: every device in one group; the header has no
    # num_partitions or replica_count, so the group's size is unknown but the count is not
    assert (c.name, c.replica_groups, c.group_size, c.num_groups) == ("all-reduce.10", None, None, 1)
    assert only(PYTORCH_XLA_SPMD, num_devices=2).group_size == 2


def test_analysis_hlo_prints_one_group_for_a_pytorch_xla_module(capsys):
    from analysis.cli import main

    path = str(hlo_path("pytorch_xla_spmd"))
    assert main(["hlo", path]) == 0
    out = capsys.readouterr().out.splitlines()
    header = out[1].split()
    row = dict(zip(header, out[2].split()))  # group_size is blank, so the cells after it shift
    assert out[2].split()[:5] == ["all-reduce.10", "all-reduce", "f32", "4,096", "4,096"]
    assert out[2].split()[5:] == ["1"]  # no group size; ONE group
    assert header[5:7] == ["group_size", "num_groups"] and row["name"] == "all-reduce.10"
    assert main(["hlo", path, "--json"]) == 0
    (rec,) = json.loads(capsys.readouterr().out)["collectives"]
    assert (rec["group_size"], rec["num_groups"]) == (None, 1)


def test_conditional_branches_and_called_computations_run_their_collectives_at_top_level():
    # a conditional (branch_computations={...}) and a call (to_apply=) run their computations'
    # instructions as ops of their own; the reducer %add of an all-reduce is not run that way,
    # and %never, which nothing calls, is not run at all
    text = (
        "HloModule m, num_partitions=4\n\n"
        "%add (x: f32[], y: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n  %y = f32[] parameter(1)\n"
        "  ROOT %s = f32[] add(%x, %y)\n}\n\n"
        "%gather_branch (a: f32[4]) -> f32[16] {\n  %a = f32[4]{0} parameter(0)\n"
        "  ROOT %ag.1 = f32[16]{0} all-gather(%a), replica_groups={{0,1,2,3}}, dimensions={0}\n}\n\n"
        "%tile_branch (b: f32[4]) -> f32[16] {\n  %b = f32[4]{0} parameter(0)\n"
        "  ROOT %bc = f32[16]{0} broadcast(%b), dimensions={0}\n}\n\n"
        "%reduce_call (c: f32[16]) -> f32[16] {\n  %c = f32[16]{0} parameter(0)\n"
        "  ROOT %psum.3 = f32[16]{0} all-reduce(%c), replica_groups={{0,1,2,3}}, to_apply=%add\n}\n\n"
        "%never (d: f32[16]) -> f32[16] {\n  %d = f32[16]{0} parameter(0)\n"
        "  ROOT %a2a = f32[16]{0} all-to-all(%d), replica_groups={{0,1,2,3}}, dimensions={0}\n}\n\n"
        "ENTRY %main (i: s32[], p: f32[4]) -> f32[16] {\n  %i = s32[] parameter(0)\n  %p = f32[4]{0} parameter(1)\n"
        "  %cond = f32[16]{0} conditional(%i, %p, %p), branch_computations={%gather_branch, %tile_branch}\n"
        "  ROOT %call.1 = f32[16]{0} call(%cond), to_apply=%reduce_call\n}\n"
    )
    assert collective_executions(text) == {"ag.1": ("all-gather",), "psum.3": ("all-reduce",)}
    assert target_instructions(text, "all_to_all") == {"ag.1", "psum.3"}  # what runs in its place
    # a string never names a called computation: op_name="... true_computation=%x" is metadata
    quoted = text.replace("%tile_branch}\n", '%tile_branch}, metadata={op_name="if true_computation=%never"}\n')
    assert quoted != text
    assert collective_executions(quoted) == collective_executions(text)
