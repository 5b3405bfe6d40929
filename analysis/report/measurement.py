"""How a sweep's numbers were taken, in words: the estimator, rounds, intervals, dispatch,
profiler slowdown and page faults (the report's *How these numbers were taken*)."""

from __future__ import annotations

import pandas as pd

from analysis.book.collectives import BY_OP
from analysis.book.units import fmt_bytes
from analysis.report.document import fmt
from analysis.runs.record import DEVICE, IMPORTED, LOOP, ONE_ROUND, STEP
from analysis.runs.summary import TRACE_SLOWDOWN_LIMIT

ESTIMATOR_WORDS = {
    STEP: "the wall time of one blocked step (what a caller sees, the host's dispatch and sync included)",
    LOOP: "per repetition, the slope between two loop calls of K1 and K2 repetitions (a call's fixed costs cancel)",
    DEVICE: "the devices' own op times from the profiler trace",
    # a point imported from another tool's log: that tool's time, not ours (analysis.importers)
    IMPORTED: "the time the imported log reports (that tool's average over its own iterations; no samples of ours, "
    "so no interval)",
}


def _rounds_words(pts: pd.DataFrame, rounds: pd.Series) -> str:
    """How many rounds the points took: adaptive rounds stop a point after 2 when they agree
    and its interval meets the target (``rounds_why`` says which did; the count of the points
    that stopped early is read from the points, so an older sweep's 3 reads as 3)."""
    wanted = pts["rounds_wanted"].dropna() if "rounds_wanted" in pts else pd.Series(dtype=float)
    if not len(wanted) or rounds.min() == rounds.max() == wanted.max():
        return f"{int(rounds.max())} round(s)"
    early = rounds < wanted.max()
    after = " or ".join(str(int(n)) for n in sorted(set(rounds[early]))) or "2"
    return (
        f"{int(rounds.min())} to {int(rounds.max())} rounds of the {int(wanted.max())} asked for ({int(early.sum())} "
        f"point(s) stopped after {after}, their rounds agreeing and their interval within the target; the others "
        "ran every round, the points table says why)"
    )


def measurement_text(pts: pd.DataFrame) -> str:
    """How the numbers in the tables were taken: the estimator, rounds, intervals, and what
    the other estimators and the trace showed."""
    if not len(pts):
        return "No point succeeded."
    chosen = pts["estimator"].dropna().mode()
    estimator = chosen.iloc[0] if len(chosen) else STEP
    rounds = pts["time_rounds"].dropna()
    parts = [f"Times are the **{estimator}** estimator: {ESTIMATOR_WORDS.get(estimator, estimator)}."]
    if len(rounds) and rounds.max() == 1:  # timing=quick (or timing.rounds=1)
        parts.append(
            "Each point was timed in one round (timing=quick or timing.rounds=1), so its median and 95% interval "
            "are that round's samples': the interval covers the noise within one stretch of time, not the drift "
            "between runs, which on a busy machine can be larger (the default policy's interleaved rounds measure "
            f"it): {ONE_ROUND}."
        )
    elif len(rounds):
        parts.append(
            f"Each point was timed in {_rounds_words(pts, rounds)}, interleaved across the sweep in a shuffled "
            "order; its median is the median of the rounds' medians, and its 95% interval a bootstrap "
            "over rounds and samples, so it covers drift between rounds, not only one stretch of noise. "
            f"{int(pts['rounds_disagree'].sum())} point(s) had rounds whose medians differ more than their own "
            "intervals allow (Cochran's Q at 99%)."
        )
    floor = pts["dispatch_floor_s"].dropna()
    if len(floor):
        small = pts.loc[pts["V_bytes"] == pts["V_bytes"].min(), "dispatch_floor_s"].dropna()
        where = (  # matmuls have no V: then the floor's median over the points
            f"{fmt(float(small.median()) * 1e6)} us at the smallest V"
            if len(small)
            else f"median {fmt(float(floor.median()) * 1e6)} us over the points"
        )
        parts.append(f"Beside it: *loop* per repetition, and the dispatch floor *step - loop* ({where}).")
    parts += [t for t in [loop_rounds_text(pts, estimator)] if t]
    slow = pts["profiler_slowdown"].dropna()
    inspect_only = "device_time_s" in pts and not pts["device_time_s"].notna().any()
    if len(slow):
        parts.append(
            (
                "The trace was kept for inspection only (trace.inspect_iters), with no device estimator from it; "
                if inspect_only and estimator != DEVICE
                else "The *device* estimator comes from the traced steps; "
            )
            + f"tracing slowed a step {slow.median():.2g}x "
            f"(range {slow.min():.2g}x to {slow.max():.2g}x: traced step / untraced step, measured per point)"
            + (", which is why on CPU the step, not the trace, is timed." if estimator == STEP else ".")
        )
        parts.append(slowdown_text(pts))
    share = pts["dispatch_share"].dropna()
    if len(share):
        parts.append(f"Dispatch share (step - device) / step: median {share.median():.0%}.")
    elif (pts["backend"] == "cpu").any():
        parts.append(
            "No dispatch share on CPU: there the trace's device time is the traced host thread's, which "
            "includes waiting for the other devices and the profiler's slowdown, so it is no device time."
        )
    parts += [t for t in [ceiling_text(pts) or no_ceiling_text(pts)] if t]
    faults = pts["page_faults_per_step"].dropna()
    if len(faults):
        parts.append(
            f"Minor page faults per step: median {faults.median():.0f}, largest {faults.max():.0f} "
            "(the worker runs with a malloc that keeps large buffers; a point faulting in more than a "
            "quarter of the bytes its devices write is flagged)."
        )
    return " ".join(parts)


