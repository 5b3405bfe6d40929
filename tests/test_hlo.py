"""Tests for analysis.hlo: the HLO collective parser.

Every module below is either real `compile().as_text()` output of jax 0.10.2 on 8 CPU devices
(a 4x2 mesh, axes X,Y; device (x, y) has logical id 2*x + y) or written by hand in the
syntax XLA prints for GPU/TPU. Expected values are worked out in the comments beside them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.hlo import (
    KINDS,
    Collective,
    HloParseError,
    collectives_frame,
    expand_iota_groups,
    group_mesh_axes,
    parse_collectives,
    permute_groups,
    shape_bytes,
)

REPO = Path(__file__).resolve().parents[1]
MESH_4x2 = np.arange(8).reshape(4, 2)  # logical ids laid out as the X=4, Y=2 mesh
X_GROUPS = ((0, 2, 4, 6), (1, 3, 5, 7))  # fix y, vary x
Y_GROUPS = ((0, 1), (2, 3), (4, 5), (6, 7))  # fix x, vary y


def one_op(op: str, attrs: str, dtype: str = "f32[8]{0}") -> str:
    """A minimal entry computation: parameter p feeding one instruction `op(p), attrs`."""
    return f"ENTRY e {{\n  p = {dtype} parameter(0)\n  ROOT c = {dtype} {op}(p), {attrs}\n}}\n"


def only(text: str, **kw) -> Collective:
    found = parse_collectives(text, **kw)
    assert len(found) == 1, found
    return found[0]


# ----------------------------------------------------------------------------- real CPU text

# shard_map(lambda a: all_gather(a, ('X','Y'), tiled=True)), in P(('X','Y')), on f32[8192].
CPU_ALL_GATHER = r"""HloModule jit__lambda, is_scheduled=true, entry_computation_layout={(f32[1024]{0})->f32[8192]{0}}, num_partitions=8

FileNames
1 "/work/demo/gen.py"

FunctionNames
1 "<module>"
2 "<lambda>"

FileLocations
1 {file_name_id=1 function_name_id=1 line=21 end_line=21 column=8 end_column=8}
2 {file_name_id=1 function_name_id=2 line=10 end_line=10 column=24 end_column=24}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=1}
3 {file_location_id=2 parent_frame_id=2}


ENTRY %main.0_spmd (param.1: f32[1024]) -> f32[8192] {
  %param.1 = f32[1024]{0} parameter(0), sharding={devices=[8]<=[8]}, metadata={op_name="a"}
  ROOT %all_gather.3 = f32[8192]{0} all-gather(%param.1), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}, use_global_device_ids=true, metadata={op_name="jit(<lambda>)/shard_map/all_gather" stack_frame_id=3}
}

"""

# shard_map(lambda a: psum_scatter(a, 'X', tiled=True)), in P(), on f32[8192].
CPU_REDUCE_SCATTER = r"""HloModule jit__lambda, is_scheduled=true, entry_computation_layout={(f32[8192]{0})->f32[2048]{0}}, num_partitions=8

FileNames
1 "/work/demo/gen.py"

FunctionNames
1 "<module>"
2 "<lambda>"

FileLocations
1 {file_name_id=1 function_name_id=1 line=21 end_line=21 column=8 end_column=8}
2 {file_name_id=1 function_name_id=2 line=12 end_line=12 column=22 end_column=22}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=1}
3 {file_location_id=2 parent_frame_id=3}
4 {file_location_id=2 parent_frame_id=2}


%region_0.0 (reduce_scatter.0: f32[], reduce_scatter.1: f32[]) -> f32[] {
  %reduce_scatter.0 = f32[] parameter(0), metadata={op_name="reduce_scatter"}
  %reduce_scatter.1 = f32[] parameter(1), metadata={op_name="reduce_scatter"}
  ROOT %add.0 = f32[] add(%reduce_scatter.0, %reduce_scatter.1), metadata={op_name="add" stack_frame_id=3}
}

ENTRY %main.0_spmd (param.1: f32[8192]) -> f32[2048] {
  %param.1 = f32[8192]{0} parameter(0), sharding={replicated}, metadata={op_name="a"}
  ROOT %reduce_scatter.7 = f32[2048]{0} reduce-scatter(%param.1), channel_id=1, replica_groups={{0,2,4,6},{1,3,5,7}}, use_global_device_ids=true, dimensions={0}, to_apply=%region_0.0, metadata={op_name="jit(<lambda>)/shard_map/reduce_scatter" stack_frame_id=4}
}

"""

# shard_map(lambda a: all_to_all(a.reshape(4,-1), 'X', 0, 0, tiled=True)), in P('Y'), on f32[8192].
CPU_ALL_TO_ALL = r"""HloModule jit__lambda, is_scheduled=true, entry_computation_layout={(f32[4096]{0})->f32[4096]{0}}, num_partitions=8

FileNames
1 "/work/demo/gen.py"

FunctionNames
1 "<module>"
2 "<lambda>"

FileLocations
1 {file_name_id=1 function_name_id=1 line=21 end_line=21 column=8 end_column=8}
2 {file_name_id=1 function_name_id=2 line=14 end_line=14 column=40 end_column=40}
3 {file_name_id=1 function_name_id=2 line=14 end_line=14 column=21 end_column=21}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=1}
3 {file_location_id=3 parent_frame_id=1}
4 {file_location_id=2 parent_frame_id=2}
5 {file_location_id=3 parent_frame_id=2}


%fused_computation (param_0.1: f32[1,1024], param_1: f32[1,1024], param_2: f32[1,1024], param_3: f32[1,1024]) -> f32[4096] {
  %param_0.1 = f32[1,1024]{1,0} parameter(0)
  %param_1 = f32[1,1024]{1,0} parameter(1)
  %param_2 = f32[1,1024]{1,0} parameter(2)
  %param_3 = f32[1,1024]{1,0} parameter(3)
  %concatenate.1 = f32[4,1024]{1,0} concatenate(%param_0.1, %param_1, %param_2, %param_3), dimensions={0}, metadata={op_name="jit(<lambda>)/shard_map/all_to_all" stack_frame_id=5}
  ROOT %bitcast.3 = f32[4096]{0} bitcast(%concatenate.1), metadata={op_name="jit(<lambda>)/shard_map/all_to_all" stack_frame_id=5}
}

