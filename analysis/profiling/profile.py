"""What the collectives of a profiled program cost, step by step (tables only; the report is
:mod:`analysis.report.profile_report`, the command :mod:`analysis.cli.profile`).

A profile of a real training step answers questions a sweep of lone collectives cannot:
which collectives did XLA put in my step, how long did each take on the devices, how much
of the step do they eat, and how much of that time did the device also compute (hidden) or
only wait (exposed)? The inputs are :func:`analysis.trace.device_ops` rows (one per op
execution per device) and the compiled HLO's :class:`analysis.hlo.Collective` records; the
outputs are DataFrames.

Decisions worth knowing:

* A collective is told from compute by its HLO opcode (``opcodes``), never its name: JAX
  names an AllReduce ``psum.7`` or ``psum_invariant.14``.
* A step is one execution of a module on a device. Traces do not mark steps on every
  backend, so :func:`assign_steps` cuts a device's ops at each execution of an *anchor*: the
  op that runs fewest times (once a step, unlike loop bodies), earliest first. The step's
  span is its first op's start to its last op's end on that device (host gaps between
  steps are not the step's).
* Hidden time is collective time during which the same device also ran a compute op;
  exposed time is the rest. Both are per device, then the median over devices.
* Times per collective are device durations (median and p90 over executions and devices),
  as TPU/GPU profiles report them; on the CPU backend a device's duration includes waiting
  for the last device to arrive, shown apart as ``arrival_skew_s``. Across devices an
  execution is timed two ways, both medians over executions: ``time_after_arrival_s``, from
  the last device's start to the last device's end (the collective's own time once all have
  arrived), and ``time_with_waiting_s``, from the first start to the last end.
  ``measured_over_model`` divides the first by the model's time. Both subtract one device's
  timestamps from another's, so they (and the skew) are given only where the devices share a
  clock (``arrival_comparable``: the CPU devices of one host); TPU and GPU chips each keep
  their own, and there they are NaN and ``measured_over_model`` uses the median device time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

from analysis.book.collectives import BY_HLO, V_from_hlo, busbw_factor, nccl_S_bytes
from analysis.hlo import Collective, HloParseError, group_mesh_axes
from analysis.trace.overlap import merge_intervals, op_kind

STEP_COLUMNS = [
    "hlo_module",
    "step",
    "device",
    "start_ns",
    "end_ns",
    "step_s",
    "busy_s",
    "compute_s",
    "collective_s",
    "hidden_s",
    "exposed_s",
    "idle_s",
]


# hlo_table's columns (its rows' keys), for the empty table of a program without collectives
HLO_COLUMNS = [
    "hlo_module",
    "name",
    "kind",
    "computation",
    "dtype",
    "operand_bytes",
    "result_bytes",
    "replica_groups",
    "group_size",
    "num_groups",
    "mesh_axes",
    "V_bytes",
    "S_bytes",
    "busbw_factor",
    "model_time_s",
    "model_note",
]


def _braces(groups) -> str:
    return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}" if groups else "{}"


def hlo_table(
    collectives: dict[str, Iterable[Collective]],
    mesh: dict[str, int] | None = None,
    predict: Callable[[Collective, tuple[str, ...]], dict] | None = None,
) -> pd.DataFrame:
    """One row per collective instruction of each module (``{module: records}``): bytes,
    groups, the mesh axes the groups span (``mesh`` given) else ``group of N``, V and
    nccl-tests' S, and ``predict(c, axes)``'s ``model_time_s``/``model_note`` when given."""
    ids = np.arange(int(np.prod(list(mesh.values())))).reshape(list(mesh.values())) if mesh else None
    rows = []
    for module, records in collectives.items():
        for c in records:
            groups = c.replica_groups
            if c.source_target_pairs is not None:
                where = f"{len(c.source_target_pairs)} pairs"
                axes: tuple[str, ...] = ()
            else:
                axes, where = (), f"group of {c.group_size}" if c.group_size else "uneven groups"
                if mesh is not None:
                    try:
                        axes = group_mesh_axes(groups, ids, list(mesh))
                        where = ",".join(axes) or "none"
                    except HloParseError:
                        where += " (not whole mesh axes)"
            n = c.group_size or 0
            V = V_from_hlo(c.kind, c.operand_bytes, c.result_bytes, n)
            known = c.kind in BY_HLO and n > 0
            row = {
                "hlo_module": module,
                "name": c.name,
                "kind": c.kind,
                "computation": c.computation,
                "dtype": c.dtype,
                "operand_bytes": c.operand_bytes,
                "result_bytes": c.result_bytes,
                "replica_groups": _braces(groups) if c.source_target_pairs is None else _braces(c.source_target_pairs),
                "group_size": c.group_size,
                "num_groups": c.num_groups,
                "mesh_axes": where,
                "V_bytes": V,
                "S_bytes": nccl_S_bytes(BY_HLO[c.kind].op, V, n) if known else np.nan,
                "busbw_factor": busbw_factor(BY_HLO[c.kind].op, n) if known else np.nan,
                "model_time_s": np.nan,
                "model_note": "no model (no --hardware)" if predict is None else "",
            }
            if predict is not None:
                row.update(predict(c, axes))
            rows.append(row)
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=HLO_COLUMNS)  # no collective: no rows, same columns


# XProf's hlo_category of a collective, plain or fused ("all-gather fusion", "all-reduce
# fusion", "all-reduce-scatter fusion", ...): a TPU fusion that runs a collective
_COLLECTIVE_CATEGORY = r"^(?:all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute|all-reduce-scatter)\b"


def label_ops(ops: pd.DataFrame, collective_names: set[str], opcodes: dict[str, str] | None) -> pd.DataFrame:
    """``ops`` with ``is_collective``: a collective of the HLO (by name, as parsed), an op
    whose opcode is a collective's (by :func:`analysis.trace.overlap.op_kind`), or an op XProf
    puts in a collective's category (``hlo_category`` on TPU, e.g. ``all-gather fusion``)."""
    names = ops["hlo_op"].astype(str)
    kind = {n: op_kind(n, opcodes) == "collective" for n in names.unique()}  # once per name, not per row
    coll = names.isin(collective_names) | names.map(kind).astype(bool)
    if "hlo_category" in ops:
        coll |= ops["hlo_category"].astype(str).str.contains(_COLLECTIVE_CATEGORY, regex=True, na=False)
    return ops.assign(is_collective=coll.to_numpy(bool))


