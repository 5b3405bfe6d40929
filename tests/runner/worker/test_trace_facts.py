"""Issue 37, items 7 and 8: what the device estimator times where XLA does not run the asked
collective as one op of its own name.

7. XLA GPU runs a reduce-scatter or an all-to-all inside a generic ``async-start(...),
   calls=%c`` / ``async-done`` and names the NCCL kernel after the *wrapped* instruction
   (``thunk_emitter.cc``: ``WithProfileAnnotation(inst)`` on the collective inside; the
   wrapper's name only with ``xla_syntax_sugar_async_ops``, false by default). The kernel must
   be timed, and where a trace shows both the pair and the kernel, once.
8. A collective the compiler runs as others (an all-reduce as a reduce-scatter fusion and an
   all-gather) is timed by those, and the point says so (``spec.rewritten``, summary.csv's
   ``rewritten``, a caveat); one offloaded as ``call-start``/``call-done`` (the SparseCore's)
   is timed by that pair and says so too.

The HLO is written by hand in the syntax XLA prints for GPU and TPU after optimisation; the
traces are device-op tables in the GPU encoding (``/device:GPU:N`` planes, stream lines, the
``hlo_op`` stat on each kernel, one ``scope_range_id`` per launch) and the TPU encoding.
"""

from __future__ import annotations

import pandas as pd
import pytest
from hlo_samples import GPU_ASYNC, TPU_AR_SPLIT, TPU_SPARSECORE

from analysis.hlo import async_pairs, collective_executions
from analysis.runs.record import Result
from analysis.runs.summary import summary_table
from analysis.trace import TABLE_COLUMNS, device_ops, device_samples
from runner.worker.trace_facts import compiled_as, target_instructions

# ----------------------------------------------------------------------------- hand-written HLO

_ADD = (
    "%add (x: f32[], y: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n  %y = f32[] parameter(1)\n"
    "  ROOT %s = f32[] add(%x, %y)\n}\n"
)

# An all-to-all as XLA GPU runs it: a generic async pair around %all-to-all.3
GPU_ALL_TO_ALL = (
    "HloModule jit_a2a, is_scheduled=true, num_partitions=4\n\n"
    "%wrapped_all_to_all (p.0: bf16[64,32]) -> bf16[64,32] {\n"
    "  %p.0 = bf16[64,32]{1,0} parameter(0)\n"
    "  ROOT %all-to-all.3 = bf16[64,32]{1,0} all-to-all(bf16[64,32]{1,0} %p.0), channel_id=5, "
    "replica_groups={{0,1,2,3}}, dimensions={0}\n"
    "}\n\n"
    "ENTRY %main (e: bf16[64,32]) -> bf16[64,32] {\n"
    "  %e = bf16[64,32]{1,0} parameter(0)\n"
    "  %all-to-all-start = ((bf16[64,32]{1,0}), bf16[64,32]{1,0}) async-start(bf16[64,32]{1,0} %e), "
    'calls=%wrapped_all_to_all, backend_config={"operation_queue_id":"0","wait_on_operation_queues":[],'
    '"collective_backend_config":{"is_sync":false}}\n'
    "  ROOT %all-to-all-done = bf16[64,32]{1,0} async-done(((bf16[64,32]{1,0}), bf16[64,32]{1,0}) "
    "%all-to-all-start)\n"
    "}\n"
)

# An all-reduce XLA GPU split into a reduce-scatter (async-wrapped) and an all-gather pair
GPU_AR_SPLIT = (
    "HloModule jit_psum, is_scheduled=true, num_partitions=4\n\n"
    + _ADD
    + "\n%wrapped_reduce_scatter (p.0: f32[1024]) -> f32[256] {\n"
    "  %p.0 = f32[1024]{0} parameter(0)\n"
    "  ROOT %reduce-scatter.3 = f32[256]{0} reduce-scatter(f32[1024]{0} %p.0), channel_id=1, "
    "replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=%add\n"
    "}\n\n"
    "ENTRY %main (a: f32[1024]) -> f32[1024] {\n"
    "  %a = f32[1024]{0} parameter(0)\n"
    "  %reduce-scatter-start = ((f32[1024]{0}), f32[256]{0}) async-start(f32[1024]{0} %a), "
    "calls=%wrapped_reduce_scatter\n"
    "  %reduce-scatter-done = f32[256]{0} async-done(((f32[1024]{0}), f32[256]{0}) %reduce-scatter-start)\n"
    "  %all-gather-start.4 = (f32[256]{0}, f32[1024]{0}) all-gather-start(f32[256]{0} %reduce-scatter-done), "
    "channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true\n"
    "  ROOT %all-gather-done.4 = f32[1024]{0} all-gather-done((f32[256]{0}, f32[1024]{0}) %all-gather-start.4)\n"
    "}\n"
)