%fused_computation.1 (param_0.3: f32[4096]) -> f32[1,1024] {
  %param_0.3 = f32[4096]{0} parameter(0)
  %bitcast.4 = f32[4,1024]{1,0} bitcast(%param_0.3), metadata={op_name="a"}
  ROOT %slice.5 = f32[1,1024]{1,0} slice(%bitcast.4), slice={[3:4], [0:1024]}, metadata={op_name="jit(<lambda>)/shard_map/all_to_all" stack_frame_id=5}
}

%fused_computation.2 (param_0.5: f32[4096]) -> f32[1,1024] {
  %param_0.5 = f32[4096]{0} parameter(0)
  %bitcast.5 = f32[4,1024]{1,0} bitcast(%param_0.5), metadata={op_name="a"}
  ROOT %slice.6 = f32[1,1024]{1,0} slice(%bitcast.5), slice={[2:3], [0:1024]}, metadata={op_name="jit(<lambda>)/shard_map/all_to_all" stack_frame_id=5}
}

%fused_computation.3 (param_0.7: f32[4096]) -> f32[1,1024] {
  %param_0.7 = f32[4096]{0} parameter(0)
  %bitcast.6 = f32[4,1024]{1,0} bitcast(%param_0.7), metadata={op_name="a"}
  ROOT %slice.7 = f32[1,1024]{1,0} slice(%bitcast.6), slice={[1:2], [0:1024]}, metadata={op_name="jit(<lambda>)/shard_map/all_to_all" stack_frame_id=5}
}

%fused_computation.4 (param_0.9: f32[4096]) -> f32[1,1024] {
  %param_0.9 = f32[4096]{0} parameter(0)
  %slice.8 = f32[1024]{0} slice(%param_0.9), slice={[0:1024]}, metadata={op_name="jit(<lambda>)/shard_map/all_to_all" stack_frame_id=5}
  ROOT %bitcast.7 = f32[1,1024]{1,0} bitcast(%slice.8), metadata={op_name="jit(<lambda>)/shard_map/all_to_all" stack_frame_id=5}
}

ENTRY %main.0_spmd (param.1: f32[4096]) -> f32[4096] {
  %param.1 = f32[4096]{0} parameter(0), sharding={devices=[2,4]<=[4,2]T(1,0) last_tile_dim_replicate}, metadata={op_name="a"}
  %bitcast_slice_fusion.2 = f32[1,1024]{1,0} fusion(%param.1), kind=kLoop, calls=%fused_computation.3, metadata={op_name="jit(<lambda>)/shard_map/all_to_all" stack_frame_id=5}
  %slice_bitcast_fusion = f32[1,1024]{1,0} fusion(%param.1), kind=kLoop, calls=%fused_computation.4, metadata={op_name="jit(<lambda>)/shard_map/all_to_all" stack_frame_id=5}
  %bitcast_slice_fusion = f32[1,1024]{1,0} fusion(%param.1), kind=kLoop, calls=%fused_computation.1, metadata={op_name="jit(<lambda>)/shard_map/all_to_all" stack_frame_id=5}
  %bitcast_slice_fusion.1 = f32[1,1024]{1,0} fusion(%param.1), kind=kLoop, calls=%fused_computation.2, metadata={op_name="jit(<lambda>)/shard_map/all_to_all" stack_frame_id=5}
  %all-to-all = (f32[1,1024]{1,0}, f32[1,1024]{1,0}, f32[1,1024]{1,0}, f32[1,1024]{1,0}) all-to-all(%slice_bitcast_fusion, %bitcast_slice_fusion.2, %bitcast_slice_fusion.1, %bitcast_slice_fusion), channel_id=1, replica_groups={{0,2,4,6},{1,3,5,7}}, metadata={op_name="jit(<lambda>)/shard_map/all_to_all" stack_frame_id=5}
  %get-tuple-element.2 = f32[1,1024]{1,0} get-tuple-element(%all-to-all), index=0
  %get-tuple-element.4 = f32[1,1024]{1,0} get-tuple-element(%all-to-all), index=1
  %get-tuple-element.5 = f32[1,1024]{1,0} get-tuple-element(%all-to-all), index=2
  %get-tuple-element.6 = f32[1,1024]{1,0} get-tuple-element(%all-to-all), index=3
  ROOT %concatenate_bitcast_fusion = f32[4096]{0} fusion(%get-tuple-element.2, %get-tuple-element.4, %get-tuple-element.5, %get-tuple-element.6), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(<lambda>)/shard_map/all_to_all" stack_frame_id=5}
}

"""

# shard_map(lambda a: ppermute(a, 'X', [(i, (i+1) % 4) ...])), in P(('X','Y')), on f32[8192].
CPU_PPERMUTE = r"""HloModule jit__lambda, is_scheduled=true, entry_computation_layout={(f32[1024]{0})->f32[1024]{0}}, num_partitions=8

FileNames
1 "/work/demo/gen.py"

FunctionNames
1 "<module>"
2 "<lambda>"

FileLocations
1 {file_name_id=1 function_name_id=1 line=21 end_line=21 column=8 end_column=8}
2 {file_name_id=1 function_name_id=2 line=15 end_line=15 column=20 end_column=20}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=1}
3 {file_location_id=2 parent_frame_id=2}


ENTRY %main.0_spmd (param.1: f32[1024]) -> f32[1024] {
  %param.1 = f32[1024]{0} parameter(0), sharding={devices=[8]<=[8]}, metadata={op_name="a"}
  ROOT %ppermute.3 = f32[1024]{0} collective-permute(%param.1), channel_id=1, source_target_pairs={{0,2},{2,4},{4,6},{6,0},{1,3},{3,5},{5,7},{7,1}}, metadata={op_name="jit(<lambda>)/shard_map/ppermute" stack_frame_id=3}
}

