"""The ceiling curve read exactly (issue 30's mutation check): a rising curve lifts nothing,
two reasons at once, three sizes read between and at their ends, a neighbour's flag not
carried onto a grid size, a side without an interval, the record's every key, the cache
file's age on both sides of its bounds, several processes measuring afresh, and the seed and
clock a measurement uses."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from runner.worker import copy_curve
from runner.worker.copy_curve import MAX_AGE_S, at, smooth

KiB, MiB, GB = 1 << 10, 1 << 20, 1e9


def _nine(center: float) -> list[float]:
    return [center * f for f in (1.0, 0.6, 1.4, 0.9, 1.1, 0.8, 1.2, 0.7, 1.3)]


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


def _curve(rows):
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
    c = _curve(rows)
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
    c = _curve(rows)
    assert at(c, 4 * MiB)["inconsistent"] is None  # its lower neighbour's "y" is not its own
    assert at(c, 1 * MiB)["inconsistent"] == "1 MiB: y"
    assert at(c, 64 * KiB)["inconsistent"] == "1 MiB: y; 16 KiB: x"  # 1 MiB is 1 MiB, not 1024 KiB
    rows[1]["bytes_per_device"] = 1 * MiB - 1 * KiB  # just under a MiB: in KiB
    assert at(c, 64 * KiB)["inconsistent"] == "1023 KiB: y; 16 KiB: x"


def test_a_side_without_an_interval_gives_none():
    rows = smooth([64 * KiB, 1 * MiB], [_nine(2 * GB), _nine(8 * GB)])
    rows[0]["ci_low_Bps"] = math.nan  # no interval at 64 KiB
    got = at(_curve(rows), 256 * KiB)
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
