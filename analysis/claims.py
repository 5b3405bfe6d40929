"""The chapter's closing claims, checked against a sweep's measurements.

Each claim is a ratio of two measured medians (or an HLO fact) with the value the book
expects. :func:`verdict` turns a ratio and its confidence interval into *holds* / *fails* /
*cannot tell at this noise*, a verdict only where the whole interval says the same thing;
:func:`reason` says why a claim fails (or cannot be told) on this hardware. The
evidence comes from ``sweeps/book_claims.yaml`` (``conf/claim/`` says what each point is),
but any sweep that holds the right points gets the same table.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.book.units import fmt_bytes

TOLERANCE = 0.25  # a ratio within 25% of the book's value "holds"
HOLDS, FAILS, UNSURE, MISSING = "holds", "fails", "cannot tell at this noise", "not measured"


def verdict(ratio: float, lo: float, hi: float, expected: float | str, tol: float = TOLERANCE) -> str:
    """A verdict only when the ratio's whole interval ``[lo, hi]`` gives it. ``expected`` a
    number: holds if the interval lies within ``tol`` of it (the band expected / (1 + tol) to
    expected x (1 + tol)), fails if it lies wholly outside that band, else cannot tell at this
    noise (a ratio of 1.5 with an interval of 0.84-2.16 held against 1 once read "holds").
    ``expected`` ``">1"``: holds if the interval lies above 1, fails if at or below 1. A ratio
    without an interval cannot be told either."""
    if ratio is None or not np.isfinite(ratio):
        return MISSING
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return UNSURE
    if expected == ">1":
        return HOLDS if lo > 1 else FAILS if hi <= 1 else UNSURE
    band = (expected / (1 + tol), expected * (1 + tol))
    if band[0] <= lo and hi <= band[1]:
        return HOLDS
    return FAILS if hi < band[0] or lo > band[1] else UNSURE


def ratio_ci(a: pd.Series, b: pd.Series) -> tuple[float, float, float]:
    """``a / b`` for two point rows, with the conservative interval of the two medians' CIs."""
    r = a["time_s"] / b["time_s"]
    return r, a["time_ci_low_s"] / b["time_ci_high_s"], a["time_ci_high_s"] / b["time_ci_low_s"]