"""

# shard_map(lambda x: fori_loop(0, 3, lambda i, c: psum(c, 'Y') * 0.5, x)), in P('X'), on f32[64].
CPU_WHILE_PSUM = r"""HloModule jit_body, is_scheduled=true, entry_computation_layout={(f32[16]{0})->f32[16]{0}}, num_partitions=8

FileNames
1 "/work/demo/gen2.py"

FunctionNames
1 "<module>"
2 "body"
3 "body.<locals>.<lambda>"

FileLocations
1 {file_name_id=1 function_name_id=1 line=17 end_line=17 column=28 end_column=28}
2 {file_name_id=1 function_name_id=2 line=14 end_line=14 column=11 end_column=11}
3 {file_name_id=1 function_name_id=3 line=14 end_line=14 column=48 end_column=48}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=1}
3 {file_location_id=2 parent_frame_id=3}
4 {file_location_id=2 parent_frame_id=4}
5 {file_location_id=3 parent_frame_id=5}
6 {file_location_id=3 parent_frame_id=1}
7 {file_location_id=3 parent_frame_id=7}
8 {file_location_id=2 parent_frame_id=2}
9 {file_location_id=2 parent_frame_id=9}
10 {file_location_id=2 parent_frame_id=10}
11 {file_location_id=3 parent_frame_id=11}


%region_1.0 (psum.1: f32[], psum.4: f32[]) -> f32[] {
  %psum.1 = f32[] parameter(0), metadata={op_name="while/body/closed_call/psum"}
  %psum.4 = f32[] parameter(1), metadata={op_name="while/body/closed_call/psum"}
  ROOT %add.2 = f32[] add(%psum.1, %psum.4), metadata={op_name="add" stack_frame_id=7}
}

%fused_computation (param_0: f32[16]) -> f32[16] {
  %param_0 = f32[16]{0} parameter(0)
  %constant.2.clone.1 = f32[] constant(0.5), metadata={op_name="jit(body)/shard_map" stack_frame_id=1}
  %closed_call.3 = f32[16]{0} broadcast(%constant.2.clone.1), dimensions={}, metadata={op_name="jit(body)/shard_map/while/body/closed_call" stack_frame_id=10}
  ROOT %mul.4 = f32[16]{0} multiply(%param_0, %closed_call.3), metadata={op_name="jit(body)/shard_map/while/body/closed_call/mul" stack_frame_id=11}
}

%wrapped_add_computation (param_0.1: s32[], param_1.2: s32[]) -> s32[] {
  %param_0.1 = s32[] parameter(0)
  %param_1.2 = s32[] parameter(1)
  ROOT %add.5 = s32[] add(%param_0.1, %param_1.2), metadata={op_name="jit(body)/shard_map/while/body/add" stack_frame_id=10}
}

%region_0.2_spmd (param: (s32[], f32[16])) -> (s32[], f32[16]) {
  %param = (s32[], f32[16]{0}) parameter(0), metadata={op_name="jit(body)/shard_map" stack_frame_id=1}
  %constant.1.clone = s32[] constant(1), metadata={op_name="jit(body)/shard_map" stack_frame_id=1}
  %get-tuple-element.19 = f32[16]{0} get-tuple-element(%param), index=1
  %get-tuple-element.18 = s32[] get-tuple-element(%param), index=0
  %psum.7 = f32[16]{0} all-reduce(%get-tuple-element.19), channel_id=1, replica_groups={{0,1},{2,3},{4,5},{6,7}}, use_global_device_ids=true, to_apply=%region_1.0, metadata={op_name="jit(body)/shard_map/while/body/closed_call/psum" stack_frame_id=11}
  %wrapped_add = s32[] fusion(%get-tuple-element.18, %constant.1.clone), kind=kLoop, calls=%wrapped_add_computation, metadata={op_name="jit(body)/shard_map/while/body/add" stack_frame_id=10}
  %broadcast_multiply_fusion = f32[16]{0} fusion(%psum.7), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(body)/shard_map/while/body/closed_call/mul" stack_frame_id=11}
  ROOT %tuple.10 = (s32[], f32[16]{0}) tuple(%wrapped_add, %broadcast_multiply_fusion)
}

%wrapped_compare_computation (param_0.2: s32[], param_1.3: s32[]) -> pred[] {
  %param_0.2 = s32[] parameter(0)
  %param_1.3 = s32[] parameter(1)
  ROOT %lt.3 = pred[] compare(%param_0.2, %param_1.3), direction=LT, metadata={op_name="jit(body)/shard_map/while/cond/lt" stack_frame_id=10}
}

%region_2.3_spmd (param.1: (s32[], f32[16])) -> pred[] {
  %param.1 = (s32[], f32[16]{0}) parameter(0), metadata={op_name="jit(body)/shard_map" stack_frame_id=1}
  %constant.5.clone = s32[] constant(3), metadata={op_name="jit(body)/shard_map" stack_frame_id=1}
  %get-tuple-element.13 = s32[] get-tuple-element(%param.1), index=0, metadata={op_name="jit(body)/shard_map" stack_frame_id=1}
  ROOT %wrapped_compare = pred[] fusion(%get-tuple-element.13, %constant.5.clone), kind=kLoop, calls=%wrapped_compare_computation, metadata={op_name="jit(body)/shard_map/while/cond/lt" stack_frame_id=10}
}

ENTRY %main.5_spmd (param.3: f32[16]) -> f32[16] {
  %param.3 = f32[16]{0} parameter(0), sharding={devices=[4,2]<=[8] last_tile_dim_replicate}, metadata={op_name="x"}
  %constant.8.clone.1 = s32[] constant(0), metadata={op_name="jit(body)/shard_map" stack_frame_id=1}
  %copy.8 = f32[16]{0} copy(%param.3)
  %copy.9 = s32[] copy(%constant.8.clone.1)
  %tuple.8 = (s32[], f32[16]{0}) tuple(%copy.9, %copy.8)
  %while.9 = (s32[], f32[16]{0}) while(%tuple.8), condition=%region_2.3_spmd, body=%region_0.2_spmd, metadata={op_name="jit(body)/shard_map/while" stack_frame_id=9}, backend_config={"dynamic_variables":[],"known_induction_variable":{"tuple_index":"0"},"known_init_step":{"init":"0","step":"1"},"known_trip_count":{"n":"3"}}
  ROOT %get-tuple-element.15 = f32[16]{0} get-tuple-element(%while.9), index=1, metadata={op_name="jit(body)/shard_map/while" stack_frame_id=9}
}

