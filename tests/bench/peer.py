"""The benchmark's side-by-side with a peer (``tests/bench/run.py --only peer``): the same 10
points through shardlab as a user runs them and through a minimal loop in the style of Google's
accelerator-microbenchmarks (:mod:`peer_loop`, run as its own process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import breakdown
import numpy as np
import peer_loop

REPO = Path(__file__).resolve().parents[2]
PEER_SIZES = ("1KiB", "64KiB", "1MiB", "16MiB", "64MiB")
PEER_POINTS = [(op, size) for op in ("all_gather", "all_reduce") for size in PEER_SIZES]


def side_by_side(work: Path, repeats: int = 2) -> dict:
    """The same 10 points (AllGather and AllReduce at 1 KiB-64 MiB) through shardlab, as a user
    runs them (a multirun with its default rounds, checks, traces and report), and through a
    minimal loop in the style of accelerator-microbenchmarks (tests/bench/peer_loop.py: one
    process, 20 warm-up and 20 timed calls, the median) with the environment shardlab's worker
    gets. Interleaved ``repeats`` times; wall time per point, and the medians side by side."""
    from shardlab_cli import runner

    from runner.config.jaxenv import process_env

    env = {**os.environ, **process_env({"kind": "cpu", "device_count": 8})}
    ops = ",".join(sorted({op for op, _ in PEER_POINTS}))
    sizes = ",".join(dict.fromkeys(size for _, size in PEER_POINTS))
    ours, peers, medians, parts, work_ratio = [], [], {}, [], []
    for k in range(repeats):
        out = work / f"peer_sweep_{k}"
        t0 = time.time()
        runner("-m", f"op={ops}", f"op.size_bytes={sizes}", f"hydra.sweep.dir={out}", timeout=1800, expect=0)
        total = time.time() - t0
        ours.append(total / len(PEER_POINTS))
        results = [json.loads(p.read_text()) for p in sorted(out.glob("*/result.json"))]
        parts.append(breakdown.parts(results, total, t0, breakdown.report_s(out)))
        work_ratio.append(device_work_ratio(results))
        t0 = time.time()
        proc = subprocess.run(
            [sys.executable, str(REPO / "tests" / "bench" / "peer_loop.py"), *(f"{o}:{s}" for o, s in PEER_POINTS)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=1800,
        )
        peers.append((time.time() - t0) / len(PEER_POINTS))
        rs = {
            (r["spec"]["op"], r["spec"]["size_bytes"]): r
            for r in (json.loads(p.read_text()) for p in out.glob("*/result.json"))
        }
        for line in proc.stdout.splitlines():
            p = json.loads(line)
            r = rs.get((p["op"], p["size_bytes"]))
            if r and r["status"] == "ok":
                ratio = r["timing"]["summary"]["median_s"] / p["median_s"]
                medians.setdefault((p["op"], p["size_bytes"]), []).append(ratio)
    ratios = {f"{op} {size >> 10} KiB": float(np.median(v)) for (op, size), v in sorted(medians.items())}
    per_point = {name: float(np.median([p[name] for p in parts])) / len(PEER_POINTS) for name in parts[0]}
    untimed = sum(v for name, v in per_point.items() if name not in breakdown.NOT_OVERHEAD)
    return {
        "points": len(PEER_POINTS),
        "repeats": repeats,
        "shardlab_wall_per_point_s": float(np.median(ours)),
        "peer_wall_per_point_s": float(np.median(peers)),
        "wall_ratio": float(np.median(ours) / np.median(peers)),
        "median_ratio_by_point": ratios,
        "shardlab_parts_per_point_s": per_point,
        "device_work_ratio": float(np.median(work_ratio)),
        # what shardlab costs a point apart from timing and compiling, against the loop's whole point
        "untimed_ratio": untimed / float(np.median(peers)),
    }


def device_work_ratio(results: list[dict]) -> float:
    """How much more program time shardlab's measurement policy runs than the minimal loop:
    every point's program executions (:func:`breakdown.executions`) at its median step time,
    over 40 executions (20 warm-up, 20 timed) of each at the same time."""
    ours = theirs = 0.0
    for r in results:
        step = r["timing"]["estimators"]["step"]["median_s"]
        ours += breakdown.executions(r) * step
        theirs += (peer_loop.WARMUP + peer_loop.SAMPLES) * step
    return ours / theirs


def print_figures(p: dict) -> None:
    """The side-by-side in a few lines."""
    print(
        f"\nthe same {p['points']} points, shardlab (a default multirun) against a minimal loop "
        f"(accelerator-microbenchmarks style, 20+20 calls), {p['repeats']} interleaved repeats: "
        f"{p['shardlab_wall_per_point_s']:.1f} s vs {p['peer_wall_per_point_s']:.1f} s a point, "
        f"ratio {p['wall_ratio']:.2f}"
    )
    rs = p["median_ratio_by_point"]
    print("    shardlab's median / the loop's: " + ", ".join(f"{k} {v:.2f}" for k, v in rs.items()))
    parts = sorted(p["shardlab_parts_per_point_s"].items(), key=lambda kv: -kv[1])
    print("    shardlab's time a point: " + ", ".join(f"{name} {secs:.2f} s" for name, secs in parts if secs >= 0.005))
    print(
        f"    shardlab runs its programs {p['device_work_ratio']:.1f}x as long as the loop (rounds, warm-ups, "
        f"the loop estimator, check, trace); apart from timing and compiling it costs "
        f"{p['untimed_ratio']:.2f}x the loop's whole point"
    )
