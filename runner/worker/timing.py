"""Untraced timing of one compiled step: warm up until settled, then iterate until the
median is known well enough or the budget is spent.

By default every iteration blocks before the next starts. That bounds the work in flight
(2000 unblocked 8-device CPU all-gathers deadlocked XLA's rendezvous and aborted the process
after 40 s, jax 0.10.2) and makes each sample one whole step as a caller sees it. ``iters_per_sample`` > 1
dispatches that many steps before blocking (still bounded), which hides the launch and sync
cost on GPU/TPU; on CPU it changed nothing measurable here.

Which estimator a point's tables use, and when the loop cross-check runs, are decided over the
samples in :mod:`runner.worker.estimators`.

The sampler (``sample``) and the clock are parameters, so the stopping rules can be tested with
seeded samples and a fake clock instead of real time.

Two of the three estimators are timed here: *step* (:func:`time_step`, the wall time of one
blocked step, as a caller sees it) and *loop* (:func:`time_loop`, the program repeated K1 and
K2 times in one call; the slope between them leaves out what a call pays once; beside it the
same loop with an empty body, whose slope is what a repetition costs the loop itself). The
third, *device*, comes from the trace (:mod:`runner.worker.measure`).
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import time

import numpy as np

from analysis.statistics.stats import rel_ci_halfwidth, summarize


class Phases(dict):
    """Seconds spent in each named phase of a point, for the benchmark's breakdown. (It travels
    back to the main process with the result: defined here, not beside JAX, so that unpickling
    it imports no JAX there.)"""

    @contextlib.contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self[name] = self.get(name, 0.0) + time.perf_counter() - t0


CHECK_EVERY = 5  # re-evaluate the stopping rule every this many samples
WARMUP_WINDOW = 2  # warm-up ends when the median of the last 2 is within 10% of the 2 before
WARMUP_TOLERANCE = 0.1
# A later round of a point whose program and inputs stayed in the worker warms up with one step:
# what a warm-up settles (first-touch page faults, allocations, compiled-code caches) round 1 has
# paid. Measured on the 2-core machine: minor page faults a step 862 in round 1 of a 64 MiB
# AllGather, 0 in each later round; the settling warm-up took 4-10 steps a round there (0.2-0.5 s
# of a 45 ms step), what the round's samples took. The drift the rounds exist to catch is in the
# samples, not in the warm-up.
LATER_ROUND_WARM_ITERS = 1
LOOP_MIN_SAMPLES = 3  # slopes a loop round takes before its stopping rule may end it
EMPTY_LOOP_PAIRS = 5  # slopes of the empty loop a round takes (a fixed count: no process decides alone)


def wait(out) -> None:
    """Block until ``out`` (a JAX array, or a tuple of them: a whole training step's
    outputs) is computed."""
    if isinstance(out, (tuple, list)):
        for x in out:
            wait(x)
    else:
        out.block_until_ready()


def once(step, k: int = 1) -> float:
    """Seconds per step over ``k`` back-to-back steps, blocking on the last."""
    t0 = time.perf_counter()
    for _ in range(k - 1):
        step()
    wait(step())
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
        if len(times) >= 2 * WARMUP_WINDOW:
            prev = np.median(times[-2 * WARMUP_WINDOW : -WARMUP_WINDOW])
            last = np.median(times[-WARMUP_WINDOW:])
            settled = abs(last - prev) <= WARMUP_TOLERANCE * prev and len(times) >= min_iters
            if agree(settled or clock() > t_end):  # warmup_max_s bounds warmup_min_iters too
                return times


def time_step(
    step, timing: dict, agree=_local, sample=once, clock=time.perf_counter, warm_iters: int | None = None
) -> dict:
    """Timing samples of ``step`` (a callable returning a JAX array) and their summary.

    ``agree`` turns each local stop decision into the one every process follows (with
    several JAX processes, process 0's: see :func:`runner.worker.meshes.agree`). ``sample(step, k)``
    returns seconds per step over ``k`` steps; ``clock()`` returns seconds. ``warm_iters``: a
    warm-up of exactly that many steps instead of :func:`warm_up`'s settling (a later round of
    a point whose program and inputs stayed in the worker, :data:`LATER_ROUND_WARM_ITERS`).
    """
    t_start = clock()
    if warm_iters is None:
        warm = warm_up(step, timing["warmup_min_iters"], timing["warmup_max_s"], agree, sample, clock)
    else:
        warm = [sample(step) for _ in range(warm_iters)]
    t_warm = clock()
    samples: list[float] = []
    stop = "max_iters"
    while len(samples) < timing["max_iters"]:
        samples.append(sample(step, timing["iters_per_sample"]))
        n = len(samples)
        if n % CHECK_EVERY == 0:
            # The budget holds even before min_iters: a slow step with a large min_iters would
            # otherwise run on until timeout_s and lose every sample with the worker.
            spent = clock() - t_warm >= timing["budget_s"]
            tight = n >= timing["min_iters"] and rel_ci_halfwidth(samples) <= timing["target_rel_ci"]
            if agree(tight or spent):
                stop = "ci_tight" if tight else ("budget" if n >= timing["min_iters"] else "budget (before min_iters)")
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


def time_loop(calls, Ks, timing: dict, agree=_local, clock=time.perf_counter, empty=None, kept: bool = False) -> dict:
    """The *loop* estimator: seconds per repetition, from the slope between two trip counts.

    ``calls[i]()`` runs the loop program with ``Ks[i]`` repetitions (K1 < K2) and blocks. Each
    sample is one pair, (t(K2) - t(K1)) / (K2 - K1): what a call pays once - the dispatch and
    sync, and any copy XLA makes before its while loop - cancels, where t(K) / K divided it
    into the repetitions (at K = 2-3 a 16 MiB ReduceScatter read 1.99x the blocked step).
    The two calls of a pair alternate in order, so a drift within a pair lifts half the
    samples and lowers the other half. One warm-up call of each, then pairs until the
    interval is within ``timing.target_rel_ci``, at least 3 and at most
    ``timing.loop_max_samples``, or half the round's budget (counted after the warm-up) is
    spent (every stop on the decision ``agree`` shares). ``warmup_s`` and ``timed_s`` are the
    warm-up's and the pairs' seconds. ``clock()`` returns seconds.

    ``kept``: a later round of a point whose loop programs stayed compiled in the worker warms
    up with the short call only (as the step warms up with one step there,
    :data:`LATER_ROUND_WARM_ITERS`): a 64 MiB AllReduce's warm-up pair took 0.4 s a round.

    ``empty``: the same loop's calls with an empty body at the same Ks
    (:func:`runner.worker.programs.loop.empty_looped`). After the pairs, one warm-up call of
    each and :data:`EMPTY_LOOP_PAIRS` pairs give ``empty_loop_samples_s`` and their median
    ``empty_loop_s``, what a repetition costs the loop itself (``empty_loop_timed_s`` the
    seconds they took). It is recorded and compared (:func:`summarise`), not subtracted: the
    op's own launches are not in it, and a slope of a few microseconds is noisy (on CPU here it
    read -1.2 to 0.9 us).
    """
    (K1, K2), (short, long_) = Ks, calls
    t_warm = clock()
    short()
    if not kept:
        long_()
    samples: list[float] = []
    pairs: list[list[float]] = []
    stop = "max_samples"
    t_start = clock()
    while len(samples) < timing["loop_max_samples"]:
        t1, t2 = _timed_pair(calls, len(samples), clock)
        pairs.append([t1, t2])
        samples.append((t2 - t1) / (K2 - K1))
        if len(samples) >= LOOP_MIN_SAMPLES:
            tight = rel_ci_halfwidth(samples) <= timing["target_rel_ci"]
            spent = clock() - t_start >= timing["budget_s"] / 2
            if agree(tight or spent):
                stop = "ci_tight" if tight else "budget"
                break
    out = {
        "samples_s": samples,
        "K": K2,
        "Ks": [K1, K2],
        "call_s": pairs,
        "stop_reason": stop,
        "warmup_s": t_start - t_warm,  # time the estimator took, as the step's warm-up counts
        "warmup_calls": 1 if kept else 2,
        "timed_s": clock() - t_start,
    }
    if empty is not None:
        out.update(time_empty_loop(empty, Ks, clock))
    return out


def _timed_pair(calls, i: int, clock) -> tuple[float, float]:
    """Seconds of one call of each trip count (short, long), the short one first in even
    pairs and last in odd ones, so that a drift within a pair cancels over pairs."""
    short, long_ = calls
    t = {}
    for which, call in ((0, short), (1, long_)) if i % 2 == 0 else ((1, long_), (0, short)):
        t0 = clock()
        call()
        t[which] = clock() - t0
    return t[0], t[1]


def time_empty_loop(calls, Ks, clock=time.perf_counter) -> dict:
    """The empty loop's seconds per repetition (see :func:`time_loop`): one warm-up call of
    each K, then :data:`EMPTY_LOOP_PAIRS` slopes, the pairs' order alternating as the loop's."""
    (K1, K2), (short, long_) = Ks, calls
    t0 = clock()
    short()
    long_()
    samples: list[float] = []
    for i in range(EMPTY_LOOP_PAIRS):
        t1, t2 = _timed_pair(calls, i, clock)
        samples.append((t2 - t1) / (K2 - K1))
    return {
        "empty_loop_s": float(np.median(samples)),
        "empty_loop_samples_s": samples,
        "empty_loop_timed_s": clock() - t0,
    }


K_MIN, K_MAX = 4, 512


def given_Ks(K) -> list[int] | None:
    """The trip counts a later round reuses: round 1's [K1, K2], or from a result written before
    there were two (one K, the per-call estimator's), that K as K2."""
    if not K:
        return None
    if isinstance(K, int):
        return [max(2, K // 4), max(K, 3)]
    return [int(k) for k in K]


def loop_Ks(step_median_s: float, target_s: float) -> list[int]:
    """The two trip counts [K1, K2] of the loop estimator: K2 repetitions take about
    ``target_s`` (within a factor of 1.41: K2 is the nearest power of two, from 4 to 512), and
    K1 = K2 / 4, at least 2 (at K = 1 XLA removes the while loop and with it the input copy
    the slope must cancel). Where one repetition alone takes longer than ``target_s / 4`` (a
    large message), K = 2 and 4: the slope spans 2 repetitions, against whose milliseconds a
    call's jitter is small, and a pair costs 6 repetitions, not the 10 of K = 2 and 8, which
    made the loop most of a large point's time.

    Powers of two, because K is static (one program per K): a point's K then mostly comes out
    the same from sweep to sweep (it changes only where the step time crosses a boundary, a
    factor of 1.41 apart), and the next sweep finds its loop programs in the persistent
    compilation cache (about 0.25 s a point here: 4 compiles of 50-90 ms each, against 6 ms
    from the cache), where a K that followed each sweep's step time compiled afresh. Of three
    default sweeps in a row here, any two gave the same Ks at 11-13 of 17 points."""
    K2 = 2 ** round(math.log2(max(target_s / max(step_median_s, 1e-9), 1.0)))
    K2 = int(min(max(K2, K_MIN), K_MAX))
    return [max(2, K2 // 4), K2]


def minor_faults() -> int:
    """Minor page faults of this process so far (a buffer the OS hands back faults again)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def machine_state() -> dict:
    """What else the machine was doing: 1-minute load average and CPU count."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"loadavg_1m": load, "cpu_count": os.cpu_count()}
