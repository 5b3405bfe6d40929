"""The CPU ceiling as a curve: interleaved repeats with an interval per size, a stalled size
lifted rather than trusted, the curve cached per machine and JAX version, and a point flagged
only when its interval lies wholly above the ceiling's (issue 24 item 1)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from runner.worker import copy_curve
from runner.worker.copy_curve import at, smooth

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
