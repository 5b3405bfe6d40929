"""Untraced timing of one compiled step: warm up until settled, then iterate until the
median is known well enough or the budget is spent.

By default every iteration blocks before the next starts. That bounds the work in flight
(2000 unblocked 8-device CPU all-gathers deadlocked XLA's rendezvous and aborted the process
after 40 s, jax 0.10.2) and makes each sample one whole step as a caller sees it. ``iters_per_sample`` > 1
dispatches that many steps before blocking (still bounded), which hides the launch and sync
cost on GPU/TPU; on CPU it changed nothing measurable here.

The sample source and the clock are parameters, so the stopping rules can be tested with
seeded samples and a fake clock instead of real time.
"""
from __future__ import annotations

import time

import numpy as np

from analysis.stats import rel_ci_halfwidth, summarize

CHECK_EVERY = 10  # re-evaluate the stopping rule every this many samples
WARMUP_WINDOW = 3  # warm-up ends when the median of the last 3 is within 10% of the 3 before
WARMUP_TOLERANCE = 0.1


def once(step, k: int = 1) -> float:
    """Seconds per step over ``k`` back-to-back steps, blocking on the last."""
    t0 = time.perf_counter()
    for _ in range(k - 1):
        step()
    step().block_until_ready()
    return (time.perf_counter() - t0) / k


def _local(flag: bool) -> bool:
    return flag


def warm_up(step, min_iters: int, max_s: float, agree=_local, sample=once, clock=time.perf_counter) -> list[float]:
    """Run until the median of the last 3 iterations is within 10% of the 3 before them,
    or ``max_s`` has passed."""
    times: list[float] = []
    t_end = clock() + max_s
    while True:
        times.append(sample(step))
        if len(times) >= max(min_iters, 2 * WARMUP_WINDOW):
            prev = np.median(times[-2 * WARMUP_WINDOW:-WARMUP_WINDOW])
            last = np.median(times[-WARMUP_WINDOW:])
            if agree(abs(last - prev) <= WARMUP_TOLERANCE * prev or clock() > t_end):
                return times


def time_step(step, timing: dict, agree=_local, sample=once, clock=time.perf_counter) -> dict:
    """Timing samples of ``step`` (a callable returning a JAX array) and their summary.

    ``agree`` turns each local stop decision into the one every process follows (with
    several JAX processes, process 0's: see :func:`runner.meshes.agree`). ``sample(step, k)``
    returns seconds per step over ``k`` steps; ``clock()`` returns seconds.
    """
    t_start = clock()
    warm = warm_up(step, timing["warmup_min_iters"], timing["warmup_max_s"], agree, sample, clock)
    t_warm = clock()
    samples: list[float] = []
    stop = "max_iters"
    while len(samples) < timing["max_iters"]:
        samples.append(sample(step, timing["iters_per_sample"]))
        n = len(samples)
        if n >= timing["min_iters"] and n % CHECK_EVERY == 0:
            tight = rel_ci_halfwidth(samples) <= timing["target_rel_ci"]
            spent = clock() - t_warm >= timing["budget_s"]
            if agree(tight or spent):
                stop = "ci_tight" if tight else ("budget" if spent else "process 0")
                break
    t_done = clock()
    return {
        "samples_s": samples,
        "summary": summarize(samples),
        "warmup_iters": len(warm),
        "warmup_s": t_warm - t_start,
        "timed_s": t_done - t_warm,
        "stop_reason": stop,
    }
