"""The HLO modules a trace carries (:func:`analysis.trace.carried_hlo.hlo_protos`) where the
simplest file would not tell right from wrong: a plane without HLO protos before the one
with them, and lines protobuf could not parse as lines (the HLO reader never reads them).
Files written byte by byte (:mod:`xspace_bytes`, apart from the reader); no JAX.
"""

from __future__ import annotations

from xspace_bytes import bytes_field, field, meta_entry, plane_field

from analysis.trace.carried_hlo import hlo_protos


def _hlo_stat(metadata_id: int, module: bytes) -> bytes:
    """An XStat{metadata_id, bytes_value: HloProto{hlo_module: module}}."""
    return field(1, metadata_id) + bytes_field(6, bytes_field(1, module))


def test_a_plane_without_hlo_protos_before_the_metadata_plane_does_not_end_the_search(tmp_path):
    # the device plane first: its stat 7 is "step", so its event's stat 7 is no module
    device = plane_field(
        "/device:TPU:0", [meta_entry(1, "jit_d(2)", [_hlo_stat(7, b"NOT_A_MODULE")])], [meta_entry(7, "step")]
    )
    metadata = plane_field(
        "/host:metadata",
        [
            meta_entry(1, "jit_f(3)", [_hlo_stat(7, b"MODULE_F")]),
            meta_entry(2, "jit_g(4)", [_hlo_stat(7, b"G")]),
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
        [meta_entry(5, "jit_h(11)", [_hlo_stat(2, b"H")])],
        [meta_entry(2, "Hlo Proto")],
        bad_line,
    )
    path = tmp_path / "line.xplane.pb"
    path.write_bytes(metadata)
    assert hlo_protos(path) == [("jit_h(11)", b"H")]
