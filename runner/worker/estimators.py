"""Which estimator a point's tables and fits use, and when the *loop* cross-check runs.

:mod:`runner.worker.timing` takes the samples (*step*, *loop*); the trace gives *device*. Here
they are combined over rounds (:func:`summarise`), the source estimator is picked
(``timing.estimator``: *device* on TPU and GPU, *step* on CPU under ``auto``), and the loop's
two rules are made: whether round 1 times it at all (:func:`loop_check_needless`) and whether a
later round times it again (:func:`loop_rule`). Both the worker (after round 1) and the sweep
(after each later round) call :func:`summarise`, so a point's record reads the same whoever
wrote it last.
"""

from __future__ import annotations

import numpy as np

from analysis.runs.record import DEVICE, LOOP, STEP, Estimate, LoopRule, Round, Samples, Timing
from analysis.statistics.stats import combine_rounds, summarize

# A loop whose round-1 interval lay apart from the source's is timed again in round 2 only: a gap
# seen in two rounds a sweep apart is the loop's own (it cancels what a call pays once), and the
# step's later rounds already measure the drift. On CPU here the small sizes disagree in nearly
# every sweep (loop/step 0.2-0.5 up to 512 KiB), and timing the loop in rounds 3-5 as well cost
# 0.1-0.2 s a round there and 1.2-1.7 s a round at 64 MiB, where a gap came and went run to run.
LOOP_LAST_ROUND = 2
# The loop is *launch-bound* where its empty body's repetition (the loop's own cost: on a GPU,
# launching the body's kernels from the host) is more than this share of the loop's repetition:
# its slope then says more about the launch rate than about the op.
LAUNCH_BOUND_SHARE = 0.25


# The estimators are named once, as the record's keys (analysis.runs.record.ESTIMATORS). On TPU and
# GPU the device timestamps its own ops and the profiler does not slow them; on CPU the
# "device" is a host thread that the profiler slows 2-5x (traced one 8-device all-gather:
# 1.5-3.5 ms against 0.70 ms untraced), so there the blocked step is the truth.
AUTO_ESTIMATOR = {"tpu": DEVICE, "gpu": DEVICE, "cuda": DEVICE, "rocm": DEVICE}


def source_estimator(timing: dict, backend: str) -> str:
    """The estimator the tables and fits use: ``timing.estimator``, or under ``auto`` *device*
    on TPU and GPU and *step* elsewhere (before any fallback :func:`combined` makes)."""
    wanted = timing.get("estimator", "auto")
    return AUTO_ESTIMATOR.get(backend, STEP) if wanted == "auto" else wanted


def device_is_estimator(timing: dict, backend: str) -> bool:
    """Whether the fits use the *device* estimator (``timing.estimator``, or auto on TPU/GPU)."""
    return source_estimator(timing, backend) == DEVICE


def loop_check_needless(step_median_s: float | None, timing: dict, backend: str) -> str | None:
    """Why round 1 leaves the *loop* cross-check out, or None where it runs.

    Left out only where the blocked *step* is the source estimator (CPU by default) and its
    round-1 median is at least ``timing.loop_check_below_s``. The step's wall time holds all a
    loop repetition does plus a call's fixed cost (dispatch and sync), so all the cross-check
    can find there is that fixed cost: on this project's 2-core machine step minus loop at
    1 KiB read 0.07-0.18 ms (AllGather and AllReduce, four sweeps), under 1% of a 20 ms step,
    a fifth of the default ``timing.target_rel_ci``. Above it the loop pays for a few
    repetitions of a long step (a 64 MiB AllReduce's: 1.7 s of a 3.4 s point) to read a
    difference the step's own rounds cannot resolve. Where the *device* estimator is the source
    (TPU, GPU) the loop always runs: there it checks what the trace counts, whatever the
    step's length. ``timing.loop_check_below_s`` null: the cross-check runs on every point."""
    limit = timing.get("loop_check_below_s")
    if limit is None or step_median_s is None or not timing.get("loop"):
        return None
    if source_estimator(timing, backend) != STEP or step_median_s < limit:
        return None
    return (
        f"left out: round 1's step took {step_median_s * 1e3:.3g} ms, at least timing.loop_check_below_s = "
        f"{limit * 1e3:g} ms, and a call's fixed cost, all the loop could read off the step, is lost in it"
    )


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
    estimator = source_estimator(timing, backend)
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