# An all-reduce offloaded to the SparseCore: call-start/call-done around it
TPU_SC_ALL_REDUCE = (
    "HloModule jit_psum, is_scheduled=true, num_partitions=8\n\n"
    + _ADD
    + "\n%sparsecore_all_reduce (param_0: f32[8192]) -> f32[8192] {\n"
    "  %param_0 = f32[8192]{0:T(1024)} parameter(0)\n"
    "  ROOT %all-reduce.5 = f32[8192]{0:T(1024)} all-reduce(%param_0), channel_id=2, "
    "replica_groups=[1,8]<=[8], use_global_device_ids=true, to_apply=%add\n"
    '}, execution_thread="sparsecore"\n\n'
    "ENTRY %main.4_spmd (param: f32[8192]) -> f32[8192] {\n"
    "  %param = f32[8192]{0:T(1024)} parameter(0)\n"
    "  %call-start = ((f32[8192]{0:T(1024)}), f32[8192]{0:T(1024)}, u32[]{:S(2)}) call-start(%param), "
    'async_execution_thread="sparsecore", to_apply=%sparsecore_all_reduce\n'
    "  ROOT %call-done = f32[8192]{0:T(1024)} call-done(%call-start)\n"
    "}\n"
)


# ----------------------------------------------------------------------------- trace tables


def _table(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=TABLE_COLUMNS).astype({"start_ns": float, "duration_ns": float})


def _gpu(kernels, module="jit_train", steps=2, devices=2) -> pd.DataFrame:
    """A GPU trace's events: per device and step (10 us apart), ``kernels`` as (name, hlo_op,
    start ns, duration ns + 100 ns per device), each its own launch."""
    rows, launch = [], 0
    for dev in range(devices):
        for step in range(steps):
            for name, op, start, dur in kernels:
                launch += 1
                rows.append(
                    (f"/device:GPU:{dev}", "Stream #20(nccl)", name, 10_000 * step + start, dur + 100 * dev, op,
                     module, None, launch, None, None, None)
                )  # fmt: skip
    return _table(rows)


# ----------------------------------------------------------------------------- 7: GPU async wrappers


def test_a_generic_async_wrapper_is_listed_under_the_wrapped_name_too():
    found = collective_executions(GPU_ASYNC)
    # %reduce-scatter-start = async-start(...), calls=%reduce-scatter.1 holding %reduce-scatter.2:
    # the pair (a TPU trace's names) and the wrapped instruction (a GPU trace's kernel)
    assert {n: k for n, k in found.items() if "reduce-scatter" in n} == {
        "reduce-scatter-start": ("reduce-scatter",),
        "reduce-scatter-done": ("reduce-scatter",),
        "reduce-scatter.2": ("reduce-scatter",),
    }
    # the dedicated async ops are their own instructions: nothing wrapped, nothing added
    assert "all-gather-start" in found and not any(n.startswith("all-gather.") for n in found)
    assert target_instructions(GPU_ALL_TO_ALL, "all_to_all") == {"all-to-all-start", "all-to-all-done", "all-to-all.3"}


