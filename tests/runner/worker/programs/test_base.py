"""runner.worker.programs.base.LazyArray: a collective's inputs and reference, built slice by
slice. Its ``runs`` path (a contiguous range filled from one tiled period) must give exactly what
its element-by-element ``fn`` gives, for every slice a shard or the result check asks for."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.worker.programs.base import LazyArray, cyclic
from runner.worker.programs.collectives import _partial_sums


def _by_fn(a: LazyArray) -> LazyArray:
    return LazyArray(a.shape, a.dtype, a.fn)  # the same array without its runs


def _inputs(elems: int, p: int, dtype: str) -> list[LazyArray]:
    """Every LazyArray the collectives build, at one size, group and dtype."""
    np_dtype = np.dtype(dtype) if dtype != "bfloat16" else np.dtype("bfloat16")
    blocks, total = _partial_sums(elems, p, np_dtype, dtype)
    gather = LazyArray((elems,), np_dtype, lambda i: i % 7, lambda a, b: cyclic(a, b, 7, np_dtype))
    to_all = LazyArray((p, elems // p), np_dtype, lambda i: i % 7, lambda a, b: cyclic(a, b, 7, np_dtype))
    return [blocks, total, gather, to_all]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "int32"])
@pytest.mark.parametrize(("elems", "p"), [(1000, 8), (1001, 2), (7 * 64, 8), (5, 4)])
def test_every_shard_and_the_whole_array_match_the_element_by_element_values(dtype, elems, p):
    pytest.importorskip("ml_dtypes")
    for a in _inputs(elems, p, dtype):
        ref = _by_fn(a)
        rows = a.shape[0]
        cuts = [slice(k * rows // p, (k + 1) * rows // p) for k in range(p)]  # a 1-D or row sharding
        # and ranges that are not one contiguous run: two rows' middles, every other element
        odd = [(slice(0, 2), slice(1, 3)), (slice(1, None), slice(0, -1))] if len(a.shape) == 2 else [slice(1, -1, 2)]
        for index in [*cuts, slice(None), (slice(None),) * len(a.shape), *odd]:
            got, want = a[index], ref[index]
            assert got.dtype == want.dtype == a.dtype
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(ref))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    elems=st.integers(1, 300),
    p=st.sampled_from([1, 2, 3, 8]),
    which=st.integers(0, 3),
    data=st.data(),
)
def test_any_slice_matches_the_element_by_element_values(elems, p, which, data):
    a = _inputs(elems * p, p, "int32")[which]
    ref = _by_fn(a)
    index = tuple(
        slice(
            data.draw(st.integers(-n - 1, n + 1)),
            data.draw(st.integers(-n - 1, n + 1)),
            data.draw(st.sampled_from([None, 1, 2, -1])),
        )
        for n in a.shape
    )
    got, want = a[index], ref[index]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_an_allreduce_block_holds_its_device_number_added_to_the_small_integers():
    # int8 over 8 devices: period 7 with the offset fits (sum_inputs), so block k is base + k
    blocks, total = _partial_sums(10, 8, np.dtype("int8"), "int8")
    np.testing.assert_array_equal(blocks[30:40], np.arange(10) % 7 + 3)
    np.testing.assert_array_equal(total[:], sum(blocks[k * 10 : (k + 1) * 10].astype(int) for k in range(8)))
