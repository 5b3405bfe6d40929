"""Which step each op execution of a trace belongs to (the ``step`` column of
:func:`analysis.trace.device_ops`).

A step is one execution of the module. On TPU the device plane's ``XLA Modules`` line records
each execution, and an op belongs to the execution it starts before the end of. CPU and GPU
traces mark no step on the device: there steps come from the ops' own runs (an op that runs
m times a step opens a step every m runs), with the number of steps where the caller knows it
(the runner traced that many calls). An op may run several times a step (a ``lax.scan``, XLA's
own while loops, TPU's windowed einsum): the k-th run of an op is not step k.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

# The whole plane name: "/device:TPU:0 SparseCore 0" is a SparseCore's plane, not TPU 0's ops
DEVICE_PLANE = re.compile(r"^/device:(TPU|GPU):(\d+)$")
# an XLA Modules event: "jit_step(17342868964687645945)", the module and its program id
MODULE_EVENT = r"^(?P<module>.+)\((?P<program_id>\d+)\)$"


def _module_runs(events: pd.DataFrame) -> pd.DataFrame:
    """The module executions the ``XLA Modules`` lines of TPU device planes record:
    ``device``, ``program_id`` (text), ``end_ns``; sorted by device, program and end."""
    runs = events[events["line"] == "XLA Modules"]
    dev = runs["plane"].astype(str).str.extract(DEVICE_PLANE)
    runs = runs[dev[1].notna()]
    found = runs["name"].astype(str).str.extract(MODULE_EVENT)
    out = pd.DataFrame(
        {
            "device": pd.to_numeric(dev.loc[runs.index, 1], errors="coerce"),
            "program_id": found["program_id"],
            "end_ns": (runs["start_ns"] + runs["duration_ns"]).astype(float),
        }
    ).dropna()
    return out.sort_values(["device", "program_id", "end_ns"], kind="stable")


def step_of(ops: pd.DataFrame, events: pd.DataFrame, steps: int | None = None) -> np.ndarray:
    """Each op's step (see :func:`device_ops`): by the ``XLA Modules`` line where it records
    the op's program on the op's device, else by :func:`_steps_by_runs`."""
    step = _steps_by_runs(ops, steps)
    runs = _module_runs(events)
    if runs.empty or "program_id" not in ops:
        return step
    pid = ops["program_id"].astype(object).where(ops["program_id"].notna(), None)
    for (device, program), ends in runs.groupby(["device", "program_id"], sort=False)["end_ns"]:
        at = np.flatnonzero((ops["device"].to_numpy() == device) & (pid.to_numpy() == program))
        if not len(at):
            continue
        # the execution the op starts before the end of: an op between two executions (a
        # timestamp a ns early) belongs to the next; one after the last, to none of them
        k = np.searchsorted(ends.to_numpy(), ops["start_ns"].to_numpy(float)[at], side="left")
        step[at] = np.where(k < len(ends), k, -1)
    return step


def _steps_by_runs(ops: pd.DataFrame, steps: int | None = None) -> np.ndarray:
    """Steps where no module line marks them (CPU, GPU), per device and module, from the ops'
    own runs. The module ran n times: ``steps``, else as often as its least-run op (a
    top-level op runs once a step). An op run m*n times runs m times a step, so its runs 0,
    m, 2m, ... each open a step. Step k begins at the earliest of those k-th openings over
    all such ops (a step that opens with a loop begins at the loop's first op, not at the
    first op that runs once); an op belongs to the last step begun at or before its start
    (-1 before the first). An op run a number of times that is no multiple of n (a
    conditional's branch) is placed by time alone."""
    if ops.empty:
        return np.zeros(0, int)
    keys = [ops["device"], ops["hlo_module"]]
    runs = ops.groupby([*keys, ops["hlo_op"]], sort=False)["start_ns"].transform("size")
    if steps:
        n = np.full(len(ops), int(steps))
    else:
        n = runs.groupby(keys, sort=False).transform("min").to_numpy()
    runs = runs.to_numpy()
    regular = runs % n == 0
    per_step = np.where(regular, runs // n, 1)
    k, opening = np.divmod(ops["iteration"].to_numpy(), per_step)
    opens = regular & (opening == 0)
    start = ops["start_ns"].to_numpy(float)
    begins = pd.Series(start[opens]).groupby([c.to_numpy()[opens] for c in keys] + [k[opens]]).min()
    step = np.full(len(ops), -1, int)
    rows = ops.reset_index(drop=True).groupby(["device", "hlo_module"], sort=False).indices
    for key, bounds in begins.groupby(level=[0, 1], sort=False):
        at = rows[key]
        # a step never begins before the one before it (a stray early op must not reorder them)
        b = np.maximum.accumulate(bounds.to_numpy())
        step[at] = np.searchsorted(b, start[at], side="right") - 1
    return step
