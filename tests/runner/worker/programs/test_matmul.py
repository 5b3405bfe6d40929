"""A matmul's result check scales: its reference (:class:`runner.worker.programs.matmul.ExactProduct`)
is the exact product of the program's inputs, built one shard's slice at a time in O(elements of
the slice), never the O(n^3) float64 einsum it replaced (11.5 s of a 2048^3 point here), and
the check keeps its strength: every shard and every copy of a replicated result compared
element by element, exact for float32, 1e-2 relative for bfloat16, a NaN and a wrong shape
wrong. The wrong results are planted in real programs' outputs on 8 CPU devices."""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest

from runner.config.matmul_plan import parse_matmul
from runner.config.op_spec import MatmulOp
from runner.worker.programs import matmul
from runner.worker.programs.matmul import ExactProduct, _host
from runner.worker.result_check import check


def _einsum_reference(expr: str, dims: dict[str, int], dtype) -> np.ndarray:
    """What the reference was: NumPy's float64 einsum of the same inputs, cast to the dtype."""
    mm = parse_matmul(expr)
    names = list(dict.fromkeys(d.name for arr in (mm.lhs, mm.rhs, mm.out) for d in arr.dims))
    sub = lambda arr: "".join("abcdefgh"[names.index(d.name)] for d in arr.dims)  # noqa: E731
    a = _host(tuple(dims[d.name] for d in mm.lhs.dims), matmul.A_PERIOD, dtype)
    b = _host(tuple(dims[d.name] for d in mm.rhs.dims), matmul.B_PERIOD, dtype)
    eq = f"{sub(mm.lhs)},{sub(mm.rhs)}->{sub(mm.out)}"
    return np.einsum(eq, a.astype(np.float64), b.astype(np.float64)).astype(dtype)


SHAPES = [
    ("A[I, J_X] * B[J, K] -> C[I, K]", {"I": 13, "J": 11, "K": 9}),  # sizes that are not multiples of 7 or 5
    ("A[I, J] * B[J, K] -> C[I, K]", {"I": 35, "J": 70, "K": 14}),  # and sizes that are
    ("A[B, I, J] * B[B, J, K] -> C[B, I, K]", {"B": 3, "I": 5, "J": 6, "K": 4}),  # a batch dim
    ("A[B, I, J] * B[J, K, B] -> C[I, B, K]", {"B": 3, "I": 5, "J": 7, "K": 4}),  # batch last, output permuted
    ("A[I, J, L] * B[L, J, K] -> C[K, I]", {"I": 5, "J": 6, "K": 4, "L": 3}),  # two contracting dims
    ("A[J, I] * B[K, J] -> C[K, I]", {"I": 8, "J": 16, "K": 8}),  # transposed inputs
    ("X[B, D] * Y[D_X, F] -> Z[B, F]", {"B": 16, "D": 64, "F": 8}),  # Question 4
]


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16, np.int32, np.int8])
@pytest.mark.parametrize("expr, dims", SHAPES)
def test_the_reference_is_the_float64_einsum_it_replaced_bit_for_bit(expr, dims, dtype):
    want = _einsum_reference(expr, dims, dtype)
    ref = ExactProduct(parse_matmul(expr), dims, dtype)
    got = np.asarray(ref)
    assert ref.shape == want.shape and got.dtype == want.dtype and np.array_equal(got, want)
    # and any slice of it, as a shard asks (steps included)
    index = tuple(slice(1, n - 1, 2) for n in want.shape)
    assert np.array_equal(ref[index], want[index])
    assert np.array_equal(ref[(slice(2, 3),)], want[2:3])


def test_a_slice_of_a_huge_product_costs_only_the_slice():
    # 2^40 outputs, 2^20 terms each: only the 2 x 3 slice and one pass over J are built
    n = 2**20
    ref = ExactProduct(parse_matmul("A[I, J] * B[J, K] -> C[I, K]"), {"I": n, "J": n, "K": n}, np.float64)
    j = np.arange(n, dtype=np.int64)
    want = [[float(((i * n + j) % 7 * ((j * n + k) % 5)).sum()) for k in (5, 6, 7)] for i in (n - 2, n - 1)]
    assert ref[n - 2 :, 5:8].tolist() == want


def test_the_check_of_a_matmul_never_runs_an_einsum_on_the_host(monkeypatch):
    prog = matmul.build(
        MatmulOp("A[I, J_X] * B[J, K] -> C[I, K]", {"I": 64, "J": 64, "K": 64}, "auto", ("X",)),
        jax.make_mesh((8,), ("X",)),
        "float32",
        "default",
    )
    got = prog.fn(*prog.make_input())

    def no_einsum(*args, **kwargs):
        raise AssertionError("an O(n^3) einsum on the host")

    monkeypatch.setattr(np, "einsum", no_einsum)
    res = check(got, prog.reference(), "float32", prog.tolerance)
    assert res["passed"] is True and res["shards_checked"] == 8 and res["slices"] == 1


