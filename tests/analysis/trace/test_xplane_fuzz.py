"""Damaged traces, as a disk, a copy or a hand edit leaves them: seeded mutations of a real
trace's bytes. The fast reader raises only TraceError and gives ProfileData's table wherever
ProfileData reads the file; the profile's HLO and program readers raise only ValueError;
``analyse`` on an empty trace is one ValueError. Bounded: a fixed number of mutations."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pandas as pd
import pytest
from xplane_reference import read_with_profiledata

from analysis.profiling.profile_load import analyse, load_hlo
from analysis.trace import TraceError, read_xplane
from analysis.trace.carried_hlo import hlo_protos
from analysis.trace.wire_schema import WireError

TRACE = Path(__file__).resolve().parents[4] / "shared" / "traces" / "gpu_mi355x_te_fused_attn.xplane.pb"


def _mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(b))
        how = rng.choice(["flip", "truncate", "delete", "insert", "duplicate", "ff"])
        if how == "flip":
            b[i] ^= 1 << rng.randrange(8)
        elif how == "truncate":
            del b[i:]
        elif how == "delete":
            del b[i : i + rng.randint(1, 16)]
        elif how == "insert":
            b[i:i] = rng.randbytes(rng.randint(1, 8))
        elif how == "duplicate":
            b[i:i] = b[i : i + rng.randint(1, 64)]
        else:
            b[i : i + 10] = b"\xff" * 10
        if not b:
            break
    return bytes(b)


@pytest.mark.skipif(not TRACE.exists(), reason="the shared traces are not here")
def test_mutated_traces_raise_one_error_or_read_as_profiledata_reads_them(tmp_path):
    rng = random.Random(27)
    data = TRACE.read_bytes()
    agreed = refused = 0
    for k in range(40):
        path = tmp_path / f"m{k}.xplane.pb"
        path.write_bytes(_mutate(data, rng))
        try:
            ref = read_with_profiledata(path, False)
        except TraceError:
            ref = None
        try:
            ours = read_xplane(path, False)
        except TraceError:
            ours = None
        if ref is None:
            assert ours is None, f"mutation {k}: the fast reader accepts a file ProfileData refuses"
            refused += 1
        else:
            assert ours is not None, f"mutation {k}: the fast reader refuses a file ProfileData reads"
            pd.testing.assert_frame_equal(ours, ref, check_exact=True)
            agreed += 1
        try:
            hlo_protos(path)
        except ValueError:
            pass
    assert agreed and refused  # both kinds of damage were tried


def test_an_empty_trace_is_one_value_error(tmp_path):
    path = tmp_path / "empty.xplane.pb"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match="the trace holds no events"):
        analyse([path], {"jit_f": "HloModule jit_f\nENTRY %e { ROOT %a = f32[8]{0} parameter(0) }"})


@pytest.mark.parametrize("blob", [b"\x0a\x05\x12\x03\x08\x01", b"\x0a\x80", b"\x0a\x09" + b"\xff" * 9])
def test_protobuf_that_is_not_a_message_is_a_value_error_when_reading_the_hlo(tmp_path, blob):
    """A field that runs past its message, a varint past the end: protobuf refuses them, and
    the profile's HLO reader says the file is not a readable trace."""
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(blob)
    with pytest.raises(WireError):
        hlo_protos(path)
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: not a readable xplane trace"):
        load_hlo(None, [path])


def test_a_number_where_the_metadata_should_be_is_skipped_as_protobuf_skips_it(tmp_path):
    """A plane whose stat metadata (field 5) holds a varint: protobuf reads a known field number
    with another wire type as an unknown field, and ProfileData reads the file as one empty
    plane; so the HLO reader finds no HLO (the hand-written walker it replaced refused it)."""
    path = tmp_path / "number.xplane.pb"
    path.write_bytes(b"\x0a\x02\x28\x01")
    assert hlo_protos(path) == []
    assert read_with_profiledata(path, False).empty
    with pytest.raises(ValueError, match="^the profile carries no HLO"):
        load_hlo(None, [path])
