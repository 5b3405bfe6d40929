"""Rounds 2..R of a point's timing, interleaved across a sweep's points.

The machine drifts (other jobs, frequency, memory state): on the project's 2-core machine
the same 8 MiB AllReduce took 5.3 to 27.7 ms in five runs, each with a +-4% interval from
its own samples. So each point is timed in R rounds, and a sweep runs round r of every point
before round r+1 of any, in an order shuffled each round (the seed is recorded): drift then
hits every point alike, and a point's interval (:func:`analysis.stats.combine_rounds`)
covers the spread between its rounds.

Round 1 is part of a point's run (:func:`runner.measure.measure`); the rounds after it only
re-time the compiled program (:func:`runner.measure.retime`) and append to result.json.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

from omegaconf import OmegaConf

from analysis.rundir import RESULT_NAME, write_json_atomic
from runner.bandwidth import bandwidth
from runner.errors import ConfigError, WorkerDied
from runner.jaxenv import process_env
from runner.pool import discard_worker, get_worker
from runner.spec import build_spec
from runner.timing import summarise

log = logging.getLogger("shardlab")


def wanted_rounds(result: dict) -> int:
    """Rounds the point's config asks for."""
    return int(((result.get("config") or {}).get("timing") or {}).get("rounds") or 1)


def add_round(job_dir: Path, round_no: int, spec: dict | None = None) -> bool:
    """Time round ``round_no`` of the ok point in ``job_dir`` and append it to its
    result.json; False (and nothing written) when the point is not ok, already has the round,
    or the worker failed it."""
    path = Path(job_dir) / RESULT_NAME
    import json

    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    t = result.get("timing") or {}
    if result.get("status") != "ok" or len(t.get("rounds") or []) >= round_no:
        return False
    if spec is None:
        try:
            spec = build_spec(OmegaConf.create(result["config"]))
        except (ConfigError, KeyError) as exc:
            log.warning("round %d of %s skipped: %s", round_no, job_dir, exc)
            return False
    # round 1's trip counts: every round times the same loop programs (the persistent cache has them)
    loop = (t["rounds"][0].get("loop") or {}) if t.get("rounds") else {}
    K = loop.get("Ks") or loop.get("K")
    worker = get_worker(process_env(spec["hardware"], spec["distributed"], spec["trace"]["gpu_command_buffers"]))
    try:
        reply = worker.run(
            spec, job_dir, float(result["config"].get("timeout_s", 600)), kind="retime", round=round_no, K=K
        )
    except WorkerDied as exc:
        discard_worker()
        log.warning("round %d of %s failed: %s", round_no, Path(job_dir).name, str(exc).splitlines()[0])
        return False
    if reply.get("status") != "ok":
        log.warning("round %d of %s failed: %s", round_no, Path(job_dir).name, reply.get("error"))
        return False
    rnd = reply["round"]
    phases = rnd.pop("phases_s", {})
    t["rounds"].append(rnd)
    t.update(summarise(t, result["config"]["timing"], (result.get("environment") or {}).get("backend", "cpu")))
    if "bandwidth" in result:  # from the median of every round so far
        result["bandwidth"] = bandwidth(result)
    result.setdefault("phases_s", {})
    for k, v in phases.items():  # later rounds' setup and compile count too (the benchmark reads them)
        result["phases_s"][f"rounds_{k}"] = result["phases_s"].get(f"rounds_{k}", 0.0) + v
    write_json_atomic(path, result)
    return True


def interleave(job_dirs: list[Path], rounds: int, seed: int = 0) -> int:
    """Rounds 2..``rounds`` of every job, round by round, each round in a shuffled order.
    Returns how many rounds were added."""
    rng = random.Random(seed)
    added = 0
    for r in range(2, rounds + 1):
        order = list(job_dirs)
        rng.shuffle(order)
        log.info("round %d of %d: %d point(s)", r, rounds, len(order))
        for job_dir in order:
            added += add_round(job_dir, r)
    return added
