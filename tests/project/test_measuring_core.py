"""The measuring core pinned by exact expectations: the result check, the timing stop rule,
the median's interval, the fits' clamps, the bus-bandwidth factors and async spans.

Each test here was checked by planting the bug it guards against (see the README's
"Testing" section for the mutation check that found the gaps).
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from analysis.book.collectives import busbw_factor
from analysis.statistics.fit import fit_alpha_beta, fit_max_model
from analysis.statistics.stats import median_ci, median_ci_ranks, rel_ci_halfwidth, summarize
from analysis.trace.overlap import collective_spans


# ---------------------------------------------------------------- the result check
def _check():
    from runner.worker.result_check import check  # imports jax: only when a test needs it

    return check


def test_check_fails_on_one_wrong_float32_element():
    want = np.arange(4096, dtype=np.float32) % 7
    got = want.copy()
    assert _check()(got, want, "float32")["passed"] is True
    got[2049] += 1  # want[2049] = 2049 % 7 = 5
    res = _check()(got, want, "float32")
    assert res["passed"] is False and res["max_rel_error"] == pytest.approx(1 / 5)


def test_check_fails_on_one_wrong_last_element_of_a_2d_result():
    want = np.ones((8, 512), np.float32)
    got = want.copy()
    got[-1, -1] = 2.0
    assert _check()(got, want, "float32")["passed"] is False


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_check_16bit_floats_fail_at_5_percent_and_pass_at_half_a_percent(dtype):
    import jax.numpy as jnp
    import ml_dtypes  # noqa: F401 (jax's dtypes: bfloat16 as a NumPy type)

    want = (np.arange(1, 1025, dtype=np.float32) % 97 + 100).astype(jnp.dtype(dtype))
    off = want.astype(np.float32).copy()
    off[500] *= 1.05
    assert _check()(off.astype(jnp.dtype(dtype)), want, dtype)["passed"] is False
    near = want.astype(np.float32).copy()
    near[500] *= 1.005
    assert _check()(near.astype(jnp.dtype(dtype)), want, dtype)["passed"] is True


def test_check_fails_on_a_shape_mismatch():
    res = _check()(np.zeros(8, np.float32), np.zeros(16, np.float32), "float32")
    assert res["passed"] is False and res["shape"] == [8]


def _on_8_devices(want: np.ndarray, spec, plant=None):
    """``want`` as a jax.Array over 8 devices with PartitionSpec ``spec``, built shard by shard
    so that ``plant(device_index, shard)`` can make one device's shard (or copy) wrong."""
    import jax
    from jax.sharding import NamedSharding

    mesh = jax.make_mesh((8,), ("X",))
    sharding = NamedSharding(mesh, spec)
    shards = []
    for i, (device, index) in enumerate(sharding.addressable_devices_indices_map(want.shape).items()):
        shard = np.array(want[index], copy=True)
        if plant is not None:
            plant(i, shard)
        shards.append(jax.device_put(shard, device))
    return jax.make_array_from_single_device_arrays(want.shape, sharding, shards), [d.id for d in mesh.devices.flat]


def test_check_finds_one_wrong_element_in_one_shard():
    from jax.sharding import PartitionSpec as P

    want = np.arange(8 * 64, dtype=np.float32) % 7
    got, ids = _on_8_devices(want, P("X"), lambda i, s: s.__setitem__(10, s[10] + 3) if i == 3 else None)
    res = _check()(got, want, "float32")
    # shard 3 holds want[192:256]; want[202] = 202 % 7 = 6, so the error is 3/6
    assert res["passed"] is False and res["wrong_devices"] == [ids[3]]
    assert res["shards_checked"] == 8 and res["slices"] == 8 and res["max_rel_error"] == pytest.approx(0.5)


def test_check_finds_one_wrong_copy_of_a_replicated_result():
    from jax.sharding import PartitionSpec as P

    want = np.arange(1000, dtype=np.float32) % 7
    got, ids = _on_8_devices(want, P(), lambda i, s: s.__setitem__(999, 9.0) if i == 5 else None)
    res = _check()(got, want, "float32")
    # 8 copies of one slice: the reference is built once, and every copy compared to it
    assert res["passed"] is False and res["wrong_devices"] == [ids[5]]
    assert res["shards_checked"] == 8 and res["slices"] == 1


