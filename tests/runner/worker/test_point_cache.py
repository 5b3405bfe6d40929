"""Inputs placed once across rounds: the worker keeps a point's inputs and programs from round 1
for its later rounds (runner.worker.point_cache), within a memory budget, and a round that has to place
them again says so in its ``inputs`` entry."""

from __future__ import annotations

import numpy as np
import pytest

QUICK = [
    "op=all_gather",
    "op.size_bytes=64KiB",
    "mesh=x8",
    "trace.enabled=false",
    "timing.budget_s=0.05",
    "timing.min_iters=5",
    "timing.warmup_max_s=0.2",
]


@pytest.fixture
def cache():
    from runner.worker import point_cache

    point_cache.clear()
    yield point_cache
    point_cache.clear()


def test_a_later_round_times_the_inputs_and_programs_of_round_1(compose_cfg, tmp_path, cache):
    from runner.config.spec import build_spec
    from runner.worker import measure, point_round
    from runner.worker.result_check import check

    spec = build_spec(compose_cfg(QUICK))
    record: dict = {}
    measure.measure(spec, tmp_path, record)
    point = cache.get(spec)
    assert point is not None and cache.stats()["points"] == 1
    args, compiled, loop_programs = point.args, point.compiled, dict(point.loop.compiled)
    K = record["timing"].rounds[0].loop.Ks
    for r in (2, 3):
        out = point_round.retime(spec, r, K)
        assert out["inputs"]["placed"] == "kept"
        # nothing placed, lowered or compiled again: the round is its timing
        assert set(out["phases_s"]) == {"timing"}
    kept = cache.get(spec)
    assert kept is point and kept.args is args and kept.compiled is compiled
    assert {k: v for k, v in kept.loop.compiled.items()} == loop_programs  # no loop program compiled again
    # the loop donated its own carry round after round; the step's inputs are what round 1 checked
    assert check(kept.step(), kept.prog.reference(), "float32")["passed"] is True


def test_a_round_whose_point_is_gone_places_it_again_and_says_why(compose_cfg, tmp_path, cache):
    from runner.config.spec import build_spec
    from runner.worker import point_round

    spec = build_spec(compose_cfg(QUICK))
    out = point_round.retime(spec, 2, None)  # a new worker: round 1 ran in another process
    assert out["inputs"] == {
        "placed": "again",
        "why": "not prepared in this worker process (a new worker, or another process of the group)",
    }
    assert {"setup", "input", "lower", "compile", "timing"} <= set(out["phases_s"])
    assert point_round.retime(spec, 3, None)["inputs"]["placed"] == "kept"  # and keeps it for the next


class _Fake:
    """A prepared point as the cache sees it: inputs with a size, no loop."""

    def __init__(self, nbytes: int):
        self.args, self.loop = (np.zeros(nbytes, np.uint8),), None


def _spec(size: int) -> dict:
    return {"op": {"name": "all_gather", "size_bytes": size}, "mesh": {"name": "x8"}, "dtype": "float32"}


def test_the_cache_drops_its_oldest_points_beyond_its_memory_budget(cache, monkeypatch):
    monkeypatch.setattr(cache, "budget_bytes", lambda held: 250)
    a, b, c = _spec(1), _spec(2), _spec(3)
    assert cache.put(a, _Fake(100)) == [] and cache.put(b, _Fake(100)) == []
    assert cache.get(a) is not None  # a is now the newest: b is the oldest
    assert cache.put(c, _Fake(100)) == [cache.key(b)]  # 300 > 250: b goes, a and c stay
    assert cache.get(b) is None and cache.get(a) is not None and cache.stats() == {"points": 2, "bytes": 200}
    assert "memory budget" in cache.why_missing(b)
    # oldest first (c, then a: it was just asked for), and b alone is over the budget: none kept
    assert cache.put(b, _Fake(300)) == [cache.key(c), cache.key(a), cache.key(b)]
    assert cache.stats() == {"points": 0, "bytes": 0}


