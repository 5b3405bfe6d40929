"""Per-device HLO-op executions from a trace's event table, and their per-step summary.

:func:`device_ops` picks the events that are device ops in each backend's shape (see
:mod:`.xplane`), names each by its HLO instruction and module and places it in the step (the
module execution) it ran in, :func:`op_steps` lines up the k-th execution of an op across
devices, :func:`op_summary` takes medians over those, and :func:`device_samples` sums an op's
runs per step (an op may run several times a step: a scan, a while loop).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analysis.book.collectives import HLO_OPCODES
from analysis.trace.overlap import merge_intervals, total_length
from analysis.trace.steps import DEVICE_PLANE, MODULE_EVENT, step_of

_CPU_PLANE = "/host:CPU"
# The async pairs joined into one execution: collectives, and the generic wrappers XLA puts
# around one (async-start/-done, a SparseCore offload's call-start/-done). Other async pairs
# (copy-start/copy-done: host offload) stay two ops, as XProf keeps them.
_COLLECTIVE_KINDS = frozenset(HLO_OPCODES)
_WRAPPER_KINDS = frozenset({"async", "call"})
# A TPU op's metadata name is its whole instruction text: "%fusion.3 = bf16[8]{0} fusion(...), ..."
_INSTR_NAME = r"^%?([^\s=%]+) = "
# an async opcode in that text: the first "<x>-start(" / "<x>-done(" after a space (shapes hold neither)
_ASYNC_OPCODE = r"\s([a-z][a-z0-9\-]*-(?:start|done))\("
# a done's first operand is its start: "... all-gather-done(f32[8]{0} %all-gather-start.1)"
_DONE_OPERAND = r"-done\([^%]*%([^\s,)]+)"

OPS_COLUMNS = [
    "device",
    "hlo_module",
    "hlo_op",
    "name",
    "start_ns",
    "end_ns",
    "duration_ns",
    "kernels",
    "is_async",
    "done_op",
    "program_id",
    "hlo_category",
    "iteration",
    "step",
    "clock",
]


def _column(events: pd.DataFrame, name: str) -> pd.Series:
    """A column of the event table, all None where a hand-built table lacks it."""
    return events[name] if name in events else pd.Series(None, index=events.index, dtype=object)


def _present(col: pd.Series) -> pd.Series:
    return col.notna() & col.ne("")


def program_modules(events: pd.DataFrame) -> dict[str, str]:
    """``{program_id: module name}`` from the ``XLA Modules`` lines' events (TPU), whose names
    are ``module(program_id)``."""
    mods = events.loc[events["line"] == "XLA Modules", "name"].drop_duplicates()
    found = mods.astype(str).str.extract(MODULE_EVENT).dropna()
    return dict(zip(found["program_id"], found["module"]))


def device_ops(
    events: pd.DataFrame,
    pairs: dict[str, str] | None = None,
    modules: dict[str, str] | None = None,
    collectives: set[str] | None = None,
    steps: int | None = None,
) -> pd.DataFrame:
    """The HLO-op executions per device: :data:`OPS_COLUMNS`.

    ``hlo_op`` is the op's HLO instruction name: the event's ``hlo_op`` stat (GPU, CPU), else
    its metadata's ``display_name`` (TPU), else the name before `` = `` in the metadata name
    (a TPU op's metadata name is its whole instruction text), else the event's name.
    ``hlo_module`` is the ``hlo_module`` stat where present (GPU, CPU), else the module of the
    op's ``program_id`` (TPU): from ``modules`` (``{program_id: module}``, e.g. from the HLO
    protos the trace carries), else from the ``XLA Modules`` line (:func:`program_modules`);
    "" where neither is known.

    ``iteration`` counts the executions of one op on one device in time order, so the
    k-th all-gather on every device is the same execution of it (no reliance on run ids,
    which not every backend records). It is the step only for an op that runs once a step.

    ``step`` is the module execution the op ran in on its device (0, 1, ... per device and
    module; -1 before the first): an op inside a loop runs several times in one step. On TPU,
    the ``XLA Modules`` line's execution of the op's program that the op starts in (before the
    end of); elsewhere (CPU and GPU record no module execution on the ops' lines) step k of a
    module on a device begins at the earliest k-th start among the ops that run a whole number
    of times a step: an op that runs m times a step starts step k with its (k*m)-th run, so a
    step that opens with a loop still begins at the loop's first op (see
    :func:`analysis.trace.steps.step_of`). How many steps the trace holds: ``steps`` where the caller knows
    it (the traced calls of the step), else the runs of the module's least-run op (a
    conditional's op that ran in some steps only would then be taken for once a step).

    ``clock`` names the clock the op's timestamps are on: ``/host:CPU`` for every CPU device
    (one process's host threads), the device's own plane on TPU and GPU (each chip's clock;
    they are not aligned with each other). :func:`op_steps` compares starts across devices
    only on one clock.

    On TPU the ops are the ``XLA Ops`` line's (``Async XLA Ops`` is left out, as XProf leaves
    it out); planes that are not a whole ``/device:TPU:N`` or ``/device:GPU:N`` (a
    SparseCore's ``/device:TPU:0 SparseCore 0``) hold no device's ops. An asynchronous
    collective (``all-gather-start`` ... ``all-gather-done``, offloaded ones ending in
    ``async-done`` or ``call-done``) is ONE execution from its start's start to its done's
    end, named after the start (as the HLO's collective is), with ``done_op`` the done's name:
    the start event alone is only the issue, the done the wait. Only collectives' pairs are
    joined, and the generic ``async``/``call`` wrappers where they wrap one: with
    ``collectives`` (the trace names that run a collective,
    :func:`analysis.hlo.collective_executions` of the compiled module) an ``async``/``call``
    pair is joined where a half is in it; without, every one is. Other async pairs
    (``copy-start``/``copy-done``, a host offload) stay two ops, as XProf keeps them.
    Which start a done closes: ``pairs`` (``done -> start`` names,
    :func:`analysis.hlo.async_pairs` of the compiled module), else the done's first operand in
    its instruction text (TPU), else the earliest open ``*-start`` of its kind on the device
    (for a ``call-done``/``async-done``, of any kind joined).
    """
    ops = _device_op_events(events)
    pairs = _name_ops(ops, events, modules, pairs)
    ops["end_ns"] = ops["start_ns"] + ops["duration_ns"]
    ops["kernels"] = 1
    ops = _merge_launches(ops)
    ops = ops.sort_values(["device", "start_ns"], kind="stable")
    ops = _join_async(ops, pairs, collectives)
    ops["iteration"] = ops.groupby(["device", "hlo_module", "hlo_op"]).cumcount()
    ops["step"] = step_of(ops, events, steps)
    return ops[OPS_COLUMNS].reset_index(drop=True)


def _device_op_events(events: pd.DataFrame) -> pd.DataFrame:
    """The events that are device ops in each backend's shape (:func:`device_ops`), with their
    ``device`` and ``clock``."""
    plane_dev = events["plane"].str.extract(DEVICE_PLANE)
    on_device_plane = plane_dev[1].notna()
    # Only the XLA Ops line, as XProf reads it (its trace viewer, op metrics and PGLE latencies
    # skip "Async XLA Ops", whose events re-draw an async op's in-flight part)
    tpu_ops = on_device_plane & (plane_dev[0] == "TPU") & (events["line"] == "XLA Ops")
    gpu_ops = on_device_plane & (plane_dev[0] == "GPU") & events["hlo_op"].notna()
    cpu_ops = (events["plane"] == "/host:CPU") & events["hlo_op"].notna() & events["device_ordinal"].notna()
    keep = tpu_ops | gpu_ops | cpu_ops
    ops = events.loc[keep].copy()
    for c in ("display_name", "program_id", "hlo_category"):
        ops[c] = _column(events, c).loc[keep].astype(object)
    dev_from_plane = pd.to_numeric(plane_dev.loc[keep, 1], errors="coerce")
    ops["device"] = np.where(cpu_ops[keep], pd.to_numeric(ops["device_ordinal"], errors="coerce"), dev_from_plane)
    ops["device"] = ops["device"].astype(int)
    ops["clock"] = np.where(cpu_ops[keep], _CPU_PLANE, ops["plane"].astype(str))
    return ops


def _name_ops(
    ops: pd.DataFrame, events: pd.DataFrame, modules: dict[str, str] | None, pairs: dict[str, str] | None
) -> dict[str, str]:
    """Set each op's ``hlo_op``, ``hlo_module`` and async ``opcode`` in place (:func:`device_ops`);
    return the ``done -> start`` pairs: ``pairs`` over those the instruction texts give."""
    # the instruction text's parts, parsed once per distinct name (names repeat every step)
    codes, uniq = pd.factorize(ops["name"].astype(str))
    texts = pd.Series(uniq, dtype=object)
    instr, opcode, operand = (
        texts.str.extract(rx)[0].to_numpy(object)[codes] for rx in (_INSTR_NAME, _ASYNC_OPCODE, _DONE_OPERAND)
    )
    named = ops["hlo_op"].where(_present(ops["hlo_op"]), ops["display_name"].where(_present(ops["display_name"])))
    from_text = pd.Series(instr, index=ops.index).where(pd.notna(instr), ops["name"])
    ops["hlo_op"] = named.where(named.notna(), from_text).astype(str)
    by_program = {**program_modules(events), **(modules or {})}
    from_program = ops["program_id"].map(by_program).fillna("") if by_program else ""
    ops["hlo_module"] = ops["hlo_module"].where(_present(ops["hlo_module"]), from_program).fillna("").astype(str)
    ops["opcode"] = opcode
    done = pd.DataFrame({"done": ops["hlo_op"].to_numpy(), "start": operand}).dropna().drop_duplicates()
    return {**dict(zip(done["done"], done["start"])), **(pairs or {})}


def _merge_launches(ops: pd.DataFrame) -> pd.DataFrame:
    """Several kernels of one launch are one execution: its time on the device is the sum of
    their durations (the gaps between them are the host's, not the op's)."""
    launched = ops["scope_range_id"].notna()
    if not launched.any():
        return ops
    keys = ["device", "hlo_module", "hlo_op", "scope_range_id"]
    merged = (
        ops[launched]
        .groupby(keys, sort=False)
        .agg(
            name=("name", "last"),
            start_ns=("start_ns", "min"),
            end_ns=("end_ns", "max"),
            duration_ns=("duration_ns", "sum"),
            kernels=("kernels", "sum"),
            program_id=("program_id", "first"),
            hlo_category=("hlo_category", "first"),
            opcode=("opcode", "first"),
            clock=("clock", "first"),
        )
        .reset_index()
    )
    return pd.concat([ops[~launched], merged], ignore_index=True)


_START = re.compile(r"^(?P<kind>[a-z\-]+?)-start(?:[._].*)?$")
_DONE = re.compile(r"^(?P<kind>[a-z\-]+?)-done(?:[._].*)?$")


def _joined_kind(kind: str | None) -> bool:
    return kind in _COLLECTIVE_KINDS or kind in _WRAPPER_KINDS


def _join_async(ops: pd.DataFrame, pairs: dict[str, str] | None, collectives: set[str] | None = None) -> pd.DataFrame:
    """Each async collective's start and its done as one row spanning both (see
    :func:`device_ops`; ``collectives``: the names that run one, for the ``async``/``call``
    wrappers). ``ops`` is sorted by device and start; only the starts and dones are walked
    in Python."""
    n = len(ops)
    names = ops["hlo_op"].astype(str).to_numpy(object)
    # the async opcode where the instruction text gives it (an instruction's name need not say)
    kinds = np.where(ops["opcode"].notna(), ops["opcode"], names) if "opcode" in ops else names
    codes, uniq = pd.factorize(pd.Series(kinds, dtype=object).astype(str))
    start_kind = [m.group("kind") if (m := _START.match(k)) else None for k in uniq]
    done_kind = [m.group("kind") if (m := _DONE.match(k)) else None for k in uniq]
    # Only a collective's halves are joined (a copy-start/copy-done is two ops to XProf); a
    # wrapper's where it wraps a collective (either half named in ``collectives``), or any
    # wrapper when the HLO is not at hand
    joins = (
        np.array([_joined_kind(k) for k in start_kind] + [False])[codes]
        | np.array([_joined_kind(k) for k in done_kind] + [False])[codes]
    )
    if collectives is not None:
        wrapper = np.array([k in _WRAPPER_KINDS or d in _WRAPPER_KINDS for k, d in zip(start_kind, done_kind)])
        wrapper = np.append(wrapper, False)[codes]
        joins &= ~wrapper | np.isin(names, list(collectives))
    is_start = np.array([k is not None for k in start_kind] + [False])[codes] & joins
    is_done = np.array([k is not None for k in done_kind] + [False])[codes] & joins
    ops = ops.assign(is_async=False, done_op=None)
    if not (is_start.any() and is_done.any()):
        return ops
    device = ops["device"].to_numpy()
    end = ops["end_ns"].to_numpy(float).copy()
    kernels = ops["kernels"].to_numpy().copy()
    joined = np.zeros(n, bool)
    done_op = np.full(n, None, object)
    keep = np.ones(n, bool)
    open_starts: dict = {}  # device -> [(row, name, kind)] of starts not yet done
    for i in np.flatnonzero(is_start | is_done).tolist():
        waiting = open_starts.setdefault(device[i], [])
        if is_start[i]:
            waiting.append((i, names[i], start_kind[codes[i]]))
            continue
        if not waiting:
            continue
        kind, want = done_kind[codes[i]], (pairs or {}).get(names[i])
        if want is not None:
            hit = next((k for k, o in enumerate(waiting) if o[1] == want), None)
        elif kind in ("call", "async"):
            hit = 0
        else:
            hit = next((k for k, o in enumerate(waiting) if o[2] == kind), None)
        if hit is None:
            continue
        j = waiting.pop(hit)[0]
        end[j], kernels[j], joined[j], done_op[j], keep[i] = end[i], kernels[j] + kernels[i], True, names[i], False
    start = ops["start_ns"].to_numpy(float)
    duration = np.where(joined, end - start, ops["duration_ns"].to_numpy(float))
    out = ops.assign(end_ns=end, duration_ns=duration, kernels=kernels, is_async=joined, done_op=done_op)
    return out[keep].sort_values(["device", "start_ns"], kind="stable").reset_index(drop=True)


def op_steps(ops: pd.DataFrame) -> pd.DataFrame:
    """One row per (module, op, iteration) across the devices that ran it, with a
    collective's time across devices defined two ways:

    * ``after_arrival_s``: from the last device's start to the last device's end, the
      collective's own time once every participant has arrived (a device waits inside the
      collective for the last one: on the CPU backend its duration includes that wait).
      Capped by the longest device time: a GPU op of several kernels spans host gaps that
      are not its own. ``op_time_s`` is the same figure (its older name).
    * ``with_waiting_s``: from the first device's start to the last device's end, the time
      the collective held the devices, waiting for the last arrival included.

    ``arrival_skew_s`` is the last start minus the first; ``device_time_s`` the median
    per-device duration, which is what TPU/GPU profiles report per op (for a GPU op, the sum
    of its kernels).

    The three figures that subtract one device's timestamp from another's (after arrival,
    with waiting, skew) need the devices on one clock: ``arrival_comparable`` says whether
    they were (every device's ``clock`` the same: the CPU devices of one process, or a single
    device). TPU and GPU chips each time their ops on their own clock, not aligned with the
    others', so across chips those figures are NaN: there ``device_time_s`` is the time to use.
    A table without ``clock`` (built by hand) is taken as on one clock.
    """
    g = ops.groupby(["hlo_module", "hlo_op", "iteration"])
    out = g.agg(
        devices=("device", "nunique"),
        start_min=("start_ns", "min"),
        start_max=("start_ns", "max"),
        end_max=("end_ns", "max"),
        device_ns=("duration_ns", "median"),
        device_max=("duration_ns", "max"),
    )
    if "clock" in ops:
        out["arrival_comparable"] = g["clock"].nunique(dropna=False) <= 1
    else:
        out["arrival_comparable"] = True
    out["arrival_comparable"] = out["arrival_comparable"].astype(bool)
    same = out["arrival_comparable"]
    after = np.minimum(out["end_max"] - out["start_max"], out["device_max"]) * 1e-9
    out["after_arrival_s"] = after.where(same)
    out["with_waiting_s"] = ((out["end_max"] - out["start_min"]) * 1e-9).where(same)
    out["op_time_s"] = out["after_arrival_s"]
    out["device_time_s"] = out["device_ns"] * 1e-9
    out["arrival_skew_s"] = ((out["start_max"] - out["start_min"]) * 1e-9).where(same)
    cols = [
        "devices",
        "op_time_s",
        "after_arrival_s",
        "with_waiting_s",
        "device_time_s",
        "arrival_skew_s",
        "arrival_comparable",
    ]
    return out[cols].reset_index()


def op_summary(steps: pd.DataFrame) -> pd.DataFrame:
    """Median over iterations of :func:`op_steps`, one row per (module, op);
    ``arrival_comparable`` where every iteration's devices were on one clock (else the
    arrival figures are NaN)."""
    g = steps.groupby(["hlo_module", "hlo_op"])
    return g.agg(
        iterations=("iteration", "count"),
        devices=("devices", "max"),
        op_time_s=("op_time_s", "median"),
        after_arrival_s=("after_arrival_s", "median"),
        with_waiting_s=("with_waiting_s", "median"),
        device_time_s=("device_time_s", "median"),
        arrival_skew_s=("arrival_skew_s", "median"),
        arrival_comparable=("arrival_comparable", "all"),
    ).reset_index()


def device_samples(ops: pd.DataFrame, names: set[str] | None = None) -> list[float]:
    """The *device* estimator's samples: one per traced step, the median over devices of that
    device's time in the step, in seconds.

    With ``names`` (the top-level instructions that run one collective: a plain op, a fusion,
    or an async pair's start and done), a device's time is the sum of the durations of all
    those ops' runs in the step (a collective in a loop runs several times a step), an async
    pair counted once from its start to its done (:func:`device_ops` joined them into one row
    named after the start, ``done_op`` the done); without, it is the union of all its op
    intervals in the step (a whole program, its idle gaps left out). Steps are
    :func:`device_ops`' ``step`` (the module's executions); ops before the first (-1) are left
    out. A table without ``step`` (built by hand) takes each op's ``iteration`` as its step.
    """
    if names is None:
        sub = ops
    else:
        hit = ops["hlo_op"].isin(names)
        if "done_op" in ops:  # a joined pair named by its done alone
            hit |= ops["done_op"].isin(names)
        sub = ops[hit]
    key = "step" if "step" in sub else "iteration"
    sub = sub[sub[key] >= 0]
    if sub.empty:
        return []
    if names is not None:
        per = sub.groupby([key, "device"])["duration_ns"].sum()
    else:
        per = sub.groupby([key, "device"]).apply(
            lambda g: total_length(merge_intervals(g["start_ns"], g["end_ns"])), include_groups=False
        )
    per_step = per.groupby(level=key).median()
    return [float(v) * 1e-9 for v in per_step.sort_index()]