"""

# jit(a @ b) with a: f32[16,32] P(None,'Y'), b: f32[32,8] P('Y',None), out P(): GSPMD, Auto axes.
CPU_GSPMD_MESH_GROUPS = r"""HloModule jit__lambda, is_scheduled=true, entry_computation_layout={(f32[16,16]{1,0}, f32[16,8]{1,0})->f32[16,8]{1,0}}, allow_spmd_sharding_propagation_to_parameters={false,false}, num_partitions=8

FileNames
1 "/work/demo/gen3.py"

FunctionNames
1 "<module>"
2 "show"
3 "show.<locals>.<lambda>"

FileLocations
1 {file_name_id=1 function_name_id=1 line=15 end_line=15 column=0 end_column=0}
2 {file_name_id=1 function_name_id=2 line=10 end_line=10 column=8 end_column=8}
3 {file_name_id=1 function_name_id=3 line=9 end_line=9 column=28 end_column=28}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=2}
3 {file_location_id=3 parent_frame_id=3}


%add.clone (x.1: f32[], y.1: f32[]) -> f32[] {
  %x.1 = f32[] parameter(0)
  %y.1 = f32[] parameter(1)
  ROOT %add.1 = f32[] add(%x.1, %y.1)
}

%fused_computation (param_0: f32[16,16], param_1: f32[16,8]) -> f32[16,8] {
  %param_0 = f32[16,16]{1,0} parameter(0)
  %param_1 = f32[16,8]{1,0} parameter(1)
  ROOT %dot.1 = f32[16,8]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(<lambda>)/dot_general" stack_frame_id=3}
}

ENTRY %main.0_spmd (param: f32[16,16], param.1: f32[16,8]) -> f32[16,8] {
  %param = f32[16,16]{1,0} parameter(0), sharding={devices=[1,2,4]<=[4,2]T(1,0) last_tile_dim_replicate}, metadata={op_name="a"}
  %param.1 = f32[16,8]{1,0} parameter(1), sharding={devices=[2,1,4]<=[4,2]T(1,0) last_tile_dim_replicate}, metadata={op_name="b"}
  %ynn_fusion = f32[16,8]{1,0} fusion(%param, %param.1), kind=kCustom, calls=%fused_computation, metadata={op_name="jit(<lambda>)/dot_general" stack_frame_id=3}, backend_config={"fusion_config":{"kind":"__ynn_fusion"},"outer_dimension_partitions":[]}
  ROOT %all-reduce = f32[16,8]{1,0} all-reduce(%ynn_fusion), channel_id=1, replica_groups=mesh['axis_0'=1,'axis_1'=2,'axis_2'=4], device_ids=([4,2]T(1,0)) {'axis_1'}, use_global_device_ids=true, to_apply=%add.clone, metadata={op_name="jit(<lambda>)/dot_general" stack_frame_id=3}
}

"""


def test_cpu_all_gather_over_all_devices():
    # f32[1024] per device gathered over all 8: operand 1024*4 = 4096 B, result 8192*4 = 32768 B.
    c = only(CPU_ALL_GATHER)
    assert c == Collective(
        name="all_gather.3", kind="all-gather", computation="main.0_spmd", is_async=False,
        dtype="f32", operand_bytes=4096, result_bytes=32768,
        replica_groups=((0, 1, 2, 3, 4, 5, 6, 7),), group_size=8, num_groups=1,
        source_target_pairs=None, dimensions=(0,), channel_id=1,
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


@pytest.mark.parametrize(
    "spec, expected",
    [
        # 4x2 mesh, group over axis 'b' of mesh[a=4,b=2] in iota order: the Y groups.
        ("mesh['a'=4,'b'=2] {'b'}", Y_GROUPS),
        ("mesh[a=4,b=2] {a}", X_GROUPS),
        ("mesh[a=4,b=2] {a,b}", ((0, 1, 2, 3, 4, 5, 6, 7),)),
        # 2x2x2 mesh X,Y,Z; ids 4x+2y+z; grouping X and Z fixes y: {0,1,4,5}, {2,3,6,7}.
        ("mesh['axis_0'=1,'axis_1'=4,'axis_2'=2], device_ids=([2,2,2]T(0,2,1)) {'axis_1'}",
         ((0, 1, 4, 5), (2, 3, 6, 7))),
        # sub-axis a:(1)2 of a=8 is the major half: reshape [1,2,4], vary the 2: {0,4},{1,5},...
        ("mesh[a=8] {a:(1)2}", ((0, 4), (1, 5), (2, 6), (3, 7))),
        ("mesh[a=8] {a:(2)2}", ((0, 2), (1, 3), (4, 6), (5, 7))),
        ("mesh[a=8] {a:(1)2,a:(4)2}", ((0, 1, 4, 5), (2, 3, 6, 7))),
        # explicit device order [[0,4,1,5],[2,6,3,7]]: columns are the groups over a.
        ("mesh[a=2,b=4], device_ids=(0,4,1,5,2,6,3,7) {a}", ((0, 2), (4, 6), (1, 3), (5, 7))),
        # [2,4]T(1,0) = iota(8).reshape(2,4).T = [0,4,1,5,2,6,3,7]: the same mesh as above.
        ("mesh[a=2,b=4], device_ids=([2,4]T(1,0)) {a}", ((0, 2), (4, 6), (1, 3), (5, 7))),
    ],
)
def test_mesh_axes_replica_groups(spec, expected):
    assert only(one_op("all-reduce", f"replica_groups={spec}, to_apply=add")).replica_groups == expected


def test_several_modules_in_one_text():
    both = CPU_ALL_GATHER + "\n" + CPU_REDUCE_SCATTER
    assert [c.name for c in parse_collectives(both)] == ["all_gather.3", "reduce_scatter.7"]


# ----------------------------------------------------------------------------- hand-made text

# Older printers put operand shapes inline and names behind '%'. The header says 4 partitions.
OLD_STYLE = """\
HloModule old_style, num_partitions=4

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add = f32[] add(f32[] %x, f32[] %y)
}