def point_table(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per ok point, with the HLO collective kinds it compiled to (``hlo_kinds``)."""
    ok = summary[summary["status"] == "ok"]
    kinds = ok.groupby("point")["hlo_kind"].agg(lambda k: sorted(set(k.dropna()))).rename("hlo_kinds")
    points = ok.drop_duplicates("point").set_index("point").join(kinds).reset_index()
    # == True, not fillna(False): a column of NaN reads as float, whose fillna(False) pandas 4 refuses
    points["grad"] = points.get("grad", pd.Series(False, index=points.index)).eq(True)
    return points


def _pick(points: pd.DataFrame, **want) -> pd.Series | None:
    m = pd.Series(True, index=points.index)
    for key, value in want.items():
        m &= points[key] == value
    hit = points[m]
    return hit.sort_values("time_s").iloc[len(hit) // 2] if len(hit) else None


def _collective(points, op, group, V, n_axes=1, grad=False):
    if V is None:
        return None
    return _pick(points, op=op, group_size=group, V_bytes=V, n_axes=n_axes, grad=grad)


def claims_table(summary: pd.DataFrame, backend: str | None = None) -> pd.DataFrame:
    """Every claim: what was measured, the book's value, the ratio with its CI, the verdict
    and (where it does not hold) the reason."""
    points = point_table(summary)
    backend = backend or (
        points["backend"].dropna().mode().iloc[0] if len(points) and points["backend"].notna().any() else None
    )
    rows = _collective_claims(points, backend) + _backward_claims(points, backend)
    rows.append(_collective_matmul(points, backend))
    return pd.DataFrame(rows)


def _claim_row(claim, text, expected, a, b, backend: str | None, note="") -> dict:
    """One claim's row from the two points of its ratio, ``a / b`` (MISSING where either is None)."""
    if a is None or b is None:
        return {
            "claim": claim,
            "measured": text,
            "expected": expected,
            "ratio": np.nan,
            "ci_low": np.nan,
            "ci_high": np.nan,
            "verdict": MISSING,
            "reason": "the sweep has no point for one side of this ratio",
        }
    r, lo, hi = ratio_ci(a, b)
    v = verdict(r, lo, hi, expected)
    return {
        "claim": claim,
        "measured": f"{text} ({fmt_bytes(a['V_bytes'])} {_ms(a)} / {fmt_bytes(b['V_bytes'])} {_ms(b)})",
        "expected": expected,
        "ratio": r,
        "ci_low": lo,
        "ci_high": hi,
        "verdict": v,
        "reason": why(v, claim, r, lo, hi, expected, backend, note),
    }


def _collective_claims(points: pd.DataFrame, backend: str | None) -> list[dict]:
    """The claims on the collectives' costs: ratios of AllGathers and the others at the
    sweep's largest V (and, for latency, its smallest)."""
    ag = points[(points["op"] == "all_gather") & ~points["grad"]] if len(points) else points
    sizes = sorted(set(ag["V_bytes"].dropna())) if len(ag) else []
    big, small = (sizes[-1], sizes[0]) if len(sizes) > 1 else (sizes[0] if sizes else None, None)
    ag8 = _collective(points, "all_gather", 8, big)
    ag2 = _collective(points, "all_gather", 2, big)
    return [
        _claim_row(
            "bandwidth-bound cost does not depend on the number of devices",
            "AllGather, 8 devices / 2 devices",
            1.0,
            ag8,
            ag2,
            backend,
        ),
        _claim_row(
            "ReduceScatter costs what AllGather costs",
            "ReduceScatter / AllGather, 8 devices",
            1.0,
            _collective(points, "reduce_scatter", 8, big),
            ag8,
            backend,
        ),
        _claim_row(
            "AllReduce costs twice an AllGather",
            "AllReduce / AllGather, 8 devices",
            2.0,
            _collective(points, "all_reduce", 8, big),
            ag8,
            backend,
        ),
        _claim_row(
            "AllToAll costs a quarter of an AllGather (on a ring)",
            "AllToAll / AllGather, 8 devices",
            0.25,
            _collective(points, "all_to_all", 8, big),
            ag8,
            backend,
        ),
        _claim_row(
            "gathering over two axes doubles the bandwidth",
            "AllGather over 2 axes / over 1 axis, 8 devices",
            0.5,
            _collective(points, "all_gather", 8, big, n_axes=2),
            ag8,
            backend,
        ),
        _claim_row(
            "small buffers are latency-bound, and there more devices cost more",
            "AllGather of the smallest V, 8 devices / 2 devices",
            ">1",
            _collective(points, "all_gather", 8, small),
            _collective(points, "all_gather", 2, small),
            backend,
        ),
    ]


def _backward_claims(points: pd.DataFrame, backend: str | None) -> list[dict]:
    """The claims on backward passes, decided by the grad's HLO (the time ratio is their cost side)."""
    rows = []
    for fwd, other, claim_text, back in (
        ("all_gather", "reduce_scatter", "the backward pass of an AllGather is a ReduceScatter", "reduce-scatter"),
        ("reduce_scatter", "all_gather", "the backward pass of a ReduceScatter is an AllGather", "all-gather"),
    ):
        g = _pick(points, op=fwd, grad=True) if len(points) else None
        o = _collective(points, other, g["group_size"], g["V_bytes"]) if g is not None else None
        row = _claim_row(
            claim_text,
            f"time of grad / forward {back}; the grad's HLO has {', '.join(g['hlo_kinds']) if g is not None else '?'}",
            1.0,
            g,
            o,
            backend,
            note=back,
        )
        if g is not None:  # the HLO fact decides this claim; the time ratio is the cost side of it
            row["verdict"] = HOLDS if back in g["hlo_kinds"] else FAILS
            row["reason"] = "" if back in g["hlo_kinds"] else f"the backward pass compiled to {g['hlo_kinds']}"
        rows.append(row)
    return rows


def _collective_matmul(points: pd.DataFrame, backend: str | None) -> dict:
    claim = "collective matmul approaches max(T_math, T_comms)"
    mm = points[points["op"] == "matmul"] if len(points) else points
    ring = mm[mm["strategy"] == "collective_matmul"] if len(mm) else mm
    for r in ring.itertuples():
        naive = mm[(mm["expr"] == r.expr) & (mm["dims"] == r.dims) & (mm["strategy"] != "collective_matmul")]
        if not len(naive) or not np.isfinite(naive.iloc[0].get("trace_compute_s", np.nan)):
            continue
        n = naive.iloc[0]
        bound = max(n["trace_compute_s"], n["trace_collective_s"])
        ratio = r.time_s / bound
        lo, hi = r.time_ci_low_s / bound, r.time_ci_high_s / bound
        v = verdict(ratio, lo, hi, 1.0)
        text = (
            f"collective matmul {r.time_s * 1e3:.3g} ms / max(compute {n['trace_compute_s'] * 1e3:.3g} ms, "
            f"collectives {n['trace_collective_s'] * 1e3:.3g} ms) of the naive program's trace; naive "
            f"{n['time_s'] * 1e3:.3g} ms"
        )
        overlap = getattr(r, "trace_overlap_frac", np.nan)
        return {
            "claim": claim,
            "measured": text,
            "expected": 1.0,
            "ratio": ratio,
            "ci_low": lo,
            "ci_high": hi,
            "verdict": v,
            "reason": why(v, claim, ratio, lo, hi, 1.0, backend, overlap),
        }
    return {
        "claim": claim,
        "measured": "collective matmul vs its naive counterpart (with a trace)",
        "expected": 1.0,
        "ratio": np.nan,
        "ci_low": np.nan,
        "ci_high": np.nan,
        "verdict": MISSING,
        "reason": "the sweep has no collective_matmul point with a traced naive counterpart",
    }


def why(v: str, claim: str, ratio: float, lo: float, hi: float, expected, backend: str | None, note=None) -> str:
    """The reason column: empty where the claim holds, the noise where it cannot be told,
    else :func:`reason`."""
    if v == HOLDS:
        return ""
    if v == UNSURE:
        if not (np.isfinite(lo) and np.isfinite(hi)):
            return f"measured {ratio:.2f}x, with no interval to tell it by"
        where = (
            "both sides of 1"
            if expected == ">1"
            else f"inside and outside the band {expected / (1 + TOLERANCE):.3g}-{expected * (1 + TOLERANCE):.3g}"
        )
        return (
            f"measured {ratio:.2f}x, but its 95% interval {lo:.3g}-{hi:.3g} reaches {where}: more rounds, "
            "or a quieter machine, would tell"
        )
    return reason(claim, ratio, backend, note)


def reason(claim: str, ratio: float, backend: str | None, note=None) -> str:
    """Why a claim does not hold (or is unclear) here, in a sentence."""
    cpu = backend == "cpu"
    r = f"{ratio:.2f}x"
    if "number of devices" in claim and cpu:
        return (
            f"the CPU backend's devices share one host memory, not a link each, so the group size changes "
            f"how their copies contend for it ({r}; on the 4x2 mesh four 2-device groups run at once)"
        )
    if "AllToAll" in claim and cpu:
        return (
            f"on the CPU backend the devices share host memory and there is no ring, so the 1/4 (a "
            f"bidirectional ring's hop count) does not apply: AllToAll costs {r} an AllGather here"
        )
    if "two axes" in claim and cpu:
        return f"on the CPU backend there are no links, so a second axis adds no bandwidth ({r})"
    if "AllReduce" in claim and cpu:
        return f"in host memory an AllReduce is not two ring passes; it costs {r} an AllGather here"
    if "ReduceScatter costs" in claim and cpu:
        return (
            f"in host memory a ReduceScatter is not a ring pass: each device writes V/N where an AllGather "
            f"writes V, against the reads of the sum ({r})"
        )
    if "latency-bound" in claim:
        return f"at this V the time barely changes with the group size ({r}): fixed per-call costs dominate"
    if "backward pass" in claim:
        return f"its time is {r} that of a forward {note}"
    if "collective matmul" in claim:
        frac = (
            ""
            if note is None or not math.isfinite(note)
            else f"; the trace shows {note:.0%} of collective time overlapped"
        )
        why = (
            ("on the CPU backend collectives run synchronously on the device threads, so nothing hides under compute")
            if cpu
            else "the ring's transfers did not hide under the multiplies"
        )
        return f"{why} ({r} of the bound{frac})"
    return f"measured {r}"


def _ms(row) -> str:
    return f"{row['time_s'] * 1e3:.3g} ms"


def console_lines(table: pd.DataFrame) -> list[str]:
    """The claims' verdicts for the console at the end of a sweep, one line each, verdict first:
    ``holds: AllReduce costs twice an AllGather (2.04x, 95% interval 1.9-2.2; book 2)``; a claim
    that fails carries its reason (one that cannot be told, its interval). Claims the sweep has
    no points for are left out."""
    lines = []
    for r in table.itertuples():
        if r.verdict == MISSING:
            continue
        interval = f", 95% interval {r.ci_low:.3g}-{r.ci_high:.3g}" if r.ci_low == r.ci_low else ""
        numbers = f" ({float(r.ratio):.3g}x{interval}; book {r.expected})" if r.ratio == r.ratio else ""
        # the numbers say why it cannot be told; the report's reason repeats them in words
        reason_text = str(r.reason) if isinstance(r.reason, str) and r.reason and r.verdict != UNSURE else ""
        lines.append(f"{r.verdict}: {r.claim}{numbers}" + (f": {reason_text}" if reason_text else ""))
    return lines
