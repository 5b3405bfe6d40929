"""Per point of ``summary.csv``: the *flags* that keep a number out of every fit (above its
ceiling, page-faulting, failed, no time), the *caveats* a reader sees beside it, and the
dispatch floor (*step* - *loop*), never negative. Small callables over the summary's rows;
:func:`analysis.runs.summary.summary_table` calls them."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.book.collectives import BY_OP

# A point is flagged (and left out of every fit) when...
PAGE_FAULT_SHARE = 0.25  # ...a step faults in more than a quarter of the bytes its devices write
# ...and at least this many faults a step: a few stray faults (the host's own allocations, a
# resize) are noise beside a step's time at any size (a minor fault costs about 1 us; 32 of them
# are a tenth of this machine's smallest step), yet at 1 KiB one fault is more than a quarter of
# the bytes moved: the test sweep's 1 KiB point was flagged for "0 minor faults a step"
PAGE_FAULT_MIN = 32
PAGE_BYTES = 4096
# ...or when its bus bandwidth's interval lies wholly above its ceiling's interval, unless the
# ceiling is itself inconsistent at that size (then the ceiling is in doubt, not the point):
# :func:`_above_ceiling`.

# A point's *trace* is unrepresentative when the traced step ran more than this many times the
# untraced one: its trace columns (op times, overlap) then say more about the profiler than
# about the step. The profiler's usual cost here is 2-5x (DESIGN.md fact 3); AllGathers of
# 32 KiB to 8 MiB were traced at 3.7-97x. The point's timing is untraced and stands.
TRACE_SLOWDOWN_LIMIT = 5.0


def dispatch_floor(df: pd.DataFrame) -> pd.Series:
    """*step* - *loop* per point, what one dispatch and sync cost the host, never negative:
    where the loop reads above the step but their intervals overlap, the floor is below what
    the intervals resolve and reads 0; where the loop's interval lies wholly above the step's
    (XLA's loop body then costs more than the step: on CPU a 16 MiB AllToAll with a
    compile-time trip count), there is no floor to read and it is blank."""
    step, loop = (pd.to_numeric(df[c], errors="coerce") for c in ("step_time_s", "loop_time_s"))
    diff = step - loop
    step_hi = pd.to_numeric(df.get("step_ci_high_s", step), errors="coerce").fillna(step)
    loop_lo = pd.to_numeric(df.get("loop_ci_low_s", loop), errors="coerce").fillna(loop)
    above = loop_lo > step_hi
    return diff.where(diff.isna() | (diff >= 0), np.where(above, np.nan, 0.0)).astype(float)


def flags(df: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Per row, ``;``-joined: the *flags* that make its number untrustworthy or absent (above
    its ceiling, page-faulting, failed, no device time and why: every fit leaves flagged
    points out, and the report lists them with these words), and the *caveats* a reader
    should see beside it (unchecked, rounds that disagree, a collective compiled as others, a
    launch-bound loop, noisy)."""
    out, caveats = [], []
    # bytes the devices write in a step: every device's bus bytes (the page faults are the
    # whole process's, so all of its devices)
    moved = (
        df["S_bytes"].astype(float)
        * df["device_count"].astype(float)
        * pd.Series(
            [
                BY_OP[o].busbw_factor(g) if o in BY_OP and g == g and g else 1.0
                for o, g in zip(df["op"], df["group_size"].astype(float))
            ],
            index=df.index,
        )
    )
    for i, row in df.iterrows():
        why = []
        if row.get("status") != "ok":
            why.append("failed")
        if isinstance(row.get("missing_reason"), str) and row.get("status") == "ok":
            why.append(row["missing_reason"])
        if isinstance(row.get("no_communication"), str):
            why.append("no communication (group of 1)")
        above, ceiling_problem = _above_ceiling(row)
        if above and not ceiling_problem:
            why.append(f"bus bandwidth {row['busbw_over_ceiling']:.2f}x its ceiling (a measurement problem)")
        faults = row.get("page_faults_per_step")
        if (
            faults == faults
            and faults is not None
            and moved[i] == moved[i]
            and moved[i] > 0
            and faults >= PAGE_FAULT_MIN
            and faults * PAGE_BYTES > PAGE_FAULT_SHARE * moved[i]
        ):
            why.append(f"page-faulting ({faults:.0f} minor faults a step)")
        out.append("; ".join(why))
        note = ["unchecked"] if row.get("checked") is False else []
        cb = row.get("trace_command_buffers")
        note += (
            ["GPU command buffers in the trace: ops inside them have no times of their own"] if cb == cb and cb else []
        )
        note += ["its rounds disagree"] if row.get("rounds_disagree") else []
        if isinstance(row.get("rewritten"), str) and row["rewritten"]:
            note.append(row["rewritten"])
        if isinstance(row.get("loop_launch_bound"), (bool, np.bool_)) and row["loop_launch_bound"]:
            note.append(
                f"loop launch-bound: an empty loop's repetition takes {_num(row.get('loop_empty_s')) * 1e6:.3g} us "
                f"of the loop's {_num(row.get('loop_time_s')) * 1e6:.3g} us"
            )
        note += ["noisy"] if row.get("noisy") else []
        slow = _num(row.get("profiler_slowdown"))
        if slow > TRACE_SLOWDOWN_LIMIT:
            note.append(
                f"trace unrepresentative: the traced step ran {slow:.3g}x the untraced one "
                f"(above {TRACE_SLOWDOWN_LIMIT:g}x); its timing is untraced and stands"
            )
        if above and ceiling_problem:
            note.append(
                f"bus bandwidth {row['busbw_over_ceiling']:.2f}x a ceiling that is inconsistent here "
                f"({ceiling_problem}): the ceiling is in doubt, the point is kept"
            )
        caveats.append("; ".join(note))
    return pd.Series(out, index=df.index, dtype=object), pd.Series(caveats, index=df.index, dtype=object)


def _above_ceiling(row) -> tuple[bool, str | None]:
    """Whether the point's bus-bandwidth interval lies wholly above its ceiling's interval
    (a ceiling without one, a link roofline or an old result, counts as its value), and what
    makes the ceiling itself inconsistent there, if anything."""
    top = _num(row.get("ceiling_ci_high_Bps"))
    top = top if top == top else _num(row.get("ceiling_busbw_Bps"))
    low = _num(row.get("busbw_ci_low_Bps"))
    low = low if low == low else _num(row.get("busbw_Bps"))
    problem = row.get("ceiling_inconsistent")
    return bool(top > 0 and low > top), problem if isinstance(problem, str) and problem else None


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return np.nan
