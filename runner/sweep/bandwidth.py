"""A run's bandwidth as nccl-tests reports it, from its result: what a single run records in
result.json (``bandwidth``) and prints, and what a sweep's console line prints.

nccl-tests: algbw = S / time, S the bytes its ``*GetBw`` divides (the book's V, except
AllToAll: V / n, the per-rank buffer); busbw = algbw x 2(n-1)/n for AllReduce, x (n-1)/n for
AllGather, ReduceScatter and AllToAll (:mod:`analysis.book.collectives`). The interval is the
time's, inverted (the slow end of the time is the low end of the bandwidth).
"""

from __future__ import annotations

from analysis.book.collectives import BY_OP, busbw_factor, nccl_S_bytes
from analysis.book.units import fmt_bandwidth
from analysis.runs.record import Result


def bandwidth(result: Result) -> dict | None:
    """``S_bytes``, ``algbw_Bps``, ``busbw_Bps`` and the bus bandwidth's 95% interval of an
    ok run of a collective over at least two devices, from its headline time; else None."""
    exp, s = result.spec, result.timing.summary
    op, V, n, t = exp.op, exp.V_bytes, exp.group_size or 0, s.median_s
    if not result.ok or op not in BY_OP or exp.grad or not V or n < 2 or not t:
        return None
    S = nccl_S_bytes(op, V, n)
    factor = busbw_factor(op, n)
    out = {"S_bytes": S, "algbw_Bps": S / t, "busbw_Bps": S / t * factor}
    lo, hi = s.ci_low_s, s.ci_high_s
    if lo and hi:
        out.update(busbw_ci_low_Bps=S / hi * factor, busbw_ci_high_Bps=S / lo * factor)
    out["what"] = f"nccl-tests: algbw = S / time, busbw = algbw x {factor:g} ({op} over {n} devices)"
    return out


def bandwidth_words(bw: dict | None) -> str:
    """``algbw 1.48 GB/s  busbw 2.59 GB/s`` (empty without a bandwidth)."""
    if not bw:
        return ""
    return f"algbw {fmt_bandwidth(bw['algbw_Bps'])}  busbw {fmt_bandwidth(bw['busbw_Bps'])}"