ENTRY %main (p0: bf16[8192], p1: f32[4,256]) -> (bf16[32768], f32[4,256]) {
  %p0 = bf16[8192]{0} parameter(0)
  %p1 = f32[4,256]{1,0} parameter(1)
  %all-gather.1 = bf16[32768]{0} all-gather(bf16[8192]{0} %p0), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  %all-reduce.2 = f32[4,256]{1,0} all-reduce(f32[4,256]{1,0} %p1), channel_id=4, replica_groups={}, to_apply=%add
  ROOT %tuple = (bf16[32768]{0}, f32[4,256]{1,0}) tuple(bf16[32768]{0} %all-gather.1, f32[4,256]{1,0} %all-reduce.2)
}
"""


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


# Newer printers drop '%' and may omit the computation signature.
NEW_STYLE = """\
HloModule new_style, replica_count=2, num_partitions=2

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT sum = f32[] add(x, y)
}

ENTRY main {
  p = f32[64,8]{1,0} parameter(0)
  rs = f32[16,8]{1,0} reduce-scatter(p), channel_id=1, replica_groups=[1,4]<=[4], dimensions={0}, to_apply=add
  ROOT ar = f32[16,8]{1,0} all-reduce(rs), replica_groups={}, to_apply=add
}
"""


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


def test_groups_without_header_or_num_devices_are_unknown():
    text = "ENTRY e {\n  p = f32[8]{0} parameter(0)\n  ROOT ar = f32[8]{0} all-reduce(p), to_apply=add\n}\n"
    c = only(text)
    assert (c.replica_groups, c.group_size, c.num_groups) == (None, None, None)
    assert only(text, num_devices=16).group_size == 16


# TPU style: tiled layouts with memory spaces, iota groups, a collective inside a fusion's
# computation, frontend_attributes, and backend_config JSON with braces and escapes in strings.
TPU_MODULE = r"""
HloModule jit_step, is_scheduled=true, entry_computation_layout={(bf16[512,1024]{1,0:T(8,128)(2,1)})->bf16[256,512]{1,0:T(8,128)(2,1)}}, num_partitions=4

%sum.clone (a.1: bf16[], b.1: bf16[]) -> bf16[] {
  %a.1 = bf16[]{:T(256)} parameter(0)
  %b.1 = bf16[]{:T(256)} parameter(1)
  ROOT %add.9 = bf16[]{:T(256)} add(%a.1, %b.1)
}

%reduce-then-slice (in.1: bf16[256,1024]) -> bf16[256,512] {
  %in.1 = bf16[256,1024]{1,0:T(8,128)(2,1)S(3)} parameter(0)
  %all-reduce.7 = bf16[256,1024]{1,0:T(8,128)(2,1)} all-reduce(%in.1), channel_id=5, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=%sum.clone, frontend_attributes={from-cross-replica-sharding="true"}, backend_config={"flag_configs":[],"barrier_config":{"barrier_type":"CUSTOM","id":"0"}}
  ROOT %slice.2 = bf16[256,512]{1,0:T(8,128)(2,1)} slice(%all-reduce.7), slice={[0:256], [0:512]}
}

ENTRY %main.3 (x: bf16[512,1024]) -> bf16[256,512] {
  %x = bf16[512,1024]{1,0:T(8,128)(2,1)} parameter(0), sharding={devices=[2,2]<=[4]}, metadata={op_name="x"}
  %all-gather = bf16[512,2048]{1,0:T(8,128)(2,1)S(3)} all-gather(%x), channel_id=1, replica_groups=[2,2]<=[4], dimensions={1}, use_global_device_ids=true, metadata={op_name="jit(step)/reshard" source_file="/tmp/step.py" source_line=7}, backend_config={"flag_configs":[],"collective_algorithm_config":{"emitter":"1DAllGatherNonMajorDim","debug":"\ngroup_size = 2 \nshard={1,0} \"quoted)\" "}}
  %bitcast.2 = bf16[512,2,1024]{2,0,1:T(8,128)(2,1)S(3)} bitcast(%all-gather)
  %all-to-all = bf16[512,2,1024]{2,0,1:T(8,128)(2,1)S(3)} all-to-all(%bitcast.2), channel_id=2, replica_groups=[2,2]<=[2,2]T(1,0), dimensions={1}, backend_config={"barrier_config":{"barrier_type":"GLOBAL","id":"-1"}}
  %copy-start = (bf16[512,2,1024]{2,0,1:T(8,128)(2,1)S(3)}, bf16[512,2,1024]{2,0,1:T(8,128)(2,1)}, u32[]{:S(2)}) copy-start(%all-to-all)
  %copy-done = bf16[512,2,1024]{2,0,1:T(8,128)(2,1)} copy-done(%copy-start)
  %bitcast.3 = bf16[256,1024]{1,0:T(8,128)(2,1)} bitcast(%copy-done)
  ROOT %fusion.4 = bf16[256,512]{1,0:T(8,128)(2,1)} fusion(%bitcast.3), kind=kCustom, calls=%reduce-then-slice
}
"""


def test_tpu_tiled_layouts_iota_groups_and_fusion():
    ar, ag, a2a = parse_collectives(TPU_MODULE)
    # Inside the fusion computation: bf16[256,1024] = 524288 B; groups of 2.
    assert (ar.name, ar.computation, ar.operand_bytes, ar.result_bytes) == (
        "all-reduce.7", "reduce-then-slice", 524288, 524288)
    assert ar.replica_groups == ((0, 1), (2, 3))
    # bf16[512,1024] = 1 MiB -> bf16[512,2048] = 2 MiB; [2,2]<=[4] = {{0,1},{2,3}}.
    assert (ag.operand_bytes, ag.result_bytes, ag.dimensions) == (1048576, 2097152, (1,))
    assert ag.replica_groups == ((0, 1), (2, 3)) and ag.op_name == "jit(step)/reshard"
    # [2,2]<=[2,2]T(1,0) = {{0,2},{1,3}}; bf16[512,2,1024] = 2 MiB either side.
    assert a2a.replica_groups == ((0, 2), (1, 3))
    assert (a2a.operand_bytes, a2a.result_bytes, a2a.channel_id) == (2097152, 2097152, 2)


# GPU style async pairs. Written as XLA's GPU pipeline prints them after optimisation.
GPU_ASYNC = """\
HloModule jit_train, is_scheduled=true, num_partitions=8

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add = f32[] add(f32[] %x, f32[] %y)
}