def test_the_budget_is_a_share_of_free_host_memory_on_cpu(cache, monkeypatch):
    monkeypatch.setattr(cache, "host_available_bytes", lambda: 7 * 2**30)
    # free memory plus what the cache already holds (the cache's own bytes are not lost to it)
    assert cache.budget_bytes(2**30) == int(cache.SHARE * 8 * 2**30) == 2**30


def test_the_key_is_what_defines_a_prepared_point():
    from runner.worker.point_cache import key

    base = {**_spec(1024), "hardware": {"kind": "cpu"}, "distributed": {"mode": "none"}, "timing": {"loop": True}}
    # the timing rules, the trace and the check are read from each round's own spec
    same = dict(base, timing={"loop": True, "budget_s": 9.0}, trace={"enabled": False}, check_result=False)
    assert key(same) == key(base)
    assert key(dict(base, dtype="bfloat16")) != key(base)
    assert key(dict(base, timing={"loop": False})) != key(base)
    assert key(dict(base, op={"name": "all_gather", "size_bytes": 2048})) != key(base)


def test_a_new_point_makes_room_by_dropping_the_oldest(cache, monkeypatch):
    monkeypatch.setattr(cache, "budget_bytes", lambda held: None)  # no bound on what it keeps
    monkeypatch.setattr(cache, "host_available_bytes", lambda: 1000)
    a, b, c = _spec(1), _spec(2), _spec(3)
    for s in (a, b, c):
        cache.put(s, _Fake(100))
    # room: 80% of free + held = 0.8 * 1300 = 1040 bytes; 100 + 8 * 50 = 500 needed, +300 held fits
    assert cache.make_room({"host_bytes": 100, "per_device_bytes": 50}, 8) == []
    # 100 + 8 * 100 = 900 needed: 1200, then 1100 are over 1040; 1000 fits after two drops
    assert cache.make_room({"host_bytes": 100, "per_device_bytes": 100}, 8) == [cache.key(a), cache.key(b)]
    assert cache.stats() == {"points": 1, "bytes": 100} and "memory budget" in cache.why_missing(a)


def test_equal_typed_ops_key_alike_whatever_order_their_dims_came_in():
    from runner.config.op_spec import MatmulOp
    from runner.worker.point_cache import key

    a = {"op": MatmulOp("A[I, J_X] * B[J, K] -> C[I, K]", {"I": 16, "J": 16, "K": 8}, "auto", ("X",))}
    b = {"op": MatmulOp("A[I, J_X] * B[J, K] -> C[I, K]", {"K": 8, "J": 16, "I": 16}, "auto", ("X",))}
    assert a == b and key(a) == key(b)
    assert key(a) != key({"op": MatmulOp(a["op"].expr, {"I": 16, "J": 16, "K": 16}, "auto", ("X",))})


def test_a_later_round_is_timed_within_timing_later_budget_s(compose_cfg, tmp_path, cache, monkeypatch):
    """Round 1 times its step and loop within ``timing.budget_s``; a later round within
    ``timing.later_budget_s`` (the spread between rounds sets the interval), the loop's too."""
    from runner.config.spec import build_spec
    from runner.worker import measure, point_round, timing

    spec = build_spec(compose_cfg([*QUICK, "timing.later_budget_s=0.02"]))
    budgets = []
    for name in ("time_step", "time_loop"):
        real = getattr(timing, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            t = args[1] if _name == "time_step" else args[2]  # (step, timing, ...) / (calls, Ks, timing, ...)
            budgets.append((_name, t["budget_s"]))
            return _real(*args, **kwargs)

        monkeypatch.setattr(timing, name, spy)
    record: dict = {}
    measure.measure(spec, tmp_path, record)
    point_round.retime(spec, 2, record["timing"].rounds[0].loop.Ks)
    assert budgets == [("time_step", 0.05), ("time_loop", 0.05), ("time_step", 0.02), ("time_loop", 0.02)]
