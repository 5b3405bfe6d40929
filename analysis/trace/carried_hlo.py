"""The HLO modules a trace carries: xprof's xplane keeps each compiled module as an
``xla.HloProto`` in the stat named ``Hlo Proto`` on an event metadata of its ``/host:metadata``
plane (the metadata's name: ``jit_step(18)``, the module and its program id).

Read by protobuf's parser against the schema of :mod:`.wire_schema` (its ``MetadataSpace`` view:
the planes' two metadata maps, the lines skipped), as the event reader reads the same file.
"""

from __future__ import annotations

from pathlib import Path

from analysis.trace.wire_schema import parse

_HLO_STAT = b"Hlo Proto"


def hlo_protos(path: str | Path) -> list[tuple[str, bytes]]:
    """``(event metadata name, serialized HloModuleProto)`` of each ``Hlo Proto`` stat in the
    file, in file order (an HloProto without a module is skipped). WireError (a ValueError)
    where protobuf refuses the bytes; UnicodeDecodeError (one too) for a name that is not UTF-8."""
    out = []
    for plane in parse(Path(path).read_bytes(), "MetadataSpace").planes:
        # every entry of the map as written (a repeated id too): the stat metadata ids named so
        ids = {e.value.id for e in plane.stat_metadata if e.value.name == _HLO_STAT}
        if not ids:
            continue
        for entry in plane.event_metadata:
            meta = entry.value
            for stat in meta.stats:
                if stat.metadata_id in ids:  # another oneof member set: bytes_value is b"", no module
                    proto = parse(stat.bytes_value, "HloProto")
                    if proto.HasField("hlo_module"):
                        out.append((meta.name.decode(), proto.hlo_module))
    return out
