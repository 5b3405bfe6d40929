"""Untraced timing of one compiled step: warm up until settled, then iterate until the
median is known well enough or the budget is spent.

By default every iteration blocks before the next starts. That bounds the work in flight
(2000 unblocked 8-device CPU all-gathers deadlocked XLA's rendezvous and aborted the process
after 40 s, jax 0.10.2) and makes each sample one whole step as a caller sees it. ``iters_per_sample`` > 1
dispatches that many steps before blocking (still bounded), which hides the launch and sync
cost on GPU/TPU; on CPU it changed nothing measurable here.

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

from analysis.runs.record import DEVICE, LOOP, STEP, Estimate, LoopRule, Round, Samples, Timing
from analysis.statistics.stats import combine_rounds, rel_ci_halfwidth, summarize


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
# A loop whose round-1 interval lay apart from the source's is timed again in round 2 only: a gap
# seen in two rounds a sweep apart is the loop's own (it cancels what a call pays once), and the
# step's later rounds already measure the drift. On CPU here the small sizes disagree in nearly
# every sweep (loop/step 0.2-0.5 up to 512 KiB), and timing the loop in rounds 3-5 as well cost
# 0.1-0.2 s a round there and 1.2-1.7 s a round at 64 MiB, where a gap came and went run to run.
LOOP_LAST_ROUND = 2
LOOP_MIN_SAMPLES = 3  # slopes a loop round takes before its stopping rule may end it
EMPTY_LOOP_PAIRS = 5  # slopes of the empty loop a round takes (a fixed count: no process decides alone)
# The loop is *launch-bound* where its empty body's repetition (the loop's own cost: on a GPU,
# launching the body's kernels from the host) is more than this share of the loop's repetition:
# its slope then says more about the launch rate than about the op.
LAUNCH_BOUND_SHARE = 0.25


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


def loop_check_needless(step_median_s: float | None, timing: dict, backend: str) -> str | None:
    """Why round 1 leaves the *loop* cross-check out, or None where it runs.

    Left out only where the blocked *step* is the source estimator (CPU by default) and its
    round-1 median is at least ``timing.loop_check_below_s``. The step's wall time holds all a
    loop repetition does plus a call's fixed cost (dispatch and sync), so all the cross-check
    can find there is that fixed cost: on this project's 2-core machine about 0.2-0.26 ms
    (1 KiB AllGather and AllReduce, loop/step 0.32-0.54), 1.3% of a 20 ms step at most, a
    quarter of the default ``timing.target_rel_ci``. Above it the loop pays for a few
    repetitions of a long step (a 64 MiB AllReduce's: 1.7 s of a 3.4 s point) to read a
    difference the step's own rounds cannot resolve. Where the *device* estimator is the source
    (TPU, GPU) the loop always runs: there it checks what the trace counts, whatever the
    step's length. ``timing.loop_check_below_s`` null: the cross-check runs on every point."""
    limit = timing.get("loop_check_below_s")
    if limit is None or step_median_s is None or not timing.get("loop"):
        return None
    wanted = timing.get("estimator", "auto")
    source = AUTO_ESTIMATOR.get(backend, STEP) if wanted == "auto" else wanted
    if source != STEP or step_median_s < limit:
        return None
    return (
        f"left out: round 1's step took {step_median_s * 1e3:.3g} ms, at least timing.loop_check_below_s = "
        f"{limit * 1e3:g} ms, and a call's fixed cost, all the loop could read off the step, is lost in it"
    )


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


# The estimators are named once, as the record's keys (analysis.runs.record.ESTIMATORS). On TPU and
# GPU the device timestamps its own ops and the profiler does not slow them; on CPU the
# "device" is a host thread that the profiler slows 2-5x (traced one 8-device all-gather:
# 1.5-3.5 ms against 0.70 ms untraced), so there the blocked step is the truth.
AUTO_ESTIMATOR = {"tpu": DEVICE, "gpu": DEVICE, "cuda": DEVICE, "rocm": DEVICE}


def device_is_estimator(timing: dict, backend: str) -> bool:
    """Whether the fits use the *device* estimator (``timing.estimator``, or auto on TPU/GPU)."""
    wanted = timing.get("estimator", "auto")
    return (AUTO_ESTIMATOR.get(backend, STEP) if wanted == "auto" else wanted) == DEVICE


def summarise(t: Timing, timing: dict, backend: str) -> Timing:
    """``t`` (a point's ``timing``, its ``rounds`` and ``device`` samples) with its estimators
    combined over rounds and the one the tables and fits use: the fields of :func:`combined`
    set on it, in their places where ``t`` holds them already."""
    return t.with_(**combined(t, timing, backend))


def combined(t: Timing, timing: dict, backend: str) -> dict:
    """The fields :func:`summarise` sets, typed (``estimators``, ``estimator``,
    ``estimator_reason``, ``summary``, ``missing_reason``, ``page_faults_per_step``,
    ``loop_rule``): the estimators of ``t``'s rounds, combined over rounds, and the one the
    tables and fits use (``estimator``, ``summary``).

    ``timing.estimator=auto`` picks *device* on TPU and GPU and *step* on CPU. A *loop* estimator
    with no samples (a loop XLA did not keep) falls back to *step*, saying why; one
    whose rounds timed the empty loop carries ``empty_loop_s``, ``empty_loop_share`` and
    ``launch_bound`` (:func:`_launch_bound`: a flag, the loop's time stands). A *device*
    estimator never falls back: without device samples (no trace, or the trace held no execution
    of the collective) ``summary`` is empty (``n`` 0, no ``median_s``) and ``missing_reason``
    says why; the step and loop estimators stay in ``estimators`` under their own names.

    The loop may have fewer rounds than the others (:func:`loop_rule`: after round 1 it is
    timed again, in round 2, only where it disagreed with the source): its estimate combines the rounds
    that have it (with one, that round's order-statistic interval), its ``rounds`` says how
    many, and ``loop_rule`` says why.
    """
    rounds = t.rounds
    seed = int(timing.get("seed") or 0)
    estimators = {}
    # a round holds an estimator where it has its section at all, a key in it (combine_rounds
    # drops empty sample lists)
    step = [r.samples(STEP) for r in rounds if r.step.given()]
    if step:
        estimators[STEP] = Estimate.of(**combine_rounds(step, seed))
    looped = [r.loop for r in rounds if r.loop.given()]
    if looped:  # K of the last round that ran the loop (a round whose loop XLA did not keep has none)
        found = combine_rounds([x.samples_s or [] for x in looped], seed)
        estimators[LOOP] = Estimate.of(**found, K=looped[-1].K, **_launch_bound(looped, found.get("median_s")))
    # round 1's device samples come from the point's own trace; later rounds trace again only
    # where device is the estimator (runner.worker.point_round.retime)
    device = [t.device.samples_s or []] + [r.samples(DEVICE) for r in rounds[1:] if r.samples(DEVICE)]
    if device[0]:
        estimators[DEVICE] = Estimate.of(**combine_rounds(device, seed))
    wanted = timing.get("estimator", "auto")
    estimator = AUTO_ESTIMATOR.get(backend, STEP) if wanted == "auto" else wanted
    why = f"timing.estimator={wanted}" + (f" on {backend}" if wanted == "auto" else "")
    missing = None
    if estimator == DEVICE and estimator not in estimators:
        # No fallback: where device time is asked for, a blocked step's wall time (the host's
        # dispatch and sync with it) is not a stand-in: XProf would show no such number. The
        # point keeps its status and its step/loop estimators, but has no headline time.
        missing = f"no device time: {_why_missing(estimator, t)}"
        why += f"; {missing}"
    elif estimator not in estimators:
        why += f"; no {estimator} samples ({_why_missing(estimator, t)}), so {STEP}"
        estimator = STEP
    faults = [r.page_faults_per_step for r in rounds if r.page_faults_per_step is not None]
    return {
        "estimators": estimators,
        "estimator": estimator,
        "estimator_reason": why,
        "summary": estimators.get(estimator, Estimate.of(n=0)),
        "missing_reason": missing,
        "page_faults_per_step": float(np.median(faults)) if faults else None,
        "loop_rule": loop_rule(t, estimator),
    }


def loop_rule(t: Timing, source: str) -> LoopRule:
    """Whether a point's later rounds time the *loop* estimator again, decided on round 1 of
    its timing ``t`` alone (so the same whenever :func:`summarise` runs): ``rerun``,
    ``last_round``, ``why`` and ``source``, with ``loop_over_source``, round 1's loop median
    over the source's, where both have one.

    The loop runs in round 1 as a cross-check of the *source* estimator, the one the tables
    use (``source``: step on CPU, device on TPU and GPU). It *disagrees* when round 1's 95%
    intervals of the two (:func:`analysis.statistics.stats.median_ci`: the loop's slopes, the source's
    samples; round 1's device samples come from the point's own trace) do not overlap; only
    then is it timed again, in round 2 (``last_round``, :data:`LOOP_LAST_ROUND`), so that its
    interval spans two rounds' drift and the gap is seen twice. Where they overlap, later rounds
    would only confirm what the source's rounds already measure. Where the loop is the source
    (``timing.estimator=loop``), or round 1 has no source time to check it against, it runs
    every round (``last_round`` None)."""
    first = t.rounds[0] if t.rounds else Round()
    loop = first.samples(LOOP)
    out = {"source": source}
    if not loop:
        return LoopRule.of(**out, rerun=False, why=f"round 1 has no loop samples ({_why_missing(LOOP, t)})")
    if source == LOOP:
        return LoopRule.of(
            **out, rerun=True, last_round=None, why="the loop is the source estimator: timed in every round"
        )
    src = (t.device.samples_s or []) if source == DEVICE else first.samples(source)
    if not src:
        return LoopRule.of(
            **out,
            rerun=True,
            last_round=None,
            why=f"round 1 has no {source} time to check the loop against: timed in every round",
        )
    s, lp = summarize(src), summarize(loop)
    out["loop_over_source"] = lp["median_s"] / s["median_s"] if s["median_s"] > 0 else None
    ratio = f"loop/{source} {out['loop_over_source']:.2f}" if out["loop_over_source"] is not None else "no ratio"
    if lp["ci_low_s"] > s["ci_high_s"] or lp["ci_high_s"] < s["ci_low_s"]:
        return LoopRule.of(
            **out,
            rerun=True,
            last_round=LOOP_LAST_ROUND,
            why=f"round 1's loop interval lies {'above' if lp['ci_low_s'] > s['ci_high_s'] else 'below'} the "
            f"{source}'s ({ratio}): timed again in round {LOOP_LAST_ROUND}",
        )
    overlap = f"round 1's loop interval overlaps the {source}'s ({ratio}): round 1 only"
    return LoopRule.of(**out, rerun=False, why=overlap)


def _launch_bound(looped: list[Samples], loop_s: float | None) -> dict:
    """``empty_loop_s``, the median over rounds of the empty loop's seconds per repetition,
    its share of the loop's (``empty_loop_share``) and ``launch_bound``: that share above
    :data:`LAUNCH_BOUND_SHARE`. Nothing where no round timed an empty loop."""
    empty_s = [x.empty_loop_s for x in looped if x.empty_loop_s is not None]
    if not empty_s:
        return {}
    median_s = float(np.median(empty_s))
    share = median_s / loop_s if loop_s and loop_s > 0 else None
    return {
        "empty_loop_s": median_s,
        "empty_loop_share": share,
        "launch_bound": share is not None and share > LAUNCH_BOUND_SHARE,
    }


def _why_missing(estimator: str, t: Timing) -> str:
    """Why ``estimator`` has no samples, in words a console line and the report can show."""
    if estimator == DEVICE:
        if not t.device.given():
            return "the point was not traced (trace.enabled=false, or its trace failed: see result.json's trace)"
        names = t.device.instructions
        if names is None:
            return "the trace held no device op of the program"
        if not names:
            return "the compiled program runs no instruction of the collective"
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        return f"the trace held no execution of {shown}"
    if estimator == LOOP:
        return (t.loop_check.why if t.loop_check is not None else None) or "timing.loop=false"
    return "it did not run"
