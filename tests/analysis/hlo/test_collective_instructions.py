"""Tests for analysis.hlo: collectives read from HLO text (parse_collectives, collectives_frame).

The modules are in tests/data/hlo (see tests/helpers/hlo_samples.py): real `compile().as_text()` output
of jax 0.10.2 on 8 CPU devices (a 4x2 mesh, axes X,Y; device (x, y) has logical id 2*x + y) or
written by hand in the syntax XLA prints for GPU/TPU. Expected values are worked out in the
comments beside the assertions. Shapes, groups and fuzzing have their own test files.

The HLO parser on random and mutated text: only HloParseError, never another exception,
and no pathological slowness.
"""

from __future__ import annotations

import pytest
from hlo_samples import (
    COMMENTS_AND_LOOPS,
    CPU_ALL_GATHER,
    CPU_ALL_TO_ALL,
    CPU_GSPMD_MESH_GROUPS,
    CPU_PPERMUTE,
    CPU_REDUCE_SCATTER,
    CPU_WHILE_PSUM,
    GPU_ASYNC,
    MULTILINE,
    NEW_STYLE,
    OLD_STYLE,
    SUGARED_VARIADIC,
    TPU_MODULE,
    X_GROUPS,
    Y_GROUPS,
    MESH_4x2,
    one_op,
    only,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.hlo import (
    KINDS,
    Collective,
    HloParseError,
    collective_executions,
    collectives_frame,
    expand_iota_groups,
    group_mesh_axes,
    parse_collectives,
    permute_groups,
    shape_bytes,
)

# ----------------------------------------------------------------------------- real CPU text


def test_cpu_all_gather_over_all_devices():
    # f32[1024] per device gathered over all 8: operand 1024*4 = 4096 B, result 8192*4 = 32768 B.
    c = only(CPU_ALL_GATHER)
    assert c == Collective(
        name="all_gather.3",
        kind="all-gather",
        computation="main.0_spmd",
        is_async=False,
        dtype="f32",
        operand_bytes=4096,
        result_bytes=32768,
        replica_groups=((0, 1, 2, 3, 4, 5, 6, 7),),
        group_size=8,
        num_groups=1,
        source_target_pairs=None,
        dimensions=(0,),
        channel_id=1,
        op_name="jit(<lambda>)/shard_map/all_gather",
    )
    assert group_mesh_axes(c.replica_groups, MESH_4x2, ("X", "Y")) == ("X", "Y")


def test_cpu_reduce_scatter_over_x():
    # f32[8192] replicated, scattered over X (4): operand 32768 B, result 2048*4 = 8192 B.
    # The reducer computation %region_0.0 printed first is not a collective.
    c = only(CPU_REDUCE_SCATTER)
    assert (c.name, c.kind, c.computation) == ("reduce_scatter.7", "reduce-scatter", "main.0_spmd")
    assert (c.operand_bytes, c.result_bytes, c.dtype) == (32768, 8192, "f32")
    assert c.replica_groups == X_GROUPS and (c.group_size, c.num_groups) == (4, 2)
    assert c.dimensions == (0,) and c.channel_id == 1
    assert group_mesh_axes(c.replica_groups, MESH_4x2, ("X", "Y")) == ("X",)


def test_cpu_variadic_tuple_all_to_all():
    # Four operands f32[1,1024] (4096 B each, defined by fusions) -> 16384 B; the result is a
    # tuple of four f32[1,1024] -> 16384 B. No dimensions attribute on the tuple form.
    c = only(CPU_ALL_TO_ALL)
    assert (c.name, c.kind, c.operand_bytes, c.result_bytes) == ("all-to-all", "all-to-all", 16384, 16384)
    assert c.replica_groups == X_GROUPS and c.dimensions is None


def test_cpu_collective_permute():
    # ppermute over X: 8 pairs, two rings {0,2,4,6} and {1,3,5,7}; f32[1024] = 4096 B each way.
    c = only(CPU_PPERMUTE)
    assert c.kind == "collective-permute"
    assert c.source_target_pairs == ((0, 2), (2, 4), (4, 6), (6, 0), (1, 3), (3, 5), (5, 7), (7, 1))
    assert (c.replica_groups, c.group_size, c.num_groups) == (None, None, 8)
    assert (c.operand_bytes, c.result_bytes) == (4096, 4096)
    assert permute_groups(c.source_target_pairs) == X_GROUPS
    assert group_mesh_axes(permute_groups(c.source_target_pairs), MESH_4x2, ("X", "Y")) == ("X",)


def test_cpu_psum_in_while_body_counts_once():
    # fori_loop of 3 trips: one textual all-reduce in the body region_0.2_spmd; its operand is a
    # get-tuple-element f32[16] = 64 B. The parameter is a tuple (s32[], f32[16]).
    c = only(CPU_WHILE_PSUM)
    assert (c.name, c.computation, c.operand_bytes, c.result_bytes) == ("psum.7", "region_0.2_spmd", 64, 64)
    assert c.replica_groups == Y_GROUPS


def test_cpu_gspmd_mesh_axes_groups():
    # GSPMD prints mesh-axes groups: mesh a0=1,a1=2,a2=4 over devices iota(8).reshape(4,2).T
    # = [0,2,4,6,1,3,5,7]; grouping axis_1 pairs element j with element 4+j: {0,1},{2,3},...
    # = the Y groups. f32[16,8] = 512 B.
    c = only(CPU_GSPMD_MESH_GROUPS)
    assert c.replica_groups == Y_GROUPS and (c.group_size, c.num_groups) == (2, 4)
    assert (c.operand_bytes, c.result_bytes) == (512, 512)
    assert group_mesh_axes(c.replica_groups, MESH_4x2, ("X", "Y")) == ("Y",)


def test_several_modules_in_one_text():
    both = CPU_ALL_GATHER + "\n" + CPU_REDUCE_SCATTER
    assert [c.name for c in parse_collectives(both)] == ["all_gather.3", "reduce_scatter.7"]


# ----------------------------------------------------------------------------- hand-made text


def test_old_style_inline_operand_shapes():
    ag, ar = parse_collectives(OLD_STYLE)
    # bf16[8192] = 16384 B gathered 4x -> bf16[32768] = 65536 B.
    assert (ag.name, ag.dtype, ag.operand_bytes, ag.result_bytes) == ("all-gather.1", "bf16", 16384, 65536)
    assert (ag.group_size, ag.num_groups, ag.channel_id) == (4, 1, 3)
    # replica_groups={} = all devices: header 1 replica x 4 partitions -> group of 4.
    assert (ar.replica_groups, ar.group_size, ar.num_groups) == (None, 4, 1)
    assert (ar.operand_bytes, ar.result_bytes) == (4096, 4096)  # 4*256*4
    # An explicit num_devices wins over the header.
    assert parse_collectives(OLD_STYLE, num_devices=8)[1].group_size == 8


def test_new_style_bare_names():
    rs, ar = parse_collectives(NEW_STYLE)
    # f32[64,8] = 2048 B scattered 4 ways -> f32[16,8] = 512 B; iota [1,4]<=[4] = {{0,1,2,3}}.
    assert (rs.computation, rs.operand_bytes, rs.result_bytes) == ("main", 2048, 512)
    assert rs.replica_groups == ((0, 1, 2, 3),) and rs.group_size == 4
    # The all-reduce's operand is the reduce-scatter (512 B); no channel_id; the header gives
    # 2 replicas x 2 partitions = 4 devices for replica_groups={}.
    assert (ar.operand_bytes, ar.channel_id, ar.group_size) == (512, None, 4)


def test_bare_instruction_snippet():
    # Lines pasted without a computation land in computation "": the operand is looked up
    # among them. f32[8192] = 32 KiB gathered over 8 -> f32[65536] = 256 KiB.
    snippet = (
        "%param.1 = f32[8192]{0} parameter(0)\n"
        "ROOT %all_gather.3 = f32[65536]{0} all-gather(%param.1), channel_id=1, "
        "replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}, use_global_device_ids=true\n"
    )
    c = only(snippet)
    assert (c.computation, c.operand_bytes, c.result_bytes, c.group_size) == ("", 32768, 262144, 8)
    with pytest.raises(HloParseError, match="param.1"):  # the operand's definition is missing
        parse_collectives(snippet.splitlines()[1])


def test_group_size_without_header_or_num_devices_is_unknown_but_it_is_one_group():
    text = "ENTRY e {\n  p = f32[8]{0} parameter(0)\n  ROOT ar = f32[8]{0} all-reduce(p), to_apply=add\n}\n"
    c = only(text)
    # no replica_groups: every device in ONE group, of a size nothing here states
    assert (c.replica_groups, c.group_size, c.num_groups) == (None, None, 1)
    assert only(text, num_devices=16).group_size == 16


def test_tpu_tiled_layouts_iota_groups_and_fusion():
    ar, ag, a2a = parse_collectives(TPU_MODULE)
    # Inside the fusion computation: bf16[256,1024] = 524288 B; groups of 2.
    assert (ar.name, ar.computation, ar.operand_bytes, ar.result_bytes) == (
        "all-reduce.7",
        "reduce-then-slice",
        524288,
        524288,
    )
    assert ar.replica_groups == ((0, 1), (2, 3))
    # bf16[512,1024] = 1 MiB -> bf16[512,2048] = 2 MiB; [2,2]<=[4] = {{0,1},{2,3}}.
    assert (ag.operand_bytes, ag.result_bytes, ag.dimensions) == (1048576, 2097152, (1,))
    assert ag.replica_groups == ((0, 1), (2, 3)) and ag.op_name == "jit(step)/reshard"
    # [2,2]<=[2,2]T(1,0) = {{0,2},{1,3}}; bf16[512,2,1024] = 2 MiB either side.
    assert a2a.replica_groups == ((0, 2), (1, 3))
    assert (a2a.operand_bytes, a2a.result_bytes, a2a.channel_id) == (2097152, 2097152, 2)


def test_gpu_async_pairs_counted_once_at_the_start():
    found = parse_collectives(GPU_ASYNC)
    # The reduce-scatter inside %reduce-scatter.1 is reported once, as its async-start.
    assert [(c.name, c.kind) for c in found] == [
        ("all-gather-start", "all-gather"),
        ("all-reduce-start", "all-reduce"),
        ("collective-permute-start", "collective-permute"),
        ("reduce-scatter-start", "reduce-scatter"),
        ("all-to-all-start", "all-to-all"),
    ]
    assert all(c.is_async and c.computation == "main" for c in found)
    ag, ar, cp, rs, a2a = found
    assert (ag.operand_bytes, ag.result_bytes, ag.group_size) == (1024, 8192, 8)  # f32[256] -> f32[2048]
    # [2,4]<=[8] = {{0,1,2,3},{4,5,6,7}}; f32[1024] = 4096 B.
    assert (ar.operand_bytes, ar.result_bytes) == (4096, 4096)
    assert ar.replica_groups == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert (cp.operand_bytes, cp.result_bytes, cp.num_groups, cp.group_size) == (2048, 2048, 4, None)
    assert cp.source_target_pairs == ((0, 1), (1, 2), (2, 3), (3, 0))
    # Wrapped: attributes come from the inner instruction; f32[8] = 32 B -> f32[1] = 4 B.
    assert (rs.operand_bytes, rs.result_bytes, rs.channel_id, rs.dimensions) == (32, 4, 7, (0,))
    assert rs.op_name == "jit(train)/psum_scatter"
    assert (a2a.dtype, a2a.operand_bytes, a2a.result_bytes) == ("bf16", 4096, 4096)


def test_async_start_without_done_reads_its_tuple():
    # Truncated text (no -done lines): the result is the start tuple's second element, except
    # all-reduce-start whose own shape is the result.
    dropped = ("-done", "%gte", "ROOT %tuple")
    lines = [ln for ln in GPU_ASYNC.splitlines() if not any(d in ln for d in dropped)]
    by_name = {c.name: c for c in parse_collectives("\n".join(lines))}
    assert by_name["all-gather-start"].result_bytes == 8192
    assert by_name["all-reduce-start"].result_bytes == 4096
    assert by_name["collective-permute-start"].result_bytes == 2048
    assert by_name["reduce-scatter-start"].result_bytes == 4
    assert by_name["all-to-all-start"].result_bytes == 4096


def test_sugared_variadic_async_reduce_scatter():
    # Operands 2 x 16*64*256*4 = 2 x 1 MiB; results 2 x 4*64*256*4 = 2 x 256 KiB.
    c = only(SUGARED_VARIADIC, num_devices=4)
    assert (c.name, c.kind, c.is_async) == ("rs-start", "reduce-scatter", True)
    assert (c.operand_bytes, c.result_bytes, c.group_size) == (2 * 1048576, 2 * 262144, 4)


def test_multiline_instructions_and_async_wrapper():
    # u32[64] = 256 B -> u32[16] = 64 B, reported once as the async start.
    c = only(MULTILINE)
    assert (c.name, c.kind, c.computation, c.is_async) == ("rs-start", "reduce-scatter", "main", True)
    assert (c.operand_bytes, c.result_bytes, c.group_size) == (256, 64, 4)


def test_comments_metadata_and_while_body():
    ar, a2a = parse_collectives(COMMENTS_AND_LOOPS)
    assert (ar.computation, ar.operand_bytes) == ("body", 512)  # f32[128]
    assert ar.op_name == 'jit(f)/while/body/"psum"{x, y}'
    assert ar.replica_groups == ((0, 1),)
    # Six operands from the signature (no parameter() lines): 5 x 4 B + 8 B = 28 B; same result.
    assert (a2a.operand_bytes, a2a.result_bytes) == (28, 28)


def test_ragged_all_to_all_and_collective_broadcast():
    # ragged-all-to-all sums all six operands: 2 x f32[32] (128 B each) + 4 x s32[2] (8 B each)
    # = 288 B; its result is the output buffer f32[32] = 128 B.
    text = """\
ENTRY e {
  in = f32[32]{0} parameter(0)
  out = f32[32]{0} parameter(1)
  io = s32[2]{0} parameter(2)
  ss = s32[2]{0} parameter(3)
  oo = s32[2]{0} parameter(4)
  rs = s32[2]{0} parameter(5)
  ra2a = f32[32]{0} ragged-all-to-all(in, out, io, ss, oo, rs), replica_groups={{0,1}}
  ROOT cb = f32[32]{0} collective-broadcast(ra2a), replica_groups={{0,1}}, channel_id=9
}
"""
    ra, cb = parse_collectives(text)
    assert (ra.kind, ra.operand_bytes, ra.result_bytes) == ("ragged-all-to-all", 288, 128)
    assert (cb.kind, cb.operand_bytes, cb.channel_id) == ("collective-broadcast", 128, 9)


def test_every_kind_is_recognised():
    for kind in KINDS:
        attr = "source_target_pairs={{0,1}}" if kind == "collective-permute" else "replica_groups={{0,1}}"
        c = only(one_op(kind, attr, dtype="s8[4]{0}"))
        assert (c.kind, c.operand_bytes, c.result_bytes) == (kind, 4, 4)


def test_non_collectives_and_lookalikes_are_ignored():
    text = """\
ENTRY e {
  p = f32[4]{0} parameter(0)
  all-gather = f32[4]{0} negate(p), metadata={op_name="all-gather(x)"}
  f = f32[4]{0} fusion(all-gather), kind=kLoop, calls=all-reduce.fused
  ROOT s = f32[4]{0} custom-call(f), custom_call_target="all-reduce("
}
"""
    assert parse_collectives(text) == []
    assert parse_collectives("") == []
    assert parse_collectives("just some log line\nno hlo here (") == []


def test_unresolvable_operand_and_bad_arguments_raise():
    text = "ENTRY e {\n  ROOT ar = f32[8]{0} all-reduce(nowhere), replica_groups={}\n}\n"
    with pytest.raises(HloParseError, match="nowhere"):
        parse_collectives(text)
    with pytest.raises(HloParseError):
        parse_collectives(b"HloModule m")  # type: ignore[arg-type]
    with pytest.raises(HloParseError):
        parse_collectives(OLD_STYLE, num_devices=0)
    with pytest.raises(HloParseError):
        parse_collectives(one_op("collective-permute", "source_target_pairs={{0,1,2}}"))


# ----------------------------------------------------------------------------- frame


def test_collectives_frame():
    found = parse_collectives(GPU_ASYNC) + parse_collectives(CPU_REDUCE_SCATTER)
    df = collectives_frame(found)
    assert list(df.columns) == [
        "name",
        "kind",
        "computation",
        "is_async",
        "dtype",
        "operand_bytes",
        "result_bytes",
        "replica_groups",
        "group_size",
        "num_groups",
        "source_target_pairs",
        "dimensions",
        "channel_id",
        "op_name",
    ]
    assert len(df) == 6
    assert df.loc[5, "replica_groups"] == "{{0,2,4,6},{1,3,5,7}}"
    assert df.loc[2, "source_target_pairs"] == "{{0,1},{1,2},{2,3},{3,0}}"
    assert df.loc[0, "dimensions"] == "{0}"
    assert df["group_size"].isna().tolist() == [False, False, True, False, False, False]
    assert str(df["channel_id"].dtype) == "Int64"
    assert df["operand_bytes"].tolist() == [1024, 4096, 2048, 32, 4096, 32768]
    assert list(collectives_frame([]).columns) == list(df.columns)
    with pytest.raises(HloParseError):
        collectives_frame(["not a collective"])


# ----------------------------------------------------------------------------- end to end


def test_end_to_end_on_8_cpu_devices(cpu_collectives_hlo):
    got = cpu_collectives_hlo  # tests/helpers/hlo_samples.py compiles it in a fresh JAX process
    # HLO groups name logical ids (positions in the mesh); on CPU make_mesh keeps physical ids
    # in that order too, so both layouts agree here.
    assert got["device_ids"] == MESH_4x2.tolist()
    mesh = MESH_4x2
    # 512 f32 = 2048 B in total; per-device operand sizes follow from the in_specs.
    expected = {  # kind: (axes, operand_bytes, result_bytes)
        "all-gather": (("X",), 2048 // 8, 2048 // 2),  # f32[64] gathered over X -> f32[256]
        "all-reduce": (("Y",), 2048 // 4, 2048 // 4),  # f32[128] summed over Y
        "reduce-scatter": (("X",), 2048, 2048 // 4),  # f32[512] -> f32[128]
        "all-to-all": (("X",), 2048 // 2, 2048 // 2),  # f32[256], as 4 tuple pieces
        "collective-permute": (("X",), 2048 // 8, 2048 // 8),
    }
    for kind, text in got["texts"].items():
        c = only(text)
        axes, operand_bytes, result_bytes = expected[kind]
        assert (c.kind, c.dtype) == (kind, "f32")
        assert (c.operand_bytes, c.result_bytes) == (operand_bytes, result_bytes), kind
        groups = c.replica_groups if kind != "collective-permute" else permute_groups(c.source_target_pairs)
        assert group_mesh_axes(groups, mesh, got["axes"]) == axes, kind


VALID = "\n".join([CPU_REDUCE_SCATTER, OLD_STYLE, NEW_STYLE, TPU_MODULE, GPU_ASYNC, MULTILINE, COMMENTS_AND_LOOPS])
HLO_BITS = [
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ",",
    "=",
    "%",
    '"',
    "\\",
    "/*",
    "*/",
    "\n",
    " ",
    "ROOT ",
    "ENTRY ",
    "f32[8]{0}",
    "all-gather(",
    "-start",
    "-done",
    "replica_groups=",
    "{{0,1}}",
    "[2,2]<=[4]",
    "T(1,0)",
    "<=",
    "mesh[a=2]",
    "async-start(",
    "calls=",
    "HloModule x",
    "s4[",
    "?",
    "9" * 40,
]


def _only_parse_errors(fn, *args) -> None:
    try:
        fn(*args)
    except HloParseError:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(HLO_BITS), st.characters()), max_size=120).map("".join))
def test_random_text_raises_only_hlo_parse_error(text):
    for fn in (parse_collectives, collective_executions, shape_bytes, expand_iota_groups):
        _only_parse_errors(fn, text)


@st.composite
def mutated_module(draw):
    text = VALID
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = min(len(text), i + draw(st.integers(0, 40)))
        op = draw(st.sampled_from(["delete", "insert", "duplicate", "replace"]))
        if op == "delete":
            text = text[:i] + text[j:]
        elif op == "insert":
            text = text[:i] + draw(st.sampled_from(HLO_BITS)) + text[i:]
        elif op == "duplicate":
            text = text[:j] + text[i:j] + text[j:]
        else:
            text = text[:i] + draw(st.text(max_size=5)) + text[j:]
    return text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_module())
def test_mutated_modules_raise_only_hlo_parse_error(text):
    try:
        found = parse_collectives(text)
    except HloParseError:
        found = []
    assert all(c.kind in KINDS and c.operand_bytes >= 0 and c.result_bytes >= 0 for c in found)
    try:  # what runs the collectives: every name maps to collective kinds, never anything else
        runs = collective_executions(text)
    except HloParseError:
        runs = {}
    assert all(kinds and set(kinds) <= set(KINDS) for kinds in runs.values())


def test_valid_corpus_parses_and_scales():
    assert len(parse_collectives(VALID)) == 1 + 2 + 2 + 3 + 5 + 1 + 2
    # A big dump (thousands of instructions, about 15k lines) finds every collective; its
    # parse rate is a figure of tests/bench/run.py, not a pass/fail here.
    assert len(parse_collectives(VALID * 60)) == 16 * 60


def test_a_long_string_or_comment_costs_memory_in_proportion_to_the_text():
    """A 2 MB op_name and a 1 MB comment on one line: the string and comment regexes keep no
    backtracking state per character (the old ones peaked at 62 x the text here, 2.7 GB for a
    20 MB literal); the peak allocation stays within 8 x the text."""
    import tracemalloc

    lit = "a," * 1_000_000
    meta = f'metadata={{op_name="{lit}"}}'
    text = (
        f"HloModule m\n\nENTRY %e {{\n  %a = f32[8]{{0}} parameter(0), {meta} /* {'b' * 1_000_000} */\n"
        f"  ROOT %g = f32[16]{{0}} all-gather(%a), replica_groups={{{{0,1}}}}, dimensions={{0}}, {meta}\n}}\n"
    )
    tracemalloc.start()
    try:
        found = parse_collectives(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(c.kind, c.result_bytes, c.op_name == lit) for c in found] == [("all-gather", 64, True)]
    assert peak < 8 * len(text)


def test_a_shape_too_large_for_any_buffer_is_a_parse_error_not_an_overflow():
    assert shape_bytes("f32[99999999999,40]") == 99999999999 * 40 * 4  # large but countable: exact
    assert shape_bytes("s4[3]") == 2  # 12 bits round up to whole bytes
    huge = "f32[" + ",".join(["9" * 30] * 12) + "]"  # 10^360 elements: a float division overflowed
    with pytest.raises(HloParseError, match=r"more than 2\*\*60 elements"):
        shape_bytes(huge)
    with pytest.raises(HloParseError, match=r"more than 2\*\*60 elements"):
        shape_bytes("u8[1152921504606846977]")  # 2**60 + 1
