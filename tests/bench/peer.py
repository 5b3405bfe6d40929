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


POLICIES = ("quick", "default")  # timing=<policy>: the quick look and the trustworthy default


def side_by_side(work: Path, repeats: int = 2) -> dict:
    """The same 10 points (AllGather and AllReduce at 1 KiB-64 MiB) through shardlab, as a user
    runs them (a multirun with its rounds, checks, traces and report), under ``timing=quick``
    and under the default, and through a minimal loop in the style of accelerator-microbenchmarks
    (tests/bench/peer_loop.py: one process, 20 warm-up and 20 timed calls, the median) with the
    environment shardlab's worker gets. Each is its own process, interleaved ``repeats`` times.

    Two ratios to the loop per policy: *as processes*, each command's whole wall time (start,
    JAX, report included); *in-process*, the points' own wall times only (shardlab's ``wall_s``
    of every point and the later rounds; the loop's per-point ``wall_s``), what each costs once
    its process is up."""
    from shardlab_cli import runner

    from runner.config.jaxenv import process_env

    env = {**os.environ, **process_env({"kind": "cpu", "device_count": 8})}
    ops = ",".join(sorted({op for op, _ in PEER_POINTS}))
    sizes = ",".join(dict.fromkeys(size for _, size in PEER_POINTS))
    walls = {p: [] for p in (*POLICIES, "loop")}
    inner = {p: [] for p in (*POLICIES, "loop")}
    medians, parts, work_ratio = {}, [], []
    for k in range(repeats):
        results = {}
        for policy in POLICIES:
            out = work / f"peer_{policy}_{k}"
            t0 = time.time()
            runner(
                "-m",
                f"timing={policy}",
                f"op={ops}",
                f"op.size_bytes={sizes}",
                f"hydra.sweep.dir={out}",
                timeout=1800,
                expect=0,
            )
            total = time.time() - t0
            walls[policy].append(total)
            results[policy] = [json.loads(p.read_text()) for p in sorted(out.glob("*/result.json"))]
            inner[policy].append(points_wall_s(results[policy]))
            if policy == "default":
                parts.append(breakdown.parts(results[policy], total, t0, breakdown.report_s(out)))
                work_ratio.append(device_work_ratio(results[policy]))
        t0 = time.time()
        proc = subprocess.run(
            [sys.executable, str(REPO / "tests" / "bench" / "peer_loop.py"), *(f"{o}:{s}" for o, s in PEER_POINTS)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=1800,
        )
        walls["loop"].append(time.time() - t0)
        lines = [json.loads(line) for line in proc.stdout.splitlines()]
        inner["loop"].append(sum(p["wall_s"] for p in lines))
        rs = {(r["spec"]["op"], r["spec"]["size_bytes"]): r for r in results["default"]}
        for p in lines:
            r = rs.get((p["op"], p["size_bytes"]))
            if r and r["status"] == "ok":
                ratio = r["timing"]["summary"]["median_s"] / p["median_s"]
                medians.setdefault((p["op"], p["size_bytes"]), []).append(ratio)
    ratios = {f"{op} {size >> 10} KiB": float(np.median(v)) for (op, size), v in sorted(medians.items())}
    per_point = {name: float(np.median([p[name] for p in parts])) / len(PEER_POINTS) for name in parts[0]}
    untimed = sum(v for name, v in per_point.items() if name not in breakdown.NOT_OVERHEAD)
    loop_wall, loop_inner = float(np.median(walls["loop"])), float(np.median(inner["loop"]))
    return {
        "points": len(PEER_POINTS),
        "repeats": repeats,
        "peer_wall_per_point_s": loop_wall / len(PEER_POINTS),
        "policies": {
            p: {
                "wall_s": float(np.median(walls[p])),
                "wall_ratio": float(np.median(walls[p])) / loop_wall,  # as processes
                "in_process_ratio": float(np.median(inner[p])) / loop_inner,
                "wall_ratios_each": [w / lw for w, lw in zip(walls[p], walls["loop"])],
            }
            for p in POLICIES
        },
        "loop_wall_s": loop_wall,
        # the default's figures, as before
        "shardlab_wall_per_point_s": float(np.median(walls["default"])) / len(PEER_POINTS),
        "wall_ratio": float(np.median(walls["default"])) / loop_wall,
        "median_ratio_by_point": ratios,
        "shardlab_parts_per_point_s": per_point,
        "device_work_ratio": float(np.median(work_ratio)),
        # what shardlab costs a point apart from timing and compiling, against the loop's whole point
        "untimed_ratio": untimed / (loop_wall / len(PEER_POINTS)),
    }


def points_wall_s(results: list[dict]) -> float:
    """Seconds the points themselves took in shardlab: each point's round 1 (``wall_s``, from
    Hydra handing it over to its result written) and its later rounds (their phases)."""
    later = sum(v for r in results for k, v in (r.get("phases_s") or {}).items() if k.startswith("rounds_"))
    return sum(r["wall_s"] for r in results) + later


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
        f"\nthe same {p['points']} points (AllGather, AllReduce at 1 KiB-64 MiB), each command its own process, "
        f"{p['repeats']} interleaved repeats; the minimal loop (accelerator-microbenchmarks style, 20+20 calls) "
        f"took {p['loop_wall_s']:.1f} s"
    )
    for name, f in p["policies"].items():
        each = ", ".join(f"{r:.2f}x" for r in f["wall_ratios_each"])
        print(
            f"    timing={name:<8s} {f['wall_s']:6.1f} s: {f['wall_ratio']:.2f}x the loop as processes ({each}), "
            f"{f['in_process_ratio']:.2f}x in-process (the points' own wall time, JAX's start and the report left out)"
        )
    rs = p["median_ratio_by_point"]
    print("    shardlab's median (default) / the loop's: " + ", ".join(f"{k} {v:.2f}" for k, v in rs.items()))
    parts = sorted(p["shardlab_parts_per_point_s"].items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{name} {secs:.2f} s" for name, secs in parts if secs >= 0.005)
    print("    the default's time a point: " + shown)
    print(
        f"    the default runs its programs {p['device_work_ratio']:.1f}x as long as the loop (rounds, warm-ups, "
        f"the loop estimator, check, trace); apart from timing and compiling it costs "
        f"{p['untimed_ratio']:.2f}x the loop's whole point"
    )