%reduce-scatter.1 (p.0: f32[8]) -> f32[1] {
  %p.0 = f32[8]{0} parameter(0)
  ROOT %reduce-scatter.2 = f32[1]{0} reduce-scatter(f32[8]{0} %p.0), channel_id=7, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}, to_apply=%add, metadata={op_name="jit(train)/psum_scatter"}
}

ENTRY %main (a: f32[256], b: f32[1024], c: f32[512], d: f32[8], e: bf16[64,32]) -> (f32[2048], f32[1024], f32[512], f32[1], bf16[64,32]) {
  %a = f32[256]{0} parameter(0)
  %b = f32[1024]{0} parameter(1)
  %c = f32[512]{0} parameter(2)
  %d = f32[8]{0} parameter(3)
  %e = bf16[64,32]{1,0} parameter(4)
  %all-gather-start = (f32[256]{0}, f32[2048]{0}) all-gather-start(f32[256]{0} %a), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}, use_global_device_ids=true, backend_config={"operation_queue_id":"0","wait_on_operation_queues":[],"collective_backend_config":{"is_sync":false,"no_parallel_custom_call":false}}
  %all-reduce-start = f32[1024]{0} all-reduce-start(f32[1024]{0} %b), channel_id=2, replica_groups=[2,4]<=[8], use_global_device_ids=true, to_apply=%add
  %collective-permute-start = (f32[512]{0}, f32[512]{0}, u32[], u32[]) collective-permute-start(f32[512]{0} %c), channel_id=3, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  %reduce-scatter-start = ((f32[8]{0}), f32[1]{0}) async-start(f32[8]{0} %d), calls=%reduce-scatter.1
  %all-to-all-start = ((bf16[64,32]{1,0}), (bf16[64,32]{1,0})) all-to-all-start(bf16[64,32]{1,0} %e), channel_id=5, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}
  %all-gather-done = f32[2048]{0} all-gather-done((f32[256]{0}, f32[2048]{0}) %all-gather-start)
  %all-reduce-done = f32[1024]{0} all-reduce-done(f32[1024]{0} %all-reduce-start)
  %collective-permute-done = f32[512]{0} collective-permute-done((f32[512]{0}, f32[512]{0}, u32[], u32[]) %collective-permute-start)
  %reduce-scatter-done = f32[1]{0} async-done(((f32[8]{0}), f32[1]{0}) %reduce-scatter-start)
  %all-to-all-done = (bf16[64,32]{1,0}) all-to-all-done(((bf16[64,32]{1,0}), (bf16[64,32]{1,0})) %all-to-all-start)
  %gte = bf16[64,32]{1,0} get-tuple-element((bf16[64,32]{1,0}) %all-to-all-done), index=0
  ROOT %tuple = (f32[2048]{0}, f32[1024]{0}, f32[512]{0}, f32[1]{0}, bf16[64,32]{1,0}) tuple(%all-gather-done, %all-reduce-done, %collective-permute-done, %reduce-scatter-done, %gte)
}
"""


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


# Sugared async reduce-scatter with two operands: start = ((operands), (results)).
SUGARED_VARIADIC = """\
HloModule m, is_scheduled=true

add.1 {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT add = f32[] add(x, y)
}

ENTRY entry {
  p0 = f32[16,64,256]{2,1,0} parameter(0)
  p1 = f32[16,64,256]{2,1,0} parameter(1)
  rs-start = ((f32[16,64,256]{2,1,0}, f32[16,64,256]{2,1,0}), (f32[4,64,256]{2,1,0}, f32[4,64,256]{2,1,0})) reduce-scatter-start(p0, p1), channel_id=1, replica_groups={}, dimensions={0}, to_apply=add.1
  rs-done = (f32[4,64,256]{2,1,0}, f32[4,64,256]{2,1,0}) reduce-scatter-done(rs-start)
  ROOT gte = f32[4,64,256]{2,1,0} get-tuple-element(rs-done), index=0
}
"""


def test_sugared_variadic_async_reduce_scatter():
    # Operands 2 x 16*64*256*4 = 2 x 1 MiB; results 2 x 4*64*256*4 = 2 x 256 KiB.
    c = only(SUGARED_VARIADIC, num_devices=4)
    assert (c.name, c.kind, c.is_async) == ("rs-start", "reduce-scatter", True)
    assert (c.operand_bytes, c.result_bytes, c.group_size) == (2 * 1048576, 2 * 262144, 4)


# Hand-written style: instructions split over lines, shape-less ops, execution threads.
MULTILINE = """\
HloModule multi

sum {
   lhs = u32[] parameter(0)
   rhs = u32[] parameter(1)
   ROOT add = u32[] add(lhs, rhs)
}

wrapped_rs (wp: u32[64]) -> u32[16] {
   wp = u32[64]{0} parameter(0)
   ROOT rs.1 = u32[16]{0} reduce-scatter(u32[64]{0} wp),
     replica_groups={{0,1,2,3}}, dimensions={0},
     to_apply=sum
}, execution_thread="main"