def test_the_trace_decides_which_name_of_a_wrapped_collective_is_timed():
    # a GPU trace shows the kernel's name: the kernel only
    assert target_instructions(GPU_ASYNC, "reduce_scatter", seen={"reduce-scatter.2", "fusion.1"}) == {
        "reduce-scatter.2"
    }
    # a TPU trace shows the pair: the pair only
    assert target_instructions(GPU_ASYNC, "reduce_scatter", seen={"reduce-scatter-start", "reduce-scatter-done"}) == {
        "reduce-scatter-start",
        "reduce-scatter-done",
    }
    # a trace showing neither: the pair (and no time, as before)
    assert target_instructions(GPU_ALL_TO_ALL, "all_to_all", seen=set()) == {"all-to-all-start", "all-to-all-done"}
    # an all-gather is its own op: the trace changes nothing
    assert target_instructions(GPU_ASYNC, "all_gather", seen={"reduce-scatter.2"}) == {
        "all-gather-start",
        "all-gather-done",
    }


def test_a_gpu_reduce_scatter_kernel_named_after_the_wrapped_instruction_has_device_time():
    # the NCCL kernel carries hlo_op = reduce-scatter.2; durations 800 ns (device 0), 900 (device 1)
    ops = device_ops(_gpu([("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "reduce-scatter.2", 0, 800)]))
    names = target_instructions(GPU_ASYNC, "reduce_scatter", seen=set(ops["hlo_op"]))
    # before: {reduce-scatter-start, reduce-scatter-done}, which no GPU op is named: no time
    assert names == {"reduce-scatter.2"}
    assert device_samples(ops, names) == pytest.approx([850e-9, 850e-9])


def test_a_trace_with_both_the_pair_and_the_kernel_counts_the_kernel_once():
    # the pair's events (as if the runtime annotated its start and wait on the device too) span
    # 0-1000 ns around the kernel's 200-1000: summed with the kernel it would read 1800 ns
    table = _gpu(
        [
            ("async-start", "reduce-scatter-start", 0, 50),
            ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "reduce-scatter.2", 200, 700),
            ("async-done", "reduce-scatter-done", 950, 50),
        ],
        devices=1,
    )
    ops = device_ops(table, async_pairs(GPU_ASYNC))
    assert sorted(ops.loc[ops["is_async"], "hlo_op"].unique()) == ["reduce-scatter-start"]  # joined: 1000 ns
    names = target_instructions(GPU_ASYNC, "reduce_scatter", seen=set(ops["hlo_op"]))
    assert names == {"reduce-scatter.2"}
    assert device_samples(ops, names) == pytest.approx([700e-9, 700e-9])
    # both names (no trace to pick by) would count it twice: 1000 + 700
    both = target_instructions(GPU_ASYNC, "reduce_scatter")
    assert device_samples(ops, both) == pytest.approx([1700e-9, 1700e-9])


# ----------------------------------------------------------------------------- 8: rewritten collectives


def test_an_all_reduce_compiled_as_reduce_scatter_and_all_gather_is_timed_by_those_on_tpu():
    assert collective_executions(TPU_AR_SPLIT) == {
        "fusion.1": ("reduce-scatter",),
        "all-gather-start": ("all-gather",),
        "all-gather-done": ("all-gather",),
    }
    # before: set(), and the device estimator had no time
    assert target_instructions(TPU_AR_SPLIT, "all_reduce") == {"fusion.1", "all-gather-start", "all-gather-done"}
    assert compiled_as(TPU_AR_SPLIT, "all_reduce") == "compiled as reduce-scatter + all-gather: timed by those"
    # the ops a TPU trace gives, per device and step: the fusion 300 ns, the joined all-gather
    # 500 ns, a copy 50 ns left out: 800 ns a step
    rows = []
    for dev in range(2):
        for step in range(2):
            t0 = 10_000 * step
            for name, start, dur in (
                ("fusion.1", 0, 300),
                ("all-gather-start", 400, 20),
                ("all-gather-done", 880, 20),
                ("copy.2", 950, 50),
            ):
                rows.append((f"/device:TPU:{dev}", "XLA Ops", name, t0 + start, dur, *[None] * 7))
    ops = device_ops(_table(rows), async_pairs(TPU_AR_SPLIT))
    names = target_instructions(TPU_AR_SPLIT, "all_reduce", seen=set(ops["hlo_op"]))
    assert device_samples(ops, names) == pytest.approx([800e-9, 800e-9])
    # a reduce-scatter point of the same module runs as itself: no rewrite
    assert compiled_as(TPU_AR_SPLIT, "reduce_scatter") is None
    assert target_instructions(TPU_AR_SPLIT, "reduce_scatter") == {"fusion.1"}


def test_an_all_reduce_split_on_gpu_is_timed_by_both_kernels():
    assert compiled_as(GPU_AR_SPLIT, "all_reduce") == "compiled as reduce-scatter + all-gather: timed by those"
    ops = device_ops(
        _gpu(
            [
                ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "reduce-scatter.3", 0, 400),
                ("ncclDevKernel_AllGather_RING_LL", "all-gather-start.4", 500, 300),
            ],
            module="jit_psum",
        ),
        async_pairs(GPU_AR_SPLIT),
    )
    names = target_instructions(GPU_AR_SPLIT, "all_reduce", seen=set(ops["hlo_op"]))
    assert names == {"reduce-scatter.3", "all-gather-start.4", "all-gather-done.4"}
    # 400 + 300 ns (device 0), 500 + 400 ns (device 1): the median 800 ns a step
    assert device_samples(ops, names) == pytest.approx([800e-9, 800e-9])


def test_a_sparsecore_offload_is_timed_by_its_call_pair_and_says_so():
    assert target_instructions(TPU_SC_ALL_REDUCE, "all_reduce") == {"call-start", "call-done"}
    assert compiled_as(TPU_SC_ALL_REDUCE, "all_reduce") == (
        "offloaded as call-start/call-done (e.g. to the SparseCore): timed by that pair"
    )
    # the sample module's all-gather too; its all-reduce is a fusion on the TensorCore: as itself
    assert compiled_as(TPU_SPARSECORE, "all_gather").startswith("offloaded as call-start/call-done")
    assert compiled_as(TPU_SPARSECORE, "all_reduce") is None


def test_a_collective_the_step_does_not_run_is_timed_by_the_ones_it_does_and_nothing_by_none():
    # the SparseCore module runs an all-gather and an all-reduce, no all-to-all
    assert target_instructions(TPU_SPARSECORE, "all_to_all") == {"call-start", "call-done", "all-reduce-fusion"}
    assert compiled_as(TPU_SPARSECORE, "all_to_all") == "compiled as all-gather + all-reduce: timed by those"
    no_collective = "HloModule m\n\nENTRY %e (p: f32[8]) -> f32[8] {\n  ROOT %p = f32[8]{0} parameter(0)\n}\n"
    assert (
        target_instructions(no_collective, "all_gather") == set() and compiled_as(no_collective, "all_gather") is None
    )
    # timed whole: nothing to rewrite
    assert compiled_as(TPU_AR_SPLIT, "matmul") is None and compiled_as(TPU_AR_SPLIT, "all_reduce", grad=True) is None
    assert compiled_as(TPU_AR_SPLIT, "all_reduce", group=1) is None


def test_the_rewrite_reaches_summary_csv_and_the_caveats(tmp_path):
    line = "compiled as reduce-scatter + all-gather: timed by those"
    result = {
        "status": "ok",
        "point": "0_op=all_reduce",
        "point_dir": str(tmp_path),
        "spec": {"op": "all_reduce", "group_size": 4, "V_bytes": 4096.0, "rewritten": line},
        "environment": {"backend": "tpu", "device_count": 4},
        "timing": {"estimator": "device", "summary": {"median_s": 8e-7, "n": 2, "rel_ci_halfwidth": 0.01}},
    }
    row = summary_table([Result.from_json(result)]).iloc[0]
    assert row["rewritten"] == line and row["caveats"] == line and row["flags"] == ""
    plain = summary_table([Result.from_json(dict(result, spec={**result["spec"], "rewritten": None}))]).iloc[0]
    assert pd.isna(plain["rewritten"]) and plain["caveats"] == ""
    from runner.sweep.progress import point_line

    assert point_line(2, 9, "op=all_reduce", result).endswith(f"busbw 7.68 GB/s  ({line})")
