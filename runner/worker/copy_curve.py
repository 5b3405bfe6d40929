"""The CPU ceiling as a curve over sizes: measured once, with an interval at each size, and
reused by every point (and by later sweeps on the same machine and JAX version).

One measurement of the copy rate at one size (:func:`runner.worker.ceiling.device_copy`, one
repeat) is noise on a shared machine: the same 3.5 MiB per device read 1.25, 2.50 and 14.1
GB/s in three sweeps, and six repeats in one process 0.53-29.4 GB/s at 32 MiB. So the curve
visits every size of :data:`SIZES` in :data:`REPEATS` rounds, each round in a shuffled order
(a stall hits one size's sample, not all of one size's samples), and keeps at each size the
median and its 95% order-statistic interval. Then :func:`smooth`: a size whose median lies
below *both* neighbours is lifted to the lower of them (a stall only ever slows a copy, so a
dip between two faster sizes is the measurement failing, not the memory system), and a
size is *inconsistent* when it had to be lifted by more than :data:`DIP` or its interval is
wider than :data:`SPREAD`: points there are not flagged against it.

Sizes between grid points are interpolated in log-log; above :data:`SIZES`' last (16 MiB a
device: 8 devices reading and writing it is 256 MiB, far past this machine's 32 MiB L3) the
copy rate is DRAM's and the last size's values stand; below the first, the first's.

The curve is kept in this process and in a JSON file under :data:`CACHE_DIR`, keyed by
host, JAX version and device count, with the date it was measured; a file older than
:data:`MAX_AGE_S` is measured again. With several processes (``distributed``) every process
measures it afresh on the whole mesh: each must run the same copies.
"""

from __future__ import annotations

import json
import math
import os
import random
import socket
import time
from datetime import UTC, datetime
from pathlib import Path

import jax
import numpy as np

from analysis.runs.rundir import write_json_atomic
from analysis.statistics.stats import median_ci
from runner.worker import ceiling

SIZES = tuple(4 << (10 + 2 * i) for i in range(7))  # 4 KiB, 16 KiB, ... 16 MiB a device
REPEATS = 9  # with 9 samples the median's 95% interval drops the lowest and highest
DIP = 2.0  # a size lifted by more than this is inconsistent
SPREAD = 10.0  # ... and so is one whose median is known only within a factor of this (interval high / low)
MAX_AGE_S = 24 * 3600
CACHE_DIR = Path(os.environ.get("SHARDLAB_CEILING_DIR", Path.home() / ".cache" / "shardlab" / "ceiling"))
_memo: dict = {}


def smooth(sizes, samples) -> list[dict]:
    """Per size: the median copy rate, its interval, the smoothed value the points are held
    to, and whether the size is consistent (see the module's docstring). ``samples``: per size,
    the rates (B/s) measured; None or non-positive ones (a failed difference) are dropped."""
    rows = []
    for size, xs in zip(sizes, samples):
        x = [float(v) for v in xs if v is not None and v > 0]
        med = float(np.median(x)) if x else math.nan
        lo, hi = median_ci(x) if x else (math.nan, math.nan)
        rows.append(
            {"bytes_per_device": int(size), "n": len(x), "median_Bps": med, "ci_low_Bps": lo, "ci_high_Bps": hi}
        )
    for i, row in enumerate(rows):
        med = row["median_Bps"]
        around = [rows[j]["median_Bps"] for j in (i - 1, i + 1) if 0 <= j < len(rows)]
        around = [v for v in around if v == v]
        # a dip below both neighbours is lifted to the lower one; an edge has one neighbour,
        # and a real fall-off at the end of the range must stand, so edges are never lifted
        floor = min(around) if len(around) == 2 else math.nan
        value = med if not floor == floor or (med == med and med >= floor) else floor
        why = []
        if med != med:
            why.append("no sample")
        elif value > DIP * med:
            why.append(f"its median {med / 1e9:.3g} GB/s lies {value / med:.1f}x below both neighbouring sizes")
        if row["ci_low_Bps"] > 0 and row["ci_high_Bps"] > SPREAD * row["ci_low_Bps"]:
            why.append(
                f"its repeats spread {row['ci_low_Bps'] / 1e9:.3g}-{row['ci_high_Bps'] / 1e9:.3g} GB/s "
                f"(95% interval of the median, {row['n']} repeats)"
            )
        row.update(
            busbw_Bps=value,
            ci_high_Bps=max(row["ci_high_Bps"], value) if value == value else row["ci_high_Bps"],
            inconsistent="; ".join(why) or None,
        )
    return rows


