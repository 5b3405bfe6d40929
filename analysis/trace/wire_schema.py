"""The ``tensorflow.profiler.XSpace`` schema as protobuf message classes built at run time (the
wheels ship no ``xplane_pb2``), protobuf's own parse of a file against it, and the one case its
parse and the vectorised decoder (:mod:`.wire_decode`) part ways: group-typed fields.

The layout (xplane.proto)::

    XSpace   { repeated XPlane planes = 1; ... }
    XPlane   { int64 id = 1; string name = 2; repeated XLine lines = 3;
               map<int64, XEventMetadata> event_metadata = 4; map<int64, XStatMetadata> stat_metadata = 5; ... }
    XLine    { int64 id = 1; string name = 2; int64 timestamp_ns = 3; repeated XEvent events = 4; ... }
    XEvent   { int64 metadata_id = 1; oneof { int64 offset_ps = 2; int64 num_occurrences = 5; }
               int64 duration_ps = 3; repeated XStat stats = 4; }
    XStat    { int64 metadata_id = 1; oneof value { double double_value = 2; uint64 uint64_value = 3;
               int64 int64_value = 4; string str_value = 5; bytes bytes_value = 6; uint64 ref_value = 7; } }
    X*Metadata { int64 id = 1; string name = 2; string display_name = 4; repeated XStat stats = 5; ... }
    xla.HloProto { HloModuleProto hlo_module = 1; ... }   (an XStat's bytes_value, stat "Hlo Proto")

Two views of it, each naming only the fields its reader needs (protobuf skips the others as
unknown fields): ``Space`` keeps each event a raw byte string (:mod:`.xspace_wire` finds and
decodes them), ``MetadataSpace`` has no lines at all, for the HLO protos on a plane's event
metadata (:mod:`.carried_hlo`). Strings are ``bytes`` in both: names are decoded by the readers,
with the errors they choose.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

_PACKAGE = "shardlab.xspace_view"


class WireError(ValueError):
    """Bytes that are not a well-formed XSpace."""


class GroupField(WireError):
    """An event or stat holds a group-typed field: protobuf skips it as an unknown field, so
    the events are read again with their groups taken out (:func:`without_groups`)."""


def varint_at(data: bytes, i: int) -> tuple[int, int]:
    """The base-128 varint at ``data[i]`` and the position after it (IndexError past the end)."""
    b = data[i]
    if b < 0x80:
        return b, i + 1
    value, shift = b & 0x7F, 7
    while True:
        i += 1
        b = data[i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i + 1
        shift += 7
        if shift > 63:
            raise WireError("varint longer than 10 bytes")


def payload_at(data: bytes, wire: int, j: int) -> tuple[int, int]:
    """Where the payload of a field of wire type ``wire`` whose tag ends at ``j`` starts and
    ends: a varint's bytes, a length-delimited field's bytes after its length, 8 or 4 fixed
    bytes. WireError for the group wire types (3, 4) and the unused ones (6, 7)."""
    if wire == 0:
        return j, varint_at(data, j)[1]
    if wire == 2:
        n, j = varint_at(data, j)
        return j, j + n
    if wire in (1, 5):
        return j, j + (8 if wire == 1 else 4)
    raise WireError(f"unsupported wire type {wire}")


def without_groups(msg: bytes, depth: int = 0) -> bytes:
    """``msg`` (an XEvent, or with ``depth`` 1 an XStat) with every group-typed field removed,
    as protobuf skips them; an event's stats (field 4) are cleaned too. WireError on a group
    that does not end, or an end without a start."""
    out, i, end = bytearray(), 0, len(msg)
    while i < end:
        tag, j = varint_at(msg, i)
        wire = tag & 7
        if wire == 3:  # skip to the matching end-group, groups nested inside included
            open_, k = [tag >> 3], j  # the field numbers of the groups not yet ended
            while open_:
                if k >= end:
                    raise WireError("a group that does not end")
                t, k = varint_at(msg, k)
                w = t & 7
                if w == 3:
                    open_.append(t >> 3)
                elif w == 4:
                    if open_.pop() != t >> 3:  # protobuf refuses an end of another group
                        raise WireError("a group ended by another field's end-group")
                else:
                    k = payload_at(msg, w, k)[1]
            i = k
            continue
        if wire == 4:
            raise WireError("an end-group without its start")
        start, k = payload_at(msg, wire, j)
        if k > end:
            raise WireError("field runs past the end of its message")
        if wire == 2 and tag >> 3 == 4 and depth == 0:  # a stat: its groups go too
            stat = without_groups(msg[start:k], 1)
            out += _encode_varint(tag) + _encode_varint(len(stat)) + stat
        else:
            out += msg[i:k]
        i = k
    return bytes(out)


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _message_classes() -> dict:
    """{view message name: its class}, from one file descriptor built here."""
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="shardlab/xspace_view.proto", package=_PACKAGE, syntax="proto3")

    def message(name, *fields):
        m = fdp.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = f".{_PACKAGE}.{type_name}"
        return m

    one, many = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    message("Space", ("planes", 1, F.TYPE_MESSAGE, many, "Plane"))
    message(
        "Plane",
        ("id", 1, F.TYPE_INT64, one, None),
        ("name", 2, F.TYPE_BYTES, one, None),
        ("lines", 3, F.TYPE_MESSAGE, many, "Line"),
        ("event_metadata", 4, F.TYPE_MESSAGE, many, "MetadataEntry"),
        ("stat_metadata", 5, F.TYPE_MESSAGE, many, "MetadataEntry"),
    )
    # The two metadata maps as their wire form: repeated {key, value} entries (last one wins).
    message("MetadataEntry", ("key", 1, F.TYPE_INT64, one, None), ("value", 2, F.TYPE_MESSAGE, one, "Metadata"))
    # XEventMetadata's display_name (4) and stats (5) too (XStatMetadata has neither: both empty there)
    message(
        "Metadata",
        ("id", 1, F.TYPE_INT64, one, None),
        ("name", 2, F.TYPE_BYTES, one, None),
        ("display_name", 4, F.TYPE_BYTES, one, None),
        ("stats", 5, F.TYPE_MESSAGE, many, "Stat"),
    )
    stat = message(
        "Stat",
        ("metadata_id", 1, F.TYPE_INT64, one, None),
        ("double_value", 2, F.TYPE_DOUBLE, one, None),
        ("uint64_value", 3, F.TYPE_UINT64, one, None),
        ("int64_value", 4, F.TYPE_INT64, one, None),
        ("str_value", 5, F.TYPE_BYTES, one, None),
        ("bytes_value", 6, F.TYPE_BYTES, one, None),
        ("ref_value", 7, F.TYPE_UINT64, one, None),
    )
    stat.oneof_decl.add(name="value")
    for f in stat.field[1:]:
        f.oneof_index = 0
    message(
        "Line",
        ("id", 1, F.TYPE_INT64, one, None),
        ("name", 2, F.TYPE_BYTES, one, None),
        ("timestamp_ns", 3, F.TYPE_INT64, one, None),
        ("events", 4, F.TYPE_BYTES, many, None),
    )
    # The HLO protos' view: the lines (3), by far the file's bulk, are skipped unparsed.
    message("MetadataSpace", ("planes", 1, F.TYPE_MESSAGE, many, "MetadataPlane"))
    message(
        "MetadataPlane",
        ("event_metadata", 4, F.TYPE_MESSAGE, many, "MetadataEntry"),
        ("stat_metadata", 5, F.TYPE_MESSAGE, many, "MetadataEntry"),
    )
    hlo = message("HloProto", ("hlo_module", 1, F.TYPE_BYTES, one, None))  # an HloModuleProto, kept as bytes
    hlo.field[0].proto3_optional = True  # present even when empty, as a message field is
    hlo.oneof_decl.add(name="_hlo_module")
    hlo.field[0].oneof_index = 0
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {
        m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{m.name}"))
        for m in fdp.message_type
    }


_CLASSES: dict = {}


def parse(data: bytes, view: str = "Space"):
    """``data`` parsed by protobuf (its C parser, upb) as the message ``view`` of this schema
    (``Space``, ``MetadataSpace`` or ``HloProto``); WireError where protobuf refuses it."""
    if not _CLASSES:
        _CLASSES.update(_message_classes())
    msg = _CLASSES[view]()
    try:
        msg.ParseFromString(data)
    except DecodeError as exc:
        raise WireError(str(exc)) from exc
    return msg


def count_events(data: bytes) -> int:
    """How many events a serialized XSpace holds."""
    return sum(len(ln.events) for p in parse(data).planes for ln in p.lines)
