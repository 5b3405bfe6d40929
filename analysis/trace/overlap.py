"""How much collective time hides under compute, per device, from a trace's op table.

A collective matmul only pays off if its collectives run while the device computes. Given
:func:`analysis.trace.device_ops` rows, :func:`overlap_by_device` merges each device's
collective intervals and its compute intervals separately (so overlapping ops of one kind
are not counted twice) and measures their intersection. An asynchronous collective shows in
a trace as a ``*-start`` and a ``*-done`` op; the data is in flight from the start of the
one to the end of the other, so that whole span counts as collective time.

Collectives are told from compute by their HLO opcode (``opcodes``, from
:func:`analysis.hlo.instruction_opcodes` of the compiled module), never by the
instruction's name alone: JAX names an AllReduce ``psum.7``. Without the HLO, names that
start with a collective opcode are the fallback.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analysis.book.collectives import HLO_OPCODES as COLLECTIVE_KINDS

_ALTERNATIVES = "|".join(re.escape(k) for k in COLLECTIVE_KINDS)
_KIND_RE = re.compile(rf"^({_ALTERNATIVES})(-start|-done)?(\.|$)")
_OPCODE_RE = re.compile(rf"^({_ALTERNATIVES})(-start|-done)?$")


def _match(hlo_op: str, opcodes: dict[str, str] | None = None):
    """(collective kind, ``-start``/``-done``/None) of an op, or None for compute."""
    if opcodes is not None and hlo_op in opcodes:
        m = _OPCODE_RE.match(opcodes[hlo_op])
    else:  # names follow the opcode with '-' or '_' (all-gather.3, all_gather.3 on CPU)
        m = _KIND_RE.match(str(hlo_op).replace("_", "-"))
    return (m.group(1), m.group(2)) if m else None


def op_kind(hlo_op: str, opcodes: dict[str, str] | None = None) -> str:
    """``collective`` for a collective HLO op (sync or async half), else ``compute``."""
    return "collective" if _match(hlo_op, opcodes) else "compute"


def merge_intervals(starts, ends) -> np.ndarray:
    """Union of ``[start, end)`` intervals as a sorted ``(n, 2)`` array of disjoint spans."""
    iv = np.column_stack([np.asarray(starts, dtype=float), np.asarray(ends, dtype=float)])
    iv = iv[iv[:, 1] > iv[:, 0]]
    if not len(iv):
        return np.empty((0, 2))
    iv = iv[np.argsort(iv[:, 0], kind="stable")]
    out = [iv[0].copy()]
    for s, e in iv[1:]:
        if s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append(np.array([s, e]))
    return np.array(out)


def total_length(spans: np.ndarray) -> float:
    return float((spans[:, 1] - spans[:, 0]).sum()) if len(spans) else 0.0


def intersection_length(a: np.ndarray, b: np.ndarray) -> float:
    """Length of the intersection of two unions of disjoint sorted spans (two-pointer sweep)."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i, 0], b[j, 0]), min(a[i, 1], b[j, 1])
        if hi > lo:
            total += hi - lo
        if a[i, 1] < b[j, 1]:
            i += 1
        else:
            j += 1
    return total


def collective_spans(ops: pd.DataFrame, opcodes: dict[str, str] | None = None) -> pd.DataFrame:
    """Collective ops of one device as ``start_ns, end_ns`` spans; each ``X-start`` is paired
    with the next ``X-done`` of the same kind, the span covering both."""
    rows = []
    pending: dict[str, list[float]] = {}
    for r in ops.sort_values("start_ns", kind="stable").itertuples():
        m = _match(r.hlo_op, opcodes)
        if not m:
            continue
        kind, half = m
        if getattr(r, "is_async", False):  # device_ops already joined its start and done
            rows.append((r.start_ns, r.end_ns))
        elif half == "-start":
            pending.setdefault(kind, []).append(r.start_ns)
        elif half == "-done" and pending.get(kind):
            rows.append((pending[kind].pop(0), r.end_ns))
        else:
            rows.append((r.start_ns, r.end_ns))
    for starts in pending.values():  # a start whose done fell outside the trace: its own span
        rows += [(s, s) for s in starts]
    return pd.DataFrame(rows, columns=["start_ns", "end_ns"])


def overlap_by_device(ops: pd.DataFrame, opcodes: dict[str, str] | None = None) -> pd.DataFrame:
    """Per device: ``collective_s``, ``compute_s``, ``overlap_s`` (collective time during
    which the device also computed) and ``overlap_frac`` = overlap_s / collective_s."""
    rows = []
    for device, g in ops.groupby("device"):
        kinds = g["hlo_op"].map(lambda name: op_kind(name, opcodes))
        comp = merge_intervals(g.loc[kinds == "compute", "start_ns"], g.loc[kinds == "compute", "end_ns"])
        spans = collective_spans(g[kinds == "collective"], opcodes)
        coll = merge_intervals(spans["start_ns"], spans["end_ns"])
        coll_ns, over_ns = total_length(coll), intersection_length(coll, comp)
        rows.append(
            {
                "device": device,
                "collective_s": coll_ns * 1e-9,
                "compute_s": total_length(comp) * 1e-9,
                "overlap_s": over_ns * 1e-9,
                "overlap_frac": over_ns / coll_ns if coll_ns else np.nan,
            }
        )
    return pd.DataFrame(rows, columns=["device", "collective_s", "compute_s", "overlap_s", "overlap_frac"])


def overlap_summary(ops: pd.DataFrame, opcodes: dict[str, str] | None = None) -> dict:
    """Median over devices of :func:`overlap_by_device`, per traced iteration where the
    trace holds several (``iterations``: executions of the program's first op)."""
    per = overlap_by_device(ops, opcodes)
    if not len(per):
        return {}
    iters = int(ops.groupby("device")["iteration"].max().min()) + 1 if "iteration" in ops and len(ops) else 1
    med = per.median(numeric_only=True)
    return {
        "trace_collective_s": med["collective_s"] / iters,
        "trace_compute_s": med["compute_s"] / iters,
        "trace_overlap_s": med["overlap_s"] / iters,
        "trace_overlap_frac": med["overlap_frac"],
        "trace_overlap_frac_min": per["overlap_frac"].min(),
    }
