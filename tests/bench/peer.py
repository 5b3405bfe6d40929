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

import numpy as np

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
    ours, peers, medians = [], [], {}
    for k in range(repeats):
        out = work / f"peer_sweep_{k}"
        t0 = time.time()
        runner("-m", f"op={ops}", f"op.size_bytes={sizes}", f"hydra.sweep.dir={out}", timeout=1800, expect=0)
        ours.append((time.time() - t0) / len(PEER_POINTS))
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
    return {
        "points": len(PEER_POINTS),
        "repeats": repeats,
        "shardlab_wall_per_point_s": float(np.median(ours)),
        "peer_wall_per_point_s": float(np.median(peers)),
        "wall_ratio": float(np.median(ours) / np.median(peers)),
        "median_ratio_by_point": ratios,
    }


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
