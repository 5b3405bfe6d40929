"""The HLO modules a trace carries (``Hlo Proto`` stats on its metadata plane), read by
protobuf's parser against the trace reader's schema: on the real TPU and GPU traces, and on
XSpaces written here byte by byte (:mod:`xspace_bytes`, apart from the reader).

The HLO modules a trace carries (:func:`analysis.trace.carried_hlo.hlo_protos`) where the
simplest file would not tell right from wrong: a plane without HLO protos before the one
with them, and lines protobuf could not parse as lines (the HLO reader never reads them).
Files written byte by byte (:mod:`xspace_bytes`, apart from the reader); no JAX.
Pinned in issue 30's mutation check.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from xspace_bytes import bytes_field, field, meta_entry, plane_field, varint

from analysis.profiling.profile_load import program_modules
from analysis.trace.carried_hlo import hlo_protos

TRACES = Path(__file__).resolve().parents[4] / "shared" / "traces"

# (name, bytes of its HloModuleProto) of each module, in file order
REAL = {
    "tpu_v6e1_pallas_matmul": [("jit_matmul_optimized(17342868964687645945)", 17938)],
    "gpu_mi300x8_conv3d": [
        ("jit__unstack(7)", 2445),
        ("jit__threefry_split(5)", 24564),
        ("jit__normal(9)", 53698),
        ("jit__threefry_seed(3)", 1742),
        ("jit__multi_slice(13)", 5631),
        ("jit_convert_element_type(1)", 319),
        ("jit__normal(11)", 51718),
        ("jit_forward_3d_conv(15)", 3514),
    ],
    "gpu_mi355x_te_fused_attn": [
        ("jit_convert_element_type(15)", 807),
        ("jit_loss_fn(17)", 30685),
        ("jit_broadcast_in_dim(7)", 744),
        ("jit_convert_element_type(1)", 319),
        ("jit__normal(13)", 37659),
        ("jit__threefry_seed(3)", 1358),
        ("jit__threefry_fold_in(11)", 16049),
        ("jit_convert_element_type(9)", 319),
        ("jit__normal(5)", 43240),
    ],
    "gpu_v100_tf_bert_multiworker": [],  # TensorFlow: no HLO protos
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_the_real_traces_carry_their_modules(name):
    path = TRACES / f"{name}.xplane.pb"
    if not path.exists():
        pytest.skip("the shared traces are not here")
    got = hlo_protos(path)
    assert [(n, len(m)) for n, m in got] == REAL[name]
    assert all(m.startswith(b"\x0a") for _, m in got)  # HloModuleProto.name (field 1) first, as XLA writes it


def _hlo_stat(metadata_id: int, hlo_proto: bytes) -> bytes:
    return field(1, metadata_id) + bytes_field(6, hlo_proto)


HLO_ID, OTHER_ID = 7, 8
STATS = [meta_entry(HLO_ID, "Hlo Proto"), meta_entry(OTHER_ID, "other")]


def test_each_hlo_proto_stat_of_the_metadata_plane_in_file_order(tmp_path):
    metadata = plane_field(
        "/host:metadata",
        [
            meta_entry(1, "jit_f(3)", [_hlo_stat(HLO_ID, bytes_field(1, b"MODULE_F") + bytes_field(3, b"buffers"))]),
            meta_entry(2, "jit_g(4)", [_hlo_stat(OTHER_ID, bytes_field(1, b"NOT_HLO"))]),  # another stat
            meta_entry(3, "jit_h(5)", [field(1, HLO_ID) + bytes_field(5, b"\x0a\x01x")]),  # str_value, not bytes
            meta_entry(4, "jit_k(6)", [_hlo_stat(HLO_ID, bytes_field(3, b"buffers"))]),  # an HloProto without module
            meta_entry(5, "jit_e(9)", [_hlo_stat(HLO_ID, bytes_field(1, b""))]),  # an empty module is one still
        ],
        STATS,
        lines=bytes_field(3, field(2, "a line")),
    )
    # a device plane whose stat 7 is not "Hlo Proto": the ids are the plane's own
    device = plane_field("/device:TPU:0", [meta_entry(1, "jit_d(2)", [_hlo_stat(HLO_ID, bytes_field(1, b"D"))])], [])
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(metadata + device)
    assert hlo_protos(path) == [("jit_f(3)", b"MODULE_F"), ("jit_e(9)", b"")]
    assert program_modules(path) == {"3": "jit_f", "9": "jit_e"}


def test_a_group_field_in_the_metadata_is_skipped_as_protobuf_skips_it(tmp_path):
    """An unknown group-typed field (wire types 3 and 4) inside an event metadata: protobuf
    skips it, as ProfileData's parser does (the hand-written walker this replaced refused it)."""
    group = varint(9 << 3 | 3) + field(1, 1) + varint(9 << 3 | 4)
    meta = field(1, 1) + field(2, "jit_f(3)") + group + bytes_field(5, _hlo_stat(HLO_ID, bytes_field(1, b"M")))
    path = tmp_path / "g.xplane.pb"
    path.write_bytes(plane_field("/host:metadata", [field(1, 1) + bytes_field(2, meta)], STATS))
    assert hlo_protos(path) == [("jit_f(3)", b"M")]


def _module_stat(metadata_id: int, module: bytes) -> bytes:
    """An XStat{metadata_id, bytes_value: HloProto{hlo_module: module}}."""
    return field(1, metadata_id) + bytes_field(6, bytes_field(1, module))


def test_a_plane_without_hlo_protos_before_the_metadata_plane_does_not_end_the_search(tmp_path):
    # the device plane first: its stat 7 is "step", so its event's stat 7 is no module
    device = plane_field(
        "/device:TPU:0", [meta_entry(1, "jit_d(2)", [_module_stat(7, b"NOT_A_MODULE")])], [meta_entry(7, "step")]
    )
    metadata = plane_field(
        "/host:metadata",
        [
            meta_entry(1, "jit_f(3)", [_module_stat(7, b"MODULE_F")]),
            meta_entry(2, "jit_g(4)", [_module_stat(7, b"G")]),
        ],
        [meta_entry(7, "Hlo Proto")],
    )
    path = tmp_path / "two.xplane.pb"
    path.write_bytes(device + metadata)
    assert hlo_protos(path) == [("jit_f(3)", b"MODULE_F"), ("jit_g(4)", b"G")]


def test_lines_are_skipped_unparsed_so_a_line_that_is_no_xline_hides_no_module(tmp_path):
    # a line whose payload starts a group (field 1, wire type 3) it never ends: protobuf
    # refuses it as an XLine, but the HLO view has no lines and skips the field whole
    bad_line = bytes_field(3, b"\x0b\x08\x01")
    metadata = plane_field(
        "/host:metadata",
        [meta_entry(5, "jit_h(11)", [_module_stat(2, b"H")])],
        [meta_entry(2, "Hlo Proto")],
        bad_line,
    )
    path = tmp_path / "line.xplane.pb"
    path.write_bytes(metadata)
    assert hlo_protos(path) == [("jit_h(11)", b"H")]
