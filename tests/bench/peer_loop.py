"""A minimal timing loop in the style of Google's accelerator-microbenchmarks, for the benchmark's
side-by-side (``tests/bench/run.py``): one process, and for each point the same sharded program
shardlab measures, jitted, 20 warm-up calls and 20 timed ``block_until_ready`` calls, the median.
(That is the setting at which the peer's medians agreed with shardlab's on this machine, issue 26;
as shipped it takes 2 warm-ups and 5 samples.) No check, no trace, no ceiling, no HLO, no rounds.

    python tests/bench/peer_loop.py all_gather:1KiB all_reduce:64MiB ...

Prints one JSON line per point: ``{"op", "size_bytes", "median_s", "wall_s"}``, ``wall_s`` the
point's wall time from building its input to its last sample (JAX's start is paid once, before).
Run it with the environment shardlab's worker gets (runner.config.jaxenv.process_env), so both
sides run the same process setup.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

WARMUP, SAMPLES = 20, 20


def main(points: list[str]) -> None:
    import jax
    import numpy as np

    from analysis.book.units import parse_size
    from runner.worker.programs import collectives

    mesh = jax.make_mesh((jax.device_count(),), ("X",), axis_types=(jax.sharding.AxisType.Explicit,))
    for point in points:
        op, size = point.split(":")
        t0 = time.perf_counter()
        prog = collectives.build(op, ["X"], mesh, parse_size(size), "float32")
        x = prog.make_input()
        f = jax.jit(prog.fn)
        for _ in range(WARMUP):
            jax.block_until_ready(f(x))
        ts = []
        for _ in range(SAMPLES):
            t = time.perf_counter()
            jax.block_until_ready(f(x))
            ts.append(time.perf_counter() - t)
        wall = time.perf_counter() - t0
        point = {"op": op, "size_bytes": parse_size(size), "median_s": float(np.median(ts)), "wall_s": wall}
        print(json.dumps(point), flush=True)
        del x


if __name__ == "__main__":
    main(sys.argv[1:])