def assign_steps(ops: pd.DataFrame) -> pd.DataFrame:
    """``ops`` with ``step`` (0, 1, ...): the module execution each op belongs to on its device
    (see the module docstring); ops before the anchor's first execution get step -1."""
    out = ops.sort_values(["hlo_module", "device", "start_ns"], kind="stable").copy()
    out["step"] = -1
    for (_module, _device), g in out.groupby(["hlo_module", "device"], sort=False):
        counts = g.groupby("hlo_op")["start_ns"].agg(["count", "min"])
        anchor = counts.sort_values(["count", "min"], kind="stable").index[0]
        starts = np.sort(g.loc[g["hlo_op"] == anchor, "start_ns"].to_numpy())
        out.loc[g.index, "step"] = np.searchsorted(starts, g["start_ns"].to_numpy(), side="right") - 1
    return out


def _covered(spans: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Length of the union ``spans`` (disjoint, sorted) lying before each point ``x``."""
    if not len(spans):
        return np.zeros(len(x))
    lengths = spans[:, 1] - spans[:, 0]
    before = np.concatenate([[0.0], np.cumsum(lengths)])
    i = np.searchsorted(spans[:, 0], x, side="right")
    last = np.clip(x - spans[np.maximum(i - 1, 0), 0], 0, lengths[np.maximum(i - 1, 0)])
    return np.where(i > 0, before[np.maximum(i - 1, 0)] + last, 0.0)


def overlap_with(starts, ends, spans: np.ndarray) -> np.ndarray:
    """Per interval ``[start, end)``: how much of it lies inside the union ``spans``."""
    s, e = np.asarray(starts, float), np.asarray(ends, float)
    return _covered(spans, e) - _covered(spans, s)


def _union_lengths(starts: np.ndarray, ends: np.ndarray, group: np.ndarray, n: int) -> np.ndarray:
    """Per group ``0..n-1``: the length of the union of its ``[start, end)`` intervals (empty
    ones left out), for all groups at once: sorted by group then start, an interval opens a
    new merged span where it starts past the furthest end so far in its group."""
    keep = ends > starts
    s, e, g = starts[keep], ends[keep], group[keep]
    out = np.zeros(n)
    if not s.size:
        return out
    order = np.lexsort((s, g))
    s, e, g = s[order], e[order], g[order]
    reach = pd.Series(e).groupby(g).cummax().to_numpy()  # the furthest end so far, per group
    first = np.ones(s.size, bool)
    first[1:] = (g[1:] != g[:-1]) | (s[1:] > reach[:-1])
    span_start = s[first]
    span_end = np.maximum.reduceat(e, np.flatnonzero(first))
    np.add.at(out, g[first], span_end - span_start)
    return out


def step_table(ops: pd.DataFrame) -> pd.DataFrame:
    """One row per (module, step, device) of labelled, stepped ops: the step's span, time
    busy with any op, computing, in collectives (their union), hidden under compute,
    exposed, and idle (span minus busy).

    All groups at once (a per-group loop took minutes on a 1 M-event trace): with C the
    union of collective intervals and K that of compute, hidden = |C and K| = |C| + |K| -
    |C or K|, where C or K is the busy union."""
    stepped = ops[ops["step"] >= 0]
    keys = ["hlo_module", "step", "device"]
    if stepped.empty:
        return pd.DataFrame(columns=STEP_COLUMNS)
    g = stepped.groupby(keys, sort=True)
    gid = g.ngroup().to_numpy()
    n = int(gid.max()) + 1
    bounds = g.agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max")).reset_index()
    s = stepped["start_ns"].to_numpy(float)
    e = stepped["end_ns"].to_numpy(float)
    coll = stepped["is_collective"].to_numpy(bool)
    busy = _union_lengths(s, e, gid, n)
    comp = _union_lengths(s[~coll], e[~coll], gid[~coll], n)
    coll_ns = _union_lengths(s[coll], e[coll], gid[coll], n)
    hidden = np.clip(coll_ns + comp - busy, 0.0, coll_ns)  # rounding aside, within [0, |C|]
    span = (bounds["end_ns"] - bounds["start_ns"]).to_numpy(float)
    out = bounds[keys].copy()
    out["step"] = out["step"].astype(int)
    out["device"] = out["device"].astype(int)
    out["start_ns"], out["end_ns"] = bounds["start_ns"], bounds["end_ns"]
    out["step_s"] = span * 1e-9
    out["busy_s"] = busy * 1e-9
    out["compute_s"] = comp * 1e-9
    out["collective_s"] = coll_ns * 1e-9
    out["hidden_s"] = hidden * 1e-9
    out["exposed_s"] = (coll_ns - hidden) * 1e-9
    out["idle_s"] = (span - busy) * 1e-9
    return out[STEP_COLUMNS].reset_index(drop=True)


def step_summary(steps: pd.DataFrame) -> pd.DataFrame:
    """Per (module, step): the median over devices of :func:`step_table`'s times."""
    cols = [c for c in STEP_COLUMNS if c.endswith("_s")]
    g = steps.groupby(["hlo_module", "step"])
    return g[cols].median().join(g["device"].nunique().rename("devices")).reset_index()


def _execution_rows(ops: pd.DataFrame) -> pd.DataFrame:
    """Collective executions with the part of each hidden under its device's compute."""
    parts = []
    for _device, g in ops.groupby("device", sort=False):
        comp = merge_intervals(g.loc[~g["is_collective"], "start_ns"], g.loc[~g["is_collective"], "end_ns"])
        c = g[g["is_collective"]]
        parts.append(c.assign(hidden_ns=overlap_with(c["start_ns"], c["end_ns"], comp)))
    return pd.concat(parts) if parts else ops.iloc[0:0].assign(hidden_ns=0.0)


def collective_table(ops: pd.DataFrame, hlo: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """:func:`hlo_table` joined to what the trace measured, one row per collective
    instruction (those the trace never ran keep ``executions`` 0): device time per
    execution (median, p90), per step (median over device-steps of the sum of its
    executions), its share of the step, hidden and exposed time per step, bus bandwidth
    (nccl-tests: S / median time x factor) and measured / model."""
    ex = _execution_rows(ops[ops["step"] >= 0])
    ex = ex.assign(dur=ex["duration_ns"] * 1e-9, hid=ex["hidden_ns"] * 1e-9)
    per_exec = ex.groupby(["hlo_module", "hlo_op"]).agg(
        executions=("dur", "size"),
        devices=("device", "nunique"),
        time_median_s=("dur", "median"),
        time_p90_s=("dur", lambda s: float(np.quantile(s, 0.9))),
    )
    # An execution across devices (one step's k-th run of the op on every device), timed two
    # ways: after arrival, from the last device's start to the last device's end (the
    # collective's own time once all have arrived: a device's own duration includes waiting
    # for the last one); with waiting, from the first start to the last end.
    # After arrival is capped by the longest device time, as in analysis.trace.op_steps: a GPU
    # op of several kernels spans host gaps that are not its own.
    # Only where the devices' timestamps share one clock (device_ops' ``clock``; as in
    # analysis.trace.op_steps): TPU and GPU chips each keep their own, and one chip's start
    # minus another's is no skew, nor is one host's minus another's (several hosts' traces:
    # ``host``). There the three figures are NaN, ``arrival_comparable`` False.
    if "clock" in ex and "host" in ex:
        ex = ex.assign(clock=ex["clock"].astype(str) + " on " + ex["host"].astype(str))
    clocks = {"clocks": ("clock", "nunique")} if "clock" in ex else {}
    across = ex.groupby(["hlo_module", "hlo_op", "step", "iteration"]).agg(
        s0=("start_ns", "min"), s1=("start_ns", "max"), e1=("end_ns", "max"), longest=("duration_ns", "max"), **clocks
    )
    one_clock = across["clocks"] <= 1 if clocks else pd.Series(True, index=across.index)
    skew = ((across["s1"] - across["s0"]) * 1e-9).where(one_clock).groupby(level=[0, 1]).median()
    after_ns = np.minimum(across["e1"] - across["s1"], across["longest"]).where(one_clock)
    after = (after_ns * 1e-9).groupby(level=[0, 1]).median()
    waiting = ((across["e1"] - across["s0"]) * 1e-9).where(one_clock).groupby(level=[0, 1]).median()
    comparable = one_clock.groupby(level=[0, 1]).all()
    per_step = (
        ex.groupby(["hlo_module", "hlo_op", "step", "device"])
        .agg(t=("dur", "sum"), hid=("hid", "sum"), n=("dur", "size"))
        .reset_index()
    )
    span = steps.set_index(["hlo_module", "step", "device"])["step_s"]
    per_step["share"] = (
        per_step["t"].to_numpy()
        / span.reindex(pd.MultiIndex.from_frame(per_step[["hlo_module", "step", "device"]])).to_numpy()
    )
    per_step["exposed"] = per_step["t"] - per_step["hid"]
    agg = per_step.groupby(["hlo_module", "hlo_op"]).agg(
        executions_per_step=("n", "median"),
        time_per_step_s=("t", "median"),
        step_share=("share", "median"),
        hidden_per_step_s=("hid", "median"),
        exposed_per_step_s=("exposed", "median"),
    )
    measured = (
        per_exec.join(agg)
        .assign(
            arrival_skew_s=skew,
            time_after_arrival_s=after,
            time_with_waiting_s=waiting,
            time_last_arrival_s=after,  # the older name of time_after_arrival_s (training_steps reads it)
            arrival_comparable=comparable,
        )
        .reset_index()
        .rename(columns={"hlo_op": "name"})
    )
    out = hlo.merge(measured, on=["hlo_module", "name"], how="left")
    out["executions"] = out["executions"].fillna(0).astype(int)
    out["hidden_frac"] = out["hidden_per_step_s"] / out["time_per_step_s"]
    out["algbw_Bps"] = out["S_bytes"] / out["time_median_s"]
    out["busbw_Bps"] = out["algbw_Bps"] * out["busbw_factor"]
    # measured/model from the time after arrival: the model prices the transfer once every
    # device is in, not a device's wait for a late peer (arrival skew is the program's, not the link's)
    # Across chips' clocks there is no after-arrival time: the median device time stands in, an
    # upper bound (it includes a device's wait for the last arrival), said by arrival_comparable
    apart = out["arrival_comparable"].eq(False)
    measured = out["time_after_arrival_s"].where(~apart, out["time_median_s"])
    out["measured_over_model"] = measured / out["model_time_s"]
    out["last_arrival_over_model"] = out["measured_over_model"]  # its older name (training_steps reads it)
    return out.sort_values("time_per_step_s", ascending=False, na_position="last", kind="stable").reset_index(drop=True)


def typical_step(steps: pd.DataFrame, module: str) -> int:
    """The step of ``module`` whose median span over devices is the median one (a step
    neither warm-up slow nor luckily fast), for the timeline."""
    spans = steps[steps["hlo_module"] == module].groupby("step")["step_s"].median().sort_values(kind="stable")
    return int(spans.index[(len(spans) - 1) // 2])


def timeline(ops: pd.DataFrame, module: str, step: int, kinds: dict[str, str]) -> pd.DataFrame:
    """The ops of one step of ``module`` per device, times in seconds from the step's start
    (the earliest op on any device): ``device, lane, label, start_s, end_s``. ``kinds`` maps
    a collective's name to its HLO kind (the label); compute ops are labelled ``compute``."""
    g = ops[(ops["hlo_module"] == module) & (ops["step"] == step)]
    t0 = g["start_ns"].min()
    lane = np.where(g["is_collective"], "communication", "compute")
    label = [kinds.get(n, "collective") if c else "compute" for n, c in zip(g["hlo_op"], g["is_collective"])]
    return pd.DataFrame(
        {
            "device": g["device"].to_numpy(),
            "lane": lane,
            "label": label,
            "name": g["hlo_op"].to_numpy(),
            "start_s": (g["start_ns"].to_numpy() - t0) * 1e-9,
            "end_s": (g["end_ns"].to_numpy() - t0) * 1e-9,
        }
    )
