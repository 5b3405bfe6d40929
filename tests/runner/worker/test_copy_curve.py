"""The CPU ceiling as a curve: interleaved repeats with an interval per size, a stalled size
lifted rather than trusted, the curve cached per machine and JAX version, and a point flagged
only when its interval lies wholly above the ceiling's (issue 24 item 1).

The ceiling curve read exactly (issue 30's mutation check): a rising curve lifts nothing,
two reasons at once, three sizes read between and at their ends, a neighbour's flag not
carried onto a grid size, a side without an interval, the record's every key, the cache
file's age on both sides of its bounds, several processes measuring afresh, and the seed and
clock a measurement uses.

The ceiling curve pinned on both sides of its thresholds (issue 30): a dip lifted by exactly
DIP is consistent and one a little deeper is not, an interval exactly SPREAD wide is consistent,
a zero rate is no sample, and a size without samples is no neighbour to lift by.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from runner.worker import copy_curve
from runner.worker.copy_curve import MAX_AGE_S, at, smooth

KiB, MiB, GB = 1 << 10, 1 << 20, 1e9


def _nine(center: float) -> list[float]:
    # nine repeats 0.6x .. 1.4x the centre: sorted, the median's 95% interval is ranks 2 and 8
    return [center * f for f in (1.0, 0.6, 1.4, 0.9, 1.1, 0.8, 1.2, 0.7, 1.3)]


def test_a_stalled_size_is_lifted_to_its_lower_neighbour_and_said_to_be_inconsistent():
    sizes = [16 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB]
    # 256 KiB: every repeat stalled (0.6 GB/s between 8 and 6 GB/s); 4 MiB: the end of the range
    # falls to 1 GB/s (DRAM), which an edge must keep
    samples = [_nine(10 * GB), _nine(8 * GB), _nine(0.6 * GB), _nine(6 * GB), _nine(1 * GB)]
    rows = smooth(sizes, samples)
    assert [r["median_Bps"] for r in rows] == pytest.approx([10 * GB, 8 * GB, 0.6 * GB, 6 * GB, 1 * GB])
    # the interval: ranks 2 and 8 of 9 (1-based) = 0.7x and 1.3x
    assert rows[0]["ci_low_Bps"] == pytest.approx(7 * GB) and rows[0]["ci_high_Bps"] == pytest.approx(13 * GB)
    assert [r["busbw_Bps"] for r in rows] == pytest.approx([10 * GB, 8 * GB, 6 * GB, 6 * GB, 1 * GB])
    assert rows[2]["ci_high_Bps"] == pytest.approx(6 * GB)  # the lifted value lies inside its interval
    assert rows[2]["inconsistent"].startswith("its median 0.6 GB/s lies 10.0x below both neighbouring sizes")
    assert [r["inconsistent"] for i, r in enumerate(rows) if i != 2] == [None] * 4


def test_a_shallow_dip_is_lifted_but_stays_consistent_and_a_wide_size_is_not():
    sizes = [4 * KiB, 16 * KiB, 64 * KiB]
    # 16 KiB 1.5x below both neighbours: lifted to 6 GB/s (within DIP = 2x: consistent)
    rows = smooth(sizes, [_nine(9 * GB), _nine(4 * GB), _nine(6 * GB)])
    assert rows[1]["busbw_Bps"] == pytest.approx(6 * GB) and rows[1]["inconsistent"] is None
    # repeats from 0.5 to 12 GB/s at one size: the median known only within 12x / 1 = 12 > SPREAD
    wide = [0.5, 1, 2, 3, 4, 5, 8, 12, 20]
    rows = smooth(sizes, [_nine(9 * GB), [v * GB for v in wide], _nine(3 * GB)])
    assert rows[1]["median_Bps"] == pytest.approx(4 * GB) and rows[1]["busbw_Bps"] == pytest.approx(4 * GB)
    assert rows[1]["inconsistent"] == "its repeats spread 1-12 GB/s (95% interval of the median, 9 repeats)"
    # a failed difference (None, or not positive) is no sample
    rows = smooth(sizes, [[None, -1.0, 2 * GB], [2 * GB], [3 * GB]])
    assert rows[0]["n"] == 1 and rows[0]["median_Bps"] == pytest.approx(2 * GB)


def _curve(points) -> dict:
    return {"points": points, "devices": 8, "repeats": 9, "measured_at": "2026-11-25T16:00:00+00:00"}


def test_the_curve_is_read_log_log_between_its_sizes_and_flat_beyond_its_ends():
    rows = smooth([1 * MiB, 4 * MiB], [_nine(8 * GB), _nine(2 * GB)])
    c = _curve(rows)
    mid = at(c, 2 * MiB)  # halfway in log size: the geometric mean, sqrt(8 * 2) = 4 GB/s
    assert mid["busbw_Bps"] == pytest.approx(4 * GB)
    assert mid["ci_low_Bps"] == pytest.approx(math.sqrt(8 * 0.7 * 2 * 0.7) * GB)
    assert mid["ci_high_Bps"] == pytest.approx(math.sqrt(8 * 1.3 * 2 * 1.3) * GB)
    assert mid["kind"] == "device_copy" and mid["bytes_per_device"] == 2 * MiB and mid["devices"] == 8
    assert mid["curve"]["measured_at"] == "2026-11-25T16:00:00+00:00" and mid["inconsistent"] is None
    assert at(c, 4 * MiB)["busbw_Bps"] == pytest.approx(2 * GB)  # on a grid size: its own value
    assert at(c, 64 * MiB)["busbw_Bps"] == pytest.approx(2 * GB)  # beyond the last: DRAM's rate stands
    assert at(c, 1 * KiB)["busbw_Bps"] == pytest.approx(8 * GB)
    rows[1]["inconsistent"] = "its median lies 5.0x below both neighbouring sizes"
    assert at(c, 2 * MiB)["inconsistent"] == "4 MiB: its median lies 5.0x below both neighbouring sizes"
    assert at(c, 1 * MiB)["inconsistent"] is None


def test_the_curve_interleaves_its_sizes_and_one_stall_moves_no_median(monkeypatch):
    import runner.worker.ceiling

    calls = []

    def fake_copy(mesh, nbytes, repeats, clock, keep):
        assert repeats == 1 and keep  # one sample per visit; the buffers stay between visits
        calls.append(nbytes)
        stalled = len(calls) == 2  # the second visit stalls 100x
        return {"busbw_Bps": (nbytes / KiB) * GB / (100 if stalled else 1)}

    released = []
    monkeypatch.setattr(runner.worker.ceiling, "device_copy", fake_copy)
    monkeypatch.setattr(runner.worker.ceiling, "release", lambda: released.append(1))

    class Mesh:
        devices = np.zeros(8)

    sizes = (4 * KiB, 16 * KiB, 64 * KiB)
    c = copy_curve.measure(Mesh(), sizes=sizes, repeats=5, clock=lambda: 0.0)
    # 5 rounds, each visiting every size once, in a shuffled order
    rounds = [calls[i : i + 3] for i in range(0, 15, 3)]
    assert all(sorted(r) == list(sizes) for r in rounds) and len({tuple(r) for r in rounds}) > 1
    assert released == [1] and c["devices"] == 8 and c["repeats"] == 5
    assert [r["median_Bps"] for r in c["points"]] == pytest.approx([4 * GB, 16 * GB, 64 * GB])
    assert [len(v) for v in c["samples_Bps"].values()] == [5, 5, 5]


def test_the_curve_is_measured_once_then_reused_from_its_file_until_it_is_a_day_old(monkeypatch, tmp_path):
    measured = []

    def fake_measure(mesh):
        measured.append(mesh.devices.size)
        return {"points": smooth([4 * KiB], [_nine(5 * GB)]), "repeats": 9, "devices": 8, "wall_s": 1.5}

    monkeypatch.setattr(copy_curve, "measure", fake_measure)
    monkeypatch.setattr(copy_curve, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(copy_curve, "_memo", {})
    key = copy_curve.key()
    t0 = 1.79e9
    first = copy_curve.cpu_curve(now=t0)
    assert measured == [8] and first["reused"] is False and first["measured_unix"] == t0
    (path,) = tmp_path.glob("*.json")
    assert path.name == f"{key['host']}-jax{key['jax_version']}-8dev.json"
    assert copy_curve.cpu_curve(now=t0 + 10) is first  # the same process: kept
    copy_curve._memo.clear()  # a new worker process: read back from the file
    again = copy_curve.cpu_curve(now=t0 + 3600)
    assert measured == [8] and again["reused"] is True and again["measured_at"] == first["measured_at"]
    copy_curve._memo.clear()
    copy_curve.cpu_curve(now=t0 + 24 * 3600 + 1)  # a day old: measured again
    assert measured == [8, 8]
    copy_curve._memo.clear()
    other = dict(json.loads(path.read_text()), jax_version="0.0.1")  # another JAX's curve is not this one's
    path.write_text(json.dumps(other))
    copy_curve.cpu_curve(now=t0 + 24 * 3600 + 2)
    assert measured == [8, 8, 8]


def _points(**cols) -> pd.DataFrame:
    n = len(next(iter(cols.values())))
    base = {
        "status": ["ok"] * n,
        "op": ["all_gather"] * n,
        "group_size": [8] * n,
        "device_count": [8] * n,
        "S_bytes": [4.0 * MiB] * n,
        "page_faults_per_step": [0] * n,
        "checked": [True] * n,
    }
    return pd.DataFrame({**base, **cols})


def test_a_point_is_flagged_only_when_its_interval_lies_wholly_above_a_consistent_ceiling():
    from analysis.runs.summary import flags

    df = _points(
        # busbw 3 GB/s; its interval from the time's: 2.5-3.6 GB/s
        busbw_Bps=[3e9, 3e9, 3e9, 3e9],
        busbw_ci_low_Bps=[2.5e9, 2.5e9, 2.5e9, np.nan],
        busbw_ci_high_Bps=[3.6e9, 3.6e9, 3.6e9, np.nan],
        ceiling_busbw_Bps=[2e9, 2e9, 2e9, 2e9],
        # 0: ceiling interval 1.5-2.4 GB/s, wholly below 2.5: flagged; 1: up to 2.6 GB/s, overlapping:
        # kept; 2: as 0, but the ceiling is inconsistent there: kept, with the ceiling named;
        # 3: an old result, no intervals: the values compare (3 > 2)
        ceiling_ci_low_Bps=[1.5e9, 1.5e9, 1.5e9, np.nan],
        ceiling_ci_high_Bps=[2.4e9, 2.6e9, 2.4e9, np.nan],
        ceiling_inconsistent=[None, None, "4 MiB: its median lies 6.0x below both neighbouring sizes", None],
    )
    df["busbw_over_ceiling"] = df["busbw_Bps"] / df["ceiling_busbw_Bps"]
    out, caveats = flags(df)
    assert list(out) == [
        "bus bandwidth 1.50x its ceiling (a measurement problem)",
        "",
        "",
        "bus bandwidth 1.50x its ceiling (a measurement problem)",
    ]
    assert caveats[2] == (
        "bus bandwidth 1.50x a ceiling that is inconsistent here (4 MiB: its median lies 6.0x below both "
        "neighbouring sizes): the ceiling is in doubt, the point is kept"
    )
    assert list(caveats[[0, 1, 3]]) == ["", "", ""]


def test_a_rising_curve_lifts_nothing_and_a_size_may_fail_twice():
    rows = smooth([4 * KiB, 16 * KiB, 64 * KiB], [_nine(1 * GB), _nine(2 * GB), _nine(3 * GB)])
    assert [r["busbw_Bps"] for r in rows] == pytest.approx([1 * GB, 2 * GB, 3 * GB])
    assert [r["inconsistent"] for r in rows] == [None, None, None]
    # 16 KiB: 1 GB/s between 8 and 6 (lifted 6x) and its repeats 0.5-10 GB/s (20x)
    wide = [0.1, 0.5, 0.6, 0.8, 1, 2, 3, 10, 20]
    rows = smooth([4 * KiB, 16 * KiB, 64 * KiB], [_nine(8 * GB), [v * GB for v in wide], _nine(6 * GB)])
    assert rows[1]["inconsistent"] == (
        "its median 1 GB/s lies 6.0x below both neighbouring sizes; "
        "its repeats spread 0.5-10 GB/s (95% interval of the median, 9 repeats)"
    )


def _curve_record(rows):
    return {
        "points": rows,
        "devices": 8,
        "repeats": 9,
        "measured_at": "2026-11-25T16:00:00+00:00",
        "file": "/c.json",
        "wall_s": 12.5,
        "reused": True,
        "samples_Bps": {},
    }


def test_three_sizes_read_between_at_and_beyond_them():
    # 64 KiB 2 GB/s, 1 MiB 8 GB/s, 16 MiB 4 GB/s: log-log between neighbours, the last size beyond
    rows = smooth([64 * KiB, 1 * MiB, 16 * MiB], [_nine(2 * GB), _nine(8 * GB), _nine(4 * GB)])
    c = _curve_record(rows)
    # 4 MiB is halfway (in log size) from 1 MiB to 16 MiB: sqrt(8 x 4) GB/s, not 2 -> 4
    assert at(c, 4 * MiB)["busbw_Bps"] == pytest.approx(math.sqrt(32) * GB)
    assert at(c, 16 * MiB)["busbw_Bps"] == pytest.approx(4 * GB)
    assert at(c, 64 * MiB)["busbw_Bps"] == pytest.approx(4 * GB)
    r = at(c, 1 * MiB)
    assert r["curve"] == {
        "measured_at": "2026-11-25T16:00:00+00:00",
        "file": "/c.json",
        "repeats": 9,
        "wall_s": 12.5,
        "reused": True,
    }
    assert r["what"] == (
        "each of the 8 devices reading and writing its bus bytes at once (x+1 in an XLA loop); "
        "the median of 9 interleaved repeats at 3 sizes, read at this size"
    )


def test_a_grid_size_carries_only_its_own_flag_and_flags_name_their_sizes():
    rows = smooth([16 * KiB, 1 * MiB, 4 * MiB], [_nine(2 * GB), _nine(8 * GB), _nine(4 * GB)])
    rows[0]["inconsistent"], rows[1]["inconsistent"] = "x", "y"
    c = _curve_record(rows)
    assert at(c, 4 * MiB)["inconsistent"] is None  # its lower neighbour's "y" is not its own
    assert at(c, 1 * MiB)["inconsistent"] == "1 MiB: y"
    assert at(c, 64 * KiB)["inconsistent"] == "1 MiB: y; 16 KiB: x"  # 1 MiB is 1 MiB, not 1024 KiB
    rows[1]["bytes_per_device"] = 1 * MiB - 1 * KiB  # just under a MiB: in KiB
    assert at(c, 64 * KiB)["inconsistent"] == "1023 KiB: y; 16 KiB: x"


def test_a_side_without_an_interval_gives_none():
    rows = smooth([64 * KiB, 1 * MiB], [_nine(2 * GB), _nine(8 * GB)])
    rows[0]["ci_low_Bps"] = math.nan  # no interval at 64 KiB
    got = at(_curve_record(rows), 256 * KiB)
    assert got["ci_low_Bps"] is None and got["busbw_Bps"] == pytest.approx(4 * GB)


def _saved(tmp_path, **over):
    path = tmp_path / "c.json"
    key = {"host": "h", "jax_version": "0.10.2", "devices": 8}
    curve = {**key, "measured_unix": 1000.0, "points": [{"bytes_per_device": 4096}], **over}
    path.write_text(json.dumps({k: v for k, v in curve.items() if v is not None}))
    return path, key


@pytest.mark.parametrize("age, reused", [(0.0, True), (0.5, True), (MAX_AGE_S - 1, True), (MAX_AGE_S, False)])
def test_a_cached_curve_is_used_from_age_zero_to_just_under_a_day(tmp_path, age, reused):
    path, key = _saved(tmp_path)
    got = copy_curve._read(path, key, 1000.0 + age)
    assert (got is not None) is reused
    if reused:
        assert (got["reused"], got["file"], got["measured_unix"]) == (True, str(path), 1000.0)


def test_a_cached_curve_without_its_date_is_not_used(tmp_path):
    path, key = _saved(tmp_path, measured_unix=None)
    assert copy_curve._read(path, key, 1000.0) is None


def test_measuring_uses_the_seed_the_clock_and_one_mesh_axis(monkeypatch, tmp_path):
    import runner.worker.ceiling

    ticks = iter([10.0, 12.5])
    clock = lambda: next(ticks)  # noqa: E731
    calls = []

    def fake_copy(mesh, nbytes, repeats, clock, keep):
        assert isinstance(mesh, Mesh)  # the devices it was given
        calls.append((nbytes, clock))
        return {"busbw_Bps": float(nbytes)}

    monkeypatch.setattr(runner.worker.ceiling, "device_copy", fake_copy)
    monkeypatch.setattr(runner.worker.ceiling, "release", lambda: None)

    class Mesh:
        devices = np.zeros(8)

    sizes = tuple(4 * KiB << (2 * i) for i in range(5))
    c = copy_curve.measure(Mesh(), sizes=sizes, repeats=4, clock=clock)
    assert c["wall_s"] == 2.5 and all(ck is clock for _, ck in calls)
    order = [n for n, _ in calls]
    calls.clear()
    copy_curve.measure(Mesh(), sizes=sizes, repeats=4, clock=lambda: 0.0)
    assert [n for n, _ in calls] == order  # the same seed: the same order in every process


def test_a_curve_is_dated_kept_a_day_and_measured_afresh_by_several_processes(monkeypatch, tmp_path):
    import jax

    meshes = []

    def fake_measure(mesh):
        meshes.append(mesh.axis_names)
        return {"points": smooth([4 * KiB], [_nine(5 * GB)]), "repeats": 9, "devices": 8, "wall_s": 1.5}

    monkeypatch.setattr(copy_curve, "measure", fake_measure)
    monkeypatch.setattr(copy_curve, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(copy_curve, "_memo", {})
    t0 = 1.79e9
    first = copy_curve.cpu_curve(now=t0)
    (path,) = tmp_path.glob("*.json")
    assert meshes == [("X",)] and first["measured_at"] == "2026-09-21T14:13:20+00:00"
    assert first["file"] == str(path)
    assert copy_curve.cpu_curve(now=t0 + MAX_AGE_S) is not first and len(meshes) == 2  # a day: measured again
    # several processes: each measures on the whole mesh, and none reads or writes the file
    monkeypatch.setattr(copy_curve, "_memo", {})
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    several = copy_curve.cpu_curve(now=t0 + MAX_AGE_S + 1)
    assert len(meshes) == 3 and "file" not in several and several["reused"] is False
    # no time given: now
    monkeypatch.setattr(copy_curve, "_memo", {})
    assert isinstance(copy_curve.cpu_curve()["measured_unix"], float)


SIZES = [4 * KiB, 16 * KiB, 64 * KiB]


def test_a_dip_lifted_by_exactly_dip_is_consistent_and_a_deeper_one_is_not():
    rows = smooth(SIZES, [_nine(8 * GB), _nine(3 * GB), _nine(6 * GB)])
    assert rows[1]["busbw_Bps"] == pytest.approx(6 * GB) and rows[1]["inconsistent"] is None  # 2.0x
    rows = smooth(SIZES, [_nine(8 * GB), _nine(2.9 * GB), _nine(6 * GB)])
    assert rows[1]["busbw_Bps"] == pytest.approx(6 * GB)
    assert rows[1]["inconsistent"] == "its median 2.9 GB/s lies 2.1x below both neighbouring sizes"


def test_an_interval_exactly_spread_wide_is_consistent_and_a_wider_one_is_not():
    # nine repeats: the median's 95% interval is ranks 2 and 8, here 1 and 10 GB/s (10x)
    even = [0.5, 1, 2, 3, 4, 5, 6, 10, 20]
    rows = smooth(SIZES, [_nine(9 * GB), [v * GB for v in even], _nine(3 * GB)])
    assert (rows[1]["ci_low_Bps"], rows[1]["ci_high_Bps"]) == pytest.approx((1 * GB, 10 * GB))
    assert rows[1]["inconsistent"] is None
    wider = [0.5, 1, 2, 3, 4, 5, 6, 10.5, 20]
    rows = smooth(SIZES, [_nine(9 * GB), [v * GB for v in wider], _nine(3 * GB)])
    assert rows[1]["inconsistent"] == "its repeats spread 1-10.5 GB/s (95% interval of the median, 9 repeats)"


def test_a_zero_rate_is_no_sample():
    rows = smooth(SIZES, [[0.0, 2 * GB, 4 * GB], [5 * GB], [5 * GB]])
    assert rows[0]["n"] == 2 and rows[0]["median_Bps"] == pytest.approx(3 * GB)


def test_a_size_without_samples_is_no_neighbour():
    # 16 KiB lies below 4 KiB's 8 GB/s, but its other neighbour has no sample: not lifted
    rows = smooth(SIZES, [_nine(8 * GB), _nine(3 * GB), []])
    assert rows[1]["busbw_Bps"] == pytest.approx(3 * GB) and rows[1]["inconsistent"] is None
    assert math.isnan(rows[2]["busbw_Bps"]) and rows[2]["inconsistent"] == "no sample"