def test_check_finds_a_wrong_last_element_of_the_last_shard():
    from jax.sharding import PartitionSpec as P

    want = np.ones((8, 512), np.float32)
    got, ids = _on_8_devices(want, P("X", None), lambda i, s: s.__setitem__((-1, -1), 2.0) if i == 7 else None)
    res = _check()(got, want, "float32")
    assert res["passed"] is False and res["wrong_devices"] == [ids[7]] and res["max_rel_error"] == 1.0


def test_check_builds_each_slice_of_the_reference_once():
    from jax.sharding import PartitionSpec as P

    class Counted:  # a reference that counts the slices asked of it, as a LazyArray is asked
        def __init__(self, a):
            self.a, self.asked = a, 0

        def __getitem__(self, index):
            self.asked += 1
            return self.a[index]

    want = np.arange(64, dtype=np.float32) % 7
    replicated, sharded = Counted(want), Counted(want)
    assert _check()(_on_8_devices(want, P())[0], replicated, "float32")["passed"] is True
    assert _check()(_on_8_devices(want, P("X"))[0], sharded, "float32")["passed"] is True
    assert (replicated.asked, sharded.asked) == (1, 8)


def test_check_fails_an_int8_sum_that_wrapped_around():
    want = np.array([100, 30, 130], np.int32)  # 130 does not fit int8: the device's sum wraps to -126
    got = np.array([100, 30, 130], np.int32).astype(np.int8)
    res = _check()(got, want, "int8")
    assert got[2] == -126 and res["passed"] is False and res["max_rel_error"] == pytest.approx(256 / 130)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_check_fails_a_nan_in_the_result(dtype):
    import jax.numpy as jnp

    want = np.arange(16, dtype=np.float32).astype(jnp.dtype(dtype))
    got = want.copy()
    got[4] = np.nan
    assert _check()(got, want, dtype)["passed"] is False