ENTRY main (data: u32[64]) -> u32[16] {
  data = u32[64]{0} parameter(0)
  neg = negate(data)
  rs-start = ((u32[64]{0}), u32[16]{0}) async-start(u32[64]{0} data),
    calls=wrapped_rs, backend_config={"collective_backend_config": {"is_sync":false}}
  ROOT rs-done = u32[16]{0} async-done(((u32[64]{0}), u32[16]{0}) rs-start),
    calls=wrapped_rs
}
"""


def test_multiline_instructions_and_async_wrapper():
    # u32[64] = 256 B -> u32[16] = 64 B, reported once as the async start.
    c = only(MULTILINE)
    assert (c.name, c.kind, c.computation, c.is_async) == ("rs-start", "reduce-scatter", "main", True)
    assert (c.operand_bytes, c.result_bytes, c.group_size) == (256, 64, 4)


# Comments inside tuples, nested quotes/braces in metadata, frontend_attributes, a while body.
# Operand shapes come from the computation signature only where no instruction defines them.
COMMENTS_AND_LOOPS = r"""
HloModule loops, num_partitions=2

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add = f32[] add(%x, %y)
}

%body (t: (s32[], f32[128])) -> (s32[], f32[128]) {
  %t = (s32[], f32[128]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %v = f32[128]{0} get-tuple-element(%t), index=1
  %ar = f32[128]{0} all-reduce(%v), channel_id=1, replica_groups={{0,1}}, to_apply=%add, metadata={op_name="jit(f)/while/body/\"psum\"{x, y}" source_file="a, b.py"}, frontend_attributes={_xla_stream="1",note="{not, groups}"}
  ROOT %out = (s32[], f32[128]{0}) tuple(%i, %ar)
}

%cond (t.1: (s32[], f32[128])) -> pred[] {
  %t.1 = (s32[], f32[128]{0}) parameter(0)
  %i.1 = s32[] get-tuple-element(%t.1), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i.1, %n), direction=LT
}