def at(curve: dict, bytes_per_device: float) -> dict:
    """The ceiling record of a point whose devices each move ``bytes_per_device`` bus bytes:
    the curve read at that size (log-log between its sizes, its ends beyond them)."""
    rows = curve["points"]
    sizes = np.array([r["bytes_per_device"] for r in rows], float)
    b = float(min(max(bytes_per_device, sizes[0]), sizes[-1]))
    j = int(np.searchsorted(sizes, b))
    i, j = (j, j) if j < len(rows) and sizes[j] == b else (max(j - 1, 0), min(j, len(rows) - 1))
    w = 0.0 if i == j else (math.log(b) - math.log(sizes[i])) / (math.log(sizes[j]) - math.log(sizes[i]))

    def interp(key: str) -> float | None:
        a, c = rows[i][key], rows[j][key]
        if not (a and c and a > 0 and c > 0):
            return None
        return float(math.exp((1 - w) * math.log(a) + w * math.log(c)))

    bad = [f"{_fmt(rows[k]['bytes_per_device'])}: {rows[k]['inconsistent']}" for k in {i, j} if rows[k]["inconsistent"]]
    return {
        "kind": "device_copy",
        "busbw_Bps": interp("busbw_Bps"),
        "ci_low_Bps": interp("ci_low_Bps"),
        "ci_high_Bps": interp("ci_high_Bps"),
        "inconsistent": "; ".join(sorted(bad)) or None,
        "bytes_per_device": int(bytes_per_device),
        "devices": curve["devices"],
        "curve": {k: curve[k] for k in ("measured_at", "file", "repeats", "wall_s", "reused") if k in curve},
        "what": f"each of the {curve['devices']} devices reading and writing its bus bytes at once (x+1 in an XLA "
        f"loop); the median of {curve['repeats']} interleaved repeats at {len(rows)} sizes, read at this size",
    }


def _fmt(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def measure(mesh, sizes=SIZES, repeats: int = REPEATS, clock=time.perf_counter, seed: int = 0) -> dict:
    """Measure the curve on ``mesh``'s devices: ``repeats`` rounds over ``sizes``, each round
    in a shuffled order (the same in every process: ``seed``)."""
    t0 = clock()
    rng = random.Random(seed)
    samples: dict[int, list] = {s: [] for s in sizes}
    try:
        for _ in range(repeats):
            order = list(sizes)
            rng.shuffle(order)
            for s in order:
                samples[s].append(ceiling.device_copy(mesh, s, repeats=1, clock=clock, keep=True)["busbw_Bps"])
    finally:
        ceiling.release()
    return {
        "points": smooth(sizes, [samples[s] for s in sizes]),
        "samples_Bps": {str(s): samples[s] for s in sizes},
        "repeats": repeats,
        "devices": int(mesh.devices.size),
        "wall_s": clock() - t0,
    }


def key() -> dict:
    """What a cached curve must match: this host, JAX version and device count."""
    return {"host": socket.gethostname(), "jax_version": jax.__version__, "devices": jax.device_count()}


def cpu_curve(now: float | None = None) -> dict:
    """The copy curve for this process's devices: kept from earlier in this process, read
    from the cache file (same key, younger than :data:`MAX_AGE_S`), or measured and saved."""
    k = key()
    path = CACHE_DIR / f"{k['host']}-jax{k['jax_version']}-{k['devices']}dev.json"
    now = time.time() if now is None else now
    single = jax.process_count() == 1
    if _memo.get("key") == k and now - _memo["curve"]["measured_unix"] < MAX_AGE_S:
        return _memo["curve"]
    curve = _read(path, k, now) if single else None
    if curve is None:
        curve = measure(jax.make_mesh((jax.device_count(),), ("X",)))
        curve.update(k, measured_unix=now, measured_at=datetime.fromtimestamp(now, UTC).isoformat())
        curve["reused"] = False
        if single:
            curve["file"] = str(path)
            _write(path, curve)
    _memo.update(key=k, curve=curve)
    return curve


def _read(path: Path, k: dict, now: float) -> dict | None:
    try:
        curve = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(curve, dict) or any(curve.get(f) != v for f, v in k.items()):
        return None
    if not (0 <= now - float(curve.get("measured_unix", -math.inf)) < MAX_AGE_S) or not curve.get("points"):
        return None
    return dict(curve, reused=True, file=str(path))


def _write(path: Path, curve: dict) -> None:
    try:
        write_json_atomic(path, curve)
    except OSError:  # a read-only home: the curve still serves this process
        pass
