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
    """Union of ``[start, end)`` intervals as a sorted ``(n, 2)`` array of disjoint spans
    (intervals that touch merge)."""
    iv = np.column_stack([np.asarray(starts, dtype=float), np.asarray(ends, dtype=float)])
    iv = iv[iv[:, 1] > iv[:, 0]]
    if not len(iv):
        return np.empty((0, 2))
    iv = iv[np.argsort(iv[:, 0], kind="stable")]
    s, e = iv[:, 0], iv[:, 1]
    reach = np.maximum.accumulate(e)  # the furthest end so far
    first = np.concatenate([[True], s[1:] > reach[:-1]])  # starts a new span: past everything before
    at = np.flatnonzero(first)
    return np.column_stack([s[at], np.maximum.reduceat(e, at)])


def total_length(spans: np.ndarray) -> float:
    return float((spans[:, 1] - spans[:, 0]).sum()) if len(spans) else 0.0


def intersection_length(a: np.ndarray, b: np.ndarray) -> float:
    """Length of the intersection of two unions of disjoint sorted spans:
    |A| + |B| - |A u B|."""
    if not len(a) or not len(b):
        return 0.0
    both = np.concatenate([a, b])
    return max(total_length(a) + total_length(b) - total_length(merge_intervals(both[:, 0], both[:, 1])), 0.0)


def _halves(names: pd.Series, opcodes: dict[str, str] | None) -> tuple[np.ndarray, np.ndarray]:
    """(collective kind or None, ``-start``/``-done``/None) of each op as object arrays,
    matched once per distinct name."""
    found = {n: _match(n, opcodes) for n in names.unique()}
    m = [found[n] for n in names]
    return (
        np.array([x[0] if x else None for x in m], dtype=object),
        np.array([x[1] if x else None for x in m], dtype=object),
    )


def _spans(kind: np.ndarray, half: np.ndarray, start: np.ndarray, end: np.ndarray, joined: np.ndarray) -> np.ndarray:
    """One device's collective spans from its ops sorted by start (see collective_spans)."""
    coll = kind != None  # noqa: E711 - elementwise on an object array
    whole = coll & (joined | (half == None))  # noqa: E711 - a span of its own: sync, or already joined
    rows = [np.column_stack([start[whole], end[whole]])]
    halves = np.flatnonzero(coll & ~whole)
    if len(halves):
        pending: dict[str, list[float]] = {}
        extra = []
        for i in halves:
            if half[i] == "-start":
                pending.setdefault(kind[i], []).append(start[i])
            elif pending.get(kind[i]):
                extra.append((pending[kind[i]].pop(0), end[i]))
            else:  # a done whose start fell outside the trace
                extra.append((start[i], end[i]))
        extra += [(x, x) for starts in pending.values() for x in starts]  # a start without its done
        rows.append(np.array(extra, dtype=float).reshape(-1, 2))
    return np.concatenate(rows) if len(rows) > 1 else rows[0]


def collective_spans(ops: pd.DataFrame, opcodes: dict[str, str] | None = None) -> pd.DataFrame:
    """Collective ops of one device as ``start_ns, end_ns`` spans; each ``X-start`` is paired
    with the next ``X-done`` of the same kind, the span covering both."""
    ops = ops.sort_values("start_ns", kind="stable")
    kind, half = _halves(ops["hlo_op"], opcodes)
    joined = ops["is_async"].fillna(False).astype(bool).to_numpy() if "is_async" in ops else np.zeros(len(ops), bool)
    spans = _spans(kind, half, ops["start_ns"].to_numpy(float), ops["end_ns"].to_numpy(float), joined)
    return pd.DataFrame(spans, columns=["start_ns", "end_ns"])


def overlap_by_device(ops: pd.DataFrame, opcodes: dict[str, str] | None = None) -> pd.DataFrame:
    """Per device: ``collective_s``, ``compute_s``, ``overlap_s`` (collective time during
    which the device also computed) and ``overlap_frac`` = overlap_s / collective_s."""
    cols = ["device", "collective_s", "compute_s", "overlap_s", "overlap_frac"]
    if not len(ops):
        return pd.DataFrame(columns=cols)
    ops = ops.sort_values(["device", "start_ns"], kind="stable")
    kind, half = _halves(ops["hlo_op"], opcodes)
    start, end = ops["start_ns"].to_numpy(float), ops["end_ns"].to_numpy(float)
    joined = ops["is_async"].fillna(False).astype(bool).to_numpy() if "is_async" in ops else np.zeros(len(ops), bool)
    device = ops["device"].to_numpy()
    bounds = np.flatnonzero(np.concatenate([[True], device[1:] != device[:-1], [True]]))
    rows = []
    for a, b in zip(bounds[:-1], bounds[1:]):  # one device's ops, in start order
        c = kind[a:b] != None  # noqa: E711
        comp = merge_intervals(start[a:b][~c], end[a:b][~c])
        spans = _spans(kind[a:b], half[a:b], start[a:b], end[a:b], joined[a:b])
        coll = merge_intervals(spans[:, 0], spans[:, 1])
        coll_ns, over_ns = total_length(coll), intersection_length(coll, comp)
        rows.append(
            [
                device[a],
                coll_ns * 1e-9,
                total_length(comp) * 1e-9,
                over_ns * 1e-9,
                over_ns / coll_ns if coll_ns else np.nan,
            ]
        )
    return pd.DataFrame(rows, columns=cols)


def overlap_summary(ops: pd.DataFrame, opcodes: dict[str, str] | None = None) -> dict:
    """Median over devices of :func:`overlap_by_device`, per traced step where the trace
    holds several: the steps are :func:`analysis.trace.device_ops`' ``step`` (the module's
    executions; an op in a loop runs several times in one), or, in a table without it, the
    executions of the most-run op."""
    per = overlap_by_device(ops, opcodes)
    if not len(per):
        return {}
    key = "step" if "step" in ops else "iteration"
    iters = max(int(ops.groupby("device")[key].max().min()) + 1, 1) if key in ops and len(ops) else 1
    med = per.median(numeric_only=True)
    return {
        "trace_collective_s": med["collective_s"] / iters,
        "trace_compute_s": med["compute_s"] / iters,
        "trace_overlap_s": med["overlap_s"] / iters,
        "trace_overlap_frac": med["overlap_frac"],
        "trace_overlap_frac_min": per["overlap_frac"].min(),
    }