def test_a_point_whose_reference_is_wrong_fails_before_it_is_timed(compose_cfg, tmp_path, monkeypatch):
    """The whole path in one process: measure() checks the real result against a reference
    with one element changed, records the failed check, and stops before timing."""
    from runner.config.spec import build_spec
    from runner.worker import measure
    from runner.worker.programs import collectives

    real_build = collectives.build

    def wrong_reference(*args, **kwargs):
        prog = real_build(*args, **kwargs)
        good = prog.reference()

        def bad():
            out = np.array(good, copy=True)
            out.flat[out.size // 2] += 1
            return out

        prog.reference = bad
        return prog

    monkeypatch.setattr(collectives, "build", wrong_reference)
    spec = build_spec(compose_cfg(["op=all_reduce", "op.size_bytes=4KiB", "mesh=x8", "trace.enabled=false"]))
    record: dict = {}
    with pytest.raises(AssertionError, match="differs from the NumPy reference"):
        measure.measure(spec, tmp_path, record)
    assert record["check"].passed is False and record["check"].max_rel_error > 0
    assert "timing" not in record


# ---------------------------------------------------------------- the stop rule
TIMING = {
    "warmup_min_iters": 3,
    "warmup_max_s": 1e9,
    "min_iters": 10,
    "max_iters": 2000,
    "target_rel_ci": 0.05,
    "budget_s": 1e9,
    "iters_per_sample": 1,
}


def _driven(values, **timing):
    """time_step over a fixed list of samples and a clock that never moves."""
    it = iter(values)
    return pytest.importorskip("runner.worker.timing").time_step(
        None, dict(TIMING, **timing), sample=lambda step, k=1: next(it), clock=lambda: 0.0
    )


def test_stop_rule_stops_at_the_first_check_within_target_and_not_before():
    rng = np.random.default_rng(7)
    timed = list(rng.lognormal(0, 0.3, 2000))
    warm = [1.0] * 4  # flat: warm-up ends after its 4 iterations
    # The first multiple of 5 from min_iters (10) at which the median's interval is within
    # +-5%, by hand:
    expect = next(n for n in range(10, 2001, 5) if rel_ci_halfwidth(timed[:n]) <= 0.05)
    assert expect > 10  # the data make the rule work for it
    out = _driven(warm + timed)
    assert out["stop_reason"] == "ci_tight"
    assert len(out["samples_s"]) == expect and out["warmup_iters"] == 4
    assert out["summary"]["rel_ci_halfwidth"] <= 0.05
    assert rel_ci_halfwidth(timed[: expect - 5]) > 0.05  # the check before did not stop


def test_stop_rule_runs_to_max_iters_when_the_interval_never_tightens():
    noisy = [1.0] * 4 + [float(x) for x in itertools.islice(itertools.cycle([1, 100]), 50)]
    out = _driven(noisy, max_iters=50)
    assert out["stop_reason"] == "max_iters" and len(out["samples_s"]) == 50


def test_stop_rule_stops_on_the_budget_and_says_so():
    now = [0.0]
    it = iter([1.0] * 4 + [float(x) for x in itertools.islice(itertools.cycle([1, 100]), 500)])

    def sample(step, k=1):  # every sample takes one second of the fake clock
        now[0] += 1.0
        return next(it)

    out = pytest.importorskip("runner.worker.timing").time_step(
        None, dict(TIMING, budget_s=25.0), sample=sample, clock=lambda: now[0]
    )
    assert out["stop_reason"] == "budget"
    # checks every 5 samples: 5 to 20 s are inside the 25 s budget, 25 s is not
    assert len(out["samples_s"]) == 25 and out["timed_s"] == 25.0


def test_warm_up_waits_for_the_median_to_settle():
    seq = [10.0, 9.0, 8.0, 5.0, 4.0, 3.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    it = iter(seq)
    warm = pytest.importorskip("runner.worker.timing").warm_up(
        None, 3, 1e9, sample=lambda step, k=1: next(it), clock=lambda: 0.0
    )
    # medians of the last 2 against the 2 before: 6.5 vs 9.5, 4.5 vs 8.5, 3.5 vs 6.5, 2.5 vs
    # 4.5, 2 vs 3.5, 2 vs 2.5 (20% apart), then 2 vs 2 at the 10th iteration: settled
    assert len(warm) == 10


# ---------------------------------------------------------------- statistics
@pytest.mark.parametrize(
    "n,ranks",
    [(5, (0, 4)), (6, (0, 5)), (10, (1, 8)), (20, (5, 14)), (60, (21, 38)), (100, (39, 60)), (1000, (468, 531))],
)
def test_median_interval_ranks_match_the_binomial_tables(n, ranks):
    assert median_ci_ranks(n) == ranks
    x = np.arange(1, n + 1, dtype=float)[::-1]  # order of the input must not matter
    assert median_ci(x) == (ranks[0] + 1.0, ranks[1] + 1.0)


def test_relative_half_width_of_a_known_sample():
    x = np.arange(1.0, 11.0)  # median 5.5; 95% interval [2, 9]
    assert rel_ci_halfwidth(x) == pytest.approx(7 / 11)
    s = summarize(x)
    assert (s["ci_low_s"], s["ci_high_s"], s["median_s"]) == (2.0, 9.0, 5.5)
    assert s["rel_ci_halfwidth"] == pytest.approx(7 / 11)


def test_median_interval_covers_at_least_95_percent():
    rng = np.random.default_rng(1)
    hits = sum(lo <= 1.0 <= hi for lo, hi in (median_ci(rng.lognormal(0, 0.5, 60)) for _ in range(2000)))
    # exact coverage of ranks (22, 39) of 60 is 0.9729: binomial spread of 2000 trials is about 0.004
    assert 0.955 <= hits / 2000 <= 0.99


# ---------------------------------------------------------------- fits
def test_alpha_beta_clamps_a_negative_latency_to_zero():
    V = np.geomspace(1e6, 1e8, 6)
    T = V / 2e9 * np.array([0.8, 1.0, 1.0, 1.0, 1.0, 1.0])  # bandwidth only; the small end is fast
    A = np.column_stack([1 / T, V / T])
    unclamped = np.linalg.lstsq(A, np.ones_like(T), rcond=None)[0]
    assert unclamped[0] < 0  # the bug the clamp guards against: a negative latency
    fit = fit_alpha_beta(V, T)
    assert fit["alpha_s"] == 0.0 and fit["beta_Bps"] > 0
    assert fit["beta_Bps"] == pytest.approx(2e9, rel=0.05)


def test_alpha_beta_clamps_a_negative_inverse_bandwidth():
    V = np.geomspace(1e3, 1e5, 6)
    T = np.full(6, 1e-4) * np.array([1.0, 1.0, 1.0, 1.0, 1.0, 0.8])  # latency only; the big end is fast
    assert np.linalg.lstsq(np.column_stack([1 / T, V / T]), np.ones(6), rcond=None)[0][1] < 0
    fit = fit_alpha_beta(V, T)
    # clamped: a constant, fitted in relative error, and no bandwidth term in the residuals
    alpha = np.sum(1 / T) / np.sum(1 / T**2)
    assert fit["alpha_s"] == pytest.approx(alpha, rel=1e-12) and fit["beta_Bps"] == float("inf")
    assert fit["residuals"] == pytest.approx(list(alpha / T - 1), rel=1e-9)


def test_max_model_on_pure_latency_and_pure_bandwidth_data():
    V = np.geomspace(1e3, 1e5, 5)
    lat = fit_max_model(np.full(5, 4e-5), np.full(5, 4.0), V)
    # every point latency-bound: T_min exact, and W no lower than the largest point allows
    assert lat["T_min_s"] == pytest.approx(1e-5) and lat["W_Bps"] >= 1e5 / 4e-5 and lat["rel_rmse"] < 1e-12
    bw = fit_max_model(V / 1e9, np.full(5, 4.0), V)
    assert bw["T_min_s"] == 0.0 and bw["W_Bps"] == pytest.approx(1e9) and bw["rel_rmse"] < 1e-12


# ---------------------------------------------------------------- bus bandwidth factors
@pytest.mark.parametrize(
    "op,n,factor",
    [
        # nccl-tests' *GetBw: AllReduce 2(n-1)/n; AllGather, ReduceScatter, AllToAll (n-1)/n
        ("all_reduce", 2, 1.0),
        ("all_reduce", 8, 1.75),
        ("all_gather", 2, 0.5),
        ("all_gather", 8, 0.875),
        ("reduce_scatter", 2, 0.5),
        ("reduce_scatter", 8, 0.875),
        ("all_to_all", 2, 0.5),
        ("all_to_all", 8, 0.875),
    ],
)
def test_bus_bandwidth_factors_are_nccl_tests(op, n, factor):
    assert busbw_factor(op, n) == pytest.approx(factor, abs=0)


# ---------------------------------------------------------------- async spans
def test_one_async_start_done_pair_is_exactly_one_span():
    ops = pd.DataFrame(
        {
            "hlo_op": ["all-gather-start.1", "fusion.2", "all-gather-done.1"],
            "start_ns": [100.0, 120.0, 400.0],
            "end_ns": [110.0, 380.0, 420.0],
        }
    )
    spans = collective_spans(ops)
    assert spans.to_dict("records") == [{"start_ns": 100.0, "end_ns": 420.0}]


def test_two_async_pairs_of_one_kind_pair_in_order():
    ops = pd.DataFrame(
        {
            "hlo_op": ["all-reduce-start.1", "all-reduce-start.2", "all-reduce-done.1", "all-reduce-done.2"],
            "start_ns": [0.0, 10.0, 50.0, 60.0],
            "end_ns": [5.0, 15.0, 55.0, 70.0],
        }
    )
    assert collective_spans(ops).values.tolist() == [[0.0, 55.0], [10.0, 70.0]]


def test_summarize_every_field_of_a_known_sample():
    x = [4.0, 1.0, 3.0, 2.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    s = summarize(x)
    assert s == {
        "n": 10,
        "median_s": 5.5,
        "mean_s": 5.5,
        "min_s": 1.0,
        "p10_s": pytest.approx(1.9),
        "p90_s": pytest.approx(9.1),
        "std_s": pytest.approx(np.std(np.arange(1, 11), ddof=1)),
        "cv": pytest.approx(np.std(np.arange(1, 11), ddof=1) / 5.5),
        "ci_low_s": 2.0,
        "ci_high_s": 9.0,
        "rel_ci_halfwidth": pytest.approx(7 / 11),
    }
    assert summarize([]) == {"n": 0}
    one = summarize([2.5])
    assert (one["std_s"], one["cv"], one["ci_low_s"], one["ci_high_s"]) == (0.0, 0.0, 2.5, 2.5)