# ---------------------------------------------------------------- planted wrong results
def _run(expr: str, dims: dict[str, int], dtype: str = "float32", strategy: str = "auto"):
    """A real matmul program's result on 8 devices, with its reference."""
    mesh = jax.make_mesh((8,), ("X",))
    prog = matmul.build(MatmulOp(expr, dims, strategy, ("X",)), mesh, dtype, "default")
    return prog.fn(*prog.make_input()), prog.reference(), prog.tolerance


def _plant(got: jax.Array, device_index: int, change) -> jax.Array:
    """``got`` with ``change(shard)`` applied to the shard of the ``device_index``-th device."""
    shards = []
    for i, s in enumerate(got.addressable_shards):
        data = np.array(s.data, copy=True)
        if i == device_index:
            change(data)
        shards.append(jax.device_put(data, s.device))
    return jax.make_array_from_single_device_arrays(got.shape, got.sharding, shards)


SHARDED = ("A[I_X, J] * B[J, K] -> C[I_X, K]", {"I": 64, "J": 32, "K": 16})  # each device 8 rows of C
REPLICATED = ("A[I, J_X] * B[J_X, K] -> C[I, K]", {"I": 16, "J": 64, "K": 16})  # 8 copies of C


@pytest.mark.parametrize("strategy", ["auto", "allgather_then_matmul"])
def test_one_wrong_element_in_one_devices_shard_fails_that_device(strategy):
    got, want, tol = _run(*SHARDED, strategy=strategy)
    assert check(got, want, "float32", tol)["passed"] is True
    bad = _plant(got, 3, lambda s: s.__setitem__((7, 15), s[7, 15] + 1))
    res = check(bad, want, "float32", tol)
    wrong = [got.addressable_shards[3].device.id]
    # device 3 holds rows 24..31; C[31, 15] = sum_j ((31*32 + j) % 7) * ((j*16 + 15) % 5)
    c = sum(((31 * 32 + j) % 7) * ((j * 16 + 15) % 5) for j in range(32))
    assert (res["passed"], res["wrong_devices"], res["shards_checked"], res["slices"]) == (False, wrong, 8, 8)
    assert res["max_rel_error"] == pytest.approx(1 / c)


@pytest.mark.parametrize("strategy", ["auto", "matmul_then_allreduce"])
def test_one_wrong_element_in_one_copy_of_a_replicated_result_fails_that_copy(strategy):
    got, want, tol = _run(*REPLICATED, strategy=strategy)
    assert check(got, want, "float32", tol)["passed"] is True
    bad = _plant(got, 5, lambda s: s.__setitem__((0, 0), s[0, 0] - 1))
    res = check(bad, want, "float32", tol)
    c = sum((j % 7) * ((j * 16) % 5) for j in range(64))  # C[0, 0]
    wrong = [got.addressable_shards[5].device.id]
    assert (res["passed"], res["wrong_devices"], res["shards_checked"], res["slices"]) == (False, wrong, 8, 1)
    assert res["max_rel_error"] == pytest.approx(1 / c)


def test_a_nan_in_one_shard_fails_it():
    got, want, tol = _run(*SHARDED)
    res = check(_plant(got, 0, lambda s: s.__setitem__((0, 0), np.nan)), want, "float32", tol)
    assert res["passed"] is False and res["wrong_devices"] == [got.addressable_shards[0].device.id]
    assert res["max_rel_error"] == float("inf")


def test_a_result_of_the_wrong_shape_fails():
    got, _, tol = _run(*SHARDED)
    _, want, _ = _run(SHARDED[0], {"I": 64, "J": 32, "K": 8})  # the product with half the columns
    res = check(got, want, "float32", tol)
    assert res["passed"] is False and res["shards_checked"] == 8 and res["shape"] == [8, 16]
    assert len(res["wrong_devices"]) == 8 and res["max_rel_error"] is None


def test_bfloat16_keeps_its_elementwise_tolerance():
    got, want, tol = _run(*SHARDED, dtype="bfloat16")
    assert check(got, want, "bfloat16", tol)["passed"] is True
    C = float(np.asarray(got)[10, 3])  # device 1's shard, its row 2

    def scale(f):
        return lambda s: s.__setitem__((2, 3), ml_dtypes.bfloat16(C * f))

    assert check(_plant(got, 1, scale(1.05)), want, "bfloat16", tol)["passed"] is False
    assert check(_plant(got, 1, scale(1.004)), want, "bfloat16", tol)["passed"] is True


def test_a_sharded_result_is_compared_against_the_reference_slice_of_its_own_shard():
    # every shard right but placed on the wrong device (rows of device 0 on device 1): wrong
    got, want, tol = _run(*SHARDED)
    first = np.asarray(got.addressable_shards[0].data)
    shards = [
        jax.device_put(first if i == 1 else np.asarray(s.data), s.device) for i, s in enumerate(got.addressable_shards)
    ]
    swapped = jax.make_array_from_single_device_arrays(got.shape, got.sharding, shards)
    assert check(swapped, want, "float32", tol)["wrong_devices"] == [got.addressable_shards[1].device.id]