# the key loop_why names where round 1 left the loop out (runner.worker.estimators.loop_check_needless)
LEFT_OUT_KEY = "timing.loop_check_below_s"


def loop_rounds_text(pts: pd.DataFrame, estimator: str) -> str:
    """In how many rounds the *loop* estimator, a cross-check of ``estimator``, was timed: round 1
    everywhere, and in round 2 only where round 1's loop and ``estimator`` intervals did not
    overlap (``loop_rounds``, ``loop_why``; runner.worker.estimators.loop_rule); and at how many
    points round 1 left it out, their step being long (runner.worker.estimators.loop_check_needless).
    Empty where the loop is the estimator, or where no point had a loop time in a sweep of later
    rounds and none left it out."""
    if estimator == LOOP or not {"loop_rounds", "time_rounds"} <= set(pts):
        return ""
    looped = pts[pd.to_numeric(pts["loop_rounds"], errors="coerce") > 0]
    later = looped[pd.to_numeric(looped["time_rounds"], errors="coerce") > 1]
    left = 0
    if "loop_why" in pts:
        left = int(pts["loop_why"].astype("string").str.contains(LEFT_OUT_KEY, regex=False).fillna(False).sum())
    parts = []
    if len(later):
        again = int((pd.to_numeric(later["loop_rounds"], errors="coerce") > 1).sum())
        parts.append(
            f"The loop is a cross-check of the *{estimator}*: timed in round 1, and again in round 2 at {again} "
            f"of {len(later)} point(s), those where round 1's loop interval and the {estimator}'s did not overlap "
            "(`loop_why` in summary.csv says which way)."
        )
    if left:
        parts.append(
            f"Round 1 left the loop out at {left} point(s) whose step took at least {LEFT_OUT_KEY}: all a loop "
            "can read off a step that long is a call's fixed cost, lost in it."
        )
    return " ".join(parts)


def slowdown_text(pts: pd.DataFrame) -> str:
    """Which points' traces ran so much slower than their untraced steps that their trace
    columns are unrepresentative (``summary.TRACE_SLOWDOWN_LIMIT``), each with its factor."""
    slow = pts[pd.to_numeric(pts["profiler_slowdown"], errors="coerce") > TRACE_SLOWDOWN_LIMIT]
    if not len(slow):
        return f"No trace ran more than {TRACE_SLOWDOWN_LIMIT:g}x its untraced step."
    slow = slow.drop_duplicates("point").sort_values("profiler_slowdown", ascending=False)
    each = ", ".join(
        f"{r.op} {fmt_bytes(r.V_bytes)} {r.profiler_slowdown:.3g}x"
        if r.V_bytes == r.V_bytes
        else f"{r.point} {r.profiler_slowdown:.3g}x"
        for r in slow.itertuples()
    )
    return (
        f"{len(slow)} point(s) traced more than {TRACE_SLOWDOWN_LIMIT:g}x slower than untraced, so their traces "
        f"(trace columns, overlap) are marked unrepresentative: {each}. Their timings are untraced and stand."
    )


def no_ceiling_text(pts: pd.DataFrame) -> str:
    """Why CPU collectives have no ceiling: ``timing.ceiling=false`` (as ``timing=quick`` sets)
    measured no copy curve, so none was checked against one (empty where no such point)."""
    cpu = pts[(pts["backend"] == "cpu") & pts["op"].isin(list(BY_OP))] if {"backend", "op"} <= set(pts) else pts[:0]
    if "group_size" in cpu:  # a group of 1 (a copy) and a grad have no ceiling whatever the policy
        cpu = cpu[pd.to_numeric(cpu["group_size"], errors="coerce") > 1]
    if "grad" in cpu:
        cpu = cpu[~cpu["grad"].fillna(False).astype(bool)]
    if not len(cpu):
        return ""
    return (
        "No point has a ceiling: on CPU the copy curve is measured only with timing.ceiling=true, and these "
        "points ran with timing.ceiling=false (as timing=quick sets), so none was checked against a ceiling."
    )


def ceiling_text(pts: pd.DataFrame) -> str:
    """How points were held to their ceiling, and at which sizes the ceiling itself is in doubt
    (empty when no point has a ceiling)."""
    if "ceiling_busbw_Bps" not in pts or not pts["ceiling_busbw_Bps"].notna().any():
        return ""
    text = (
        "A point is flagged above its ceiling only when its bus bandwidth's 95% interval lies wholly above "
        "the ceiling's (on CPU, a copy curve measured with repeats and read at the point's bus bytes)."
    )
    doubt = pts["ceiling_inconsistent"] if "ceiling_inconsistent" in pts else pd.Series(None, index=pts.index)
    bad = pts[doubt.fillna("").astype(str).ne("")]
    if len(bad):
        text += (
            f" The ceiling is inconsistent at the sizes of {bad['point'].nunique()} point(s) (their caveats say why): "
            "they are not flagged against it."
        )
    return text