ENTRY %main (p: f32[128], q: f32[1], r: f32[1], s: f32[1], u: f32[1], w: f32[1], z: f32[2]) -> f32[128] {
  %p = f32[128]{0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[128]{0}) tuple(%zero, %p)
  %loop = (s32[], f32[128]{0}) while(%init), condition=%cond, body=%body
  %a2a = (f32[1]{0}, f32[1]{0}, f32[1]{0}, f32[1]{0}, f32[1]{0}, /*index=5*/f32[2]{0}) all-to-all(%q, %r, %s, %u, %w, /*index=5*/%z), channel_id=2, replica_groups={{0,1}}
  ROOT %res = f32[128]{0} get-tuple-element(%loop), index=1
}
"""


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


@pytest.mark.parametrize(
    "bad",
    [
        "replica_groups={{0,1},{2,x}}",  # not an int
        "replica_groups={0,1}",  # not a list of lists
        "replica_groups=[2,3]<=[8]",  # 6 != 8
        "replica_groups=mesh[a=2] {b}",  # axis not in the mesh
        "replica_groups=mesh[a=0] {a}",  # empty mesh
        "replica_groups=mesh[a=8] {a:(3)2}",  # sub-axis does not divide the axis
        "replica_groups=hello",
    ],
)
def test_malformed_groups_raise(bad):
    with pytest.raises(HloParseError):
        parse_collectives(one_op("all-reduce", f"{bad}, to_apply=add"))


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


# ----------------------------------------------------------------------------- shapes


@pytest.mark.parametrize(
    "shape, expected",
    [
        ("f32[1024,256]{1,0}", 1024 * 256 * 4),
        ("bf16[8,128]{1,0:T(8,128)(2,1)S(3)}", 8 * 128 * 2),
        ("(f32[4], bf16[2,2])", 16 + 8),
        ("(f32[4]{0}, (s32[2]{0}, u8[3]{0}))", 16 + 8 + 3),
        ("(f32[1]{0}, /*index=1*/f32[1]{0})", 8),
        ("pred[]", 1),
        ("token[]", 0),
        ("()", 0),
        ("u32[]{:S(2)}", 4),
        ("s4[3]", 2),  # 1.5 B rounds up
        ("u4[4]{0:E(4)}", 2),
        ("f8e4m3fn[10]", 10),
        ("f8e5m2[2,2]", 4),
        ("f4e2m1fn[3]", 2),
        ("c64[2]", 16),
        ("c128[1]", 16),
        ("f64[3]", 24),
        ("s16[3]", 6),
        ("f32[<=10,2]", 80),  # a bounded dynamic dim holds its bound
        ("f32[0,5]", 0),
    ],
)
def test_shape_bytes(shape, expected):
    assert shape_bytes(shape) == expected


@pytest.mark.parametrize("bad", ["f32[?]", "f33[2]", "f32[2", "(f32[2],", "", "hello", "f32[2] x", "(", ")", 3])
def test_shape_bytes_rejects(bad):
    with pytest.raises(HloParseError):
        shape_bytes(bad)


# ----------------------------------------------------------------------------- groups


@pytest.mark.parametrize(
    "spec, reference",
    [
        ("[2,4]<=[8]", np.arange(8).reshape(2, 4)),
        ("[2,2]<=[2,2]T(1,0)", np.arange(4).reshape(2, 2).T),
        ("[3,10]<=[6,5]T(1,0)", np.arange(30).reshape(6, 5).T.reshape(3, 10)),
        ("[4,2]<=[2,2,2]T(2,0,1)", np.arange(8).reshape(2, 2, 2).transpose(2, 0, 1).reshape(4, 2)),
        ("[1,8]<=[8]", np.arange(8).reshape(1, 8)),
    ],
)
def test_expand_iota_groups_matches_numpy(spec, reference):
    assert expand_iota_groups(spec) == tuple(tuple(int(d) for d in row) for row in reference)


@pytest.mark.parametrize(
    "bad",
    ["[2,4]<=[7]", "[8]<=[8]", "[2,2]<=[2,2]T(0,0)", "[2,2]<=[4]T(1,0)", "{{0,1}}", "", "[99999,99999]<=[99999,99999]"],
)
def test_expand_iota_groups_rejects(bad):
    with pytest.raises(HloParseError):
        expand_iota_groups(bad)


def test_group_mesh_axes_on_4x2():
    names = ("X", "Y")
    assert group_mesh_axes(X_GROUPS, MESH_4x2, names) == ("X",)
    assert group_mesh_axes(Y_GROUPS, MESH_4x2, names) == ("Y",)
    assert group_mesh_axes(None, MESH_4x2, names) == ("X", "Y")
    assert group_mesh_axes([list(range(8))], MESH_4x2.tolist(), names) == ("X", "Y")
    assert group_mesh_axes([[d] for d in range(8)], MESH_4x2, names) == ()
    with pytest.raises(HloParseError):  # {0,1,2,3} = x in {0,1} and all y: not whole axes
        group_mesh_axes(((0, 1, 2, 3), (4, 5, 6, 7)), MESH_4x2, names)
    with pytest.raises(HloParseError):  # leaves devices out
        group_mesh_axes(((0, 2, 4, 6),), MESH_4x2, names)
    with pytest.raises(HloParseError):  # mixed spans
        group_mesh_axes(((0, 1), (2, 4), (3, 5), (6, 7)), MESH_4x2, names)
    with pytest.raises(HloParseError):
        group_mesh_axes(X_GROUPS, MESH_4x2, ("X",))
    with pytest.raises(HloParseError):
        group_mesh_axes(((0, 9),), MESH_4x2, names)


def test_group_mesh_axes_uses_logical_positions():
    # HLO groups name logical ids (positions in the mesh), not physical device ids: with the
    # mesh's devices permuted, X groups are still {0,2,4,6},{1,3,5,7} in the HLO.
    physical = np.array([0, 2, 4, 6, 1, 3, 5, 7]).reshape(4, 2)
    logical = np.arange(physical.size).reshape(physical.shape)
    assert group_mesh_axes(X_GROUPS, logical, ("X", "Y")) == ("X",)
    with pytest.raises(HloParseError):
        group_mesh_axes(X_GROUPS, physical, ("X", "Y"))
    # 2x2x2: groups fixing y span X and Z.
    assert group_mesh_axes(((0, 1, 4, 5), (2, 3, 6, 7)), np.arange(8).reshape(2, 2, 2), "XYZ") == ("X", "Z")


# ----------------------------------------------------------------------------- frame


def test_collectives_frame():
    found = parse_collectives(GPU_ASYNC) + parse_collectives(CPU_REDUCE_SCATTER)
    df = collectives_frame(found)
    assert list(df.columns) == [
        "name", "kind", "computation", "is_async", "dtype", "operand_bytes", "result_bytes",
        "replica_groups", "group_size", "num_groups", "source_target_pairs", "dimensions",
        "channel_id", "op_name",
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


# ----------------------------------------------------------------------------- robustness

VALID = "\n".join(
    [CPU_REDUCE_SCATTER, OLD_STYLE, NEW_STYLE, TPU_MODULE, GPU_ASYNC, MULTILINE, COMMENTS_AND_LOOPS]
)
HLO_BITS = ["{", "}", "(", ")", "[", "]", ",", "=", "%", '"', "\\", "/*", "*/", "\n", " ", "ROOT ", "ENTRY ",
            "f32[8]{0}", "all-gather(", "-start", "-done", "replica_groups=", "{{0,1}}", "[2,2]<=[4]",
            "T(1,0)", "<=", "mesh[a=2]", "async-start(", "calls=", "HloModule x", "s4[", "?", "9" * 40]


def _only_parse_errors(fn, *args) -> None:
    try:
        fn(*args)
    except HloParseError:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(HLO_BITS), st.characters()), max_size=120).map("".join))
def test_random_text_raises_only_hlo_parse_error(text):
    for fn in (parse_collectives, shape_bytes, expand_iota_groups):
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
    start = time.perf_counter()
    try:
        found = parse_collectives(text)
    except HloParseError:
        found = []
    assert time.perf_counter() - start < 2.0  # no pathological backtracking
    assert all(c.kind in KINDS and c.operand_bytes >= 0 and c.result_bytes >= 0 for c in found)


def test_valid_corpus_parses_and_scales():
    assert len(parse_collectives(VALID)) == 1 + 2 + 2 + 3 + 5 + 1 + 2
    # A big dump (thousands of instructions) stays fast: about 15k lines here.
    big = VALID * 60
    start = time.perf_counter()
    assert len(parse_collectives(big)) == 16 * 60
    assert time.perf_counter() - start < 5.0


# ----------------------------------------------------------------------------- end to end

E2E_SCRIPT = textwrap.dedent("""
    import json, os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax, jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((4, 2), ("X", "Y"))
    ring = [(i, (i + 1) % 4) for i in range(4)]
    programs = {
        "all-gather": (lambda a: jax.lax.all_gather(a, "X", tiled=True), P(("X", "Y")), P("Y")),
        "all-reduce": (lambda a: jax.lax.psum(a, "Y"), P("X"), P("X")),
        "reduce-scatter": (lambda a: jax.lax.psum_scatter(a, "X", tiled=True), P(), P("X")),
        "all-to-all": (lambda a: jax.lax.all_to_all(a.reshape(4, -1), "X", 0, 0, tiled=True).reshape(-1), P("Y"), P("Y")),
        "collective-permute": (lambda a: jax.lax.ppermute(a, "X", ring), P(("X", "Y")), P(("X", "Y"))),
    }
    x = jnp.ones((512,), jnp.float32)
    out = {}
    for kind, (f, spec_in, spec_out) in programs.items():
        g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=spec_in, out_specs=spec_out, check_vma=False))
        out[kind] = g.lower(jax.device_put(x, NamedSharding(mesh, spec_in))).compile().as_text()
    print(json.dumps({"texts": out, "device_ids": mesh.device_ids.tolist(), "axes": list(mesh.axis_names)}))
""")


def test_end_to_end_on_8_cpu_devices():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run([sys.executable, "-c", E2E_SCRIPT], capture_output=True, text=True, env=env,
                          timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
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
