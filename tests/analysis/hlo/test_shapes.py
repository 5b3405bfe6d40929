"""Tests for analysis.hlo.shapes: the bytes of HLO shapes."""

from __future__ import annotations

import pytest

from analysis.hlo import HloParseError, shape_bytes


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
