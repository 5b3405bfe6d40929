"""What a point's compiled HLO and trace say about the collective it measures: which
instructions time it (:func:`target_instructions`, as the trace names them), whether it
compiled as something else (:func:`compiled_as`), the traced ops (:func:`traced_ops`), and what
tracing did to the step (:func:`perturbation`). Pure functions of the texts and tables, shared
by a point's first round and its later rounds."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import numpy as np

from analysis import trace as trace_analysis
from analysis.book.collectives import BY_OP
from analysis.hlo import collective_executions, instruction_opcodes
from analysis.runs import point_table
from analysis.runs.record import DEVICE, STEP, Timing
from runner.config.op_spec import Op


def traced_ops(xplane: Path, hlo_text: str, op: Op, group: int, steps: int):
    """A traced point's device-op table and the names of the instructions that run its
    collective (:func:`target_instructions`, as this trace names them). Only collectives' async
    halves are joined (a host offload's copy-start/-done stays two ops, as XProf keeps it), and
    steps are cut at the module's executions, of which the trace holds ``steps`` (the traced
    calls; an op may run several times a step)."""
    ops = point_table.point_ops(xplane, hlo_text, steps)
    return ops, target_instructions(hlo_text, op.timed_collective(group), seen=set(ops["hlo_op"]))


def target_instructions(
    hlo_text: str, op: str | None, grad: bool = False, group: int = 2, seen: Collection[str] | None = None
) -> set[str] | None:
    """Names, as the trace shows them, of the top-level instructions that run the collective a
    point measures (:func:`analysis.hlo.collective_executions`: by opcode, whatever JAX named
    them, so an AllReduce may be ``psum.7``; both halves of an async pair; a fusion or an
    offloaded ``call-start``/``call-done`` wrapping it, never an instruction nested in a fusion).
    A generic ``async-start``/``async-done`` wrapper is named by its pair or by the wrapped
    instruction (a GPU trace's NCCL kernel): ``seen``, the op names of the trace, picks the one
    it shows, so that no execution is counted twice; without ``seen`` both are listed.

    Where the compiled step runs none of the asked collective but runs others in its place (an
    AllReduce compiled as a reduce-scatter fusion and an all-gather), the names of every
    collective the step runs: the point is timed by those, and :func:`compiled_as` says so. An
    empty set when the step runs no collective at all: the device estimator then has no time.
    None, timed whole, for ``op`` None (an op's ``timed_collective`` says which, in
    :mod:`runner.config.op_spec`), a matmul, a grad, or a ``group`` of 1 (XLA runs a copy, and
    the point is flagged as no communication)."""
    if op not in BY_OP or grad or group < 2:
        return None
    hlo = BY_OP[op].hlo
    executed = collective_executions(hlo_text, seen)
    asked = {name for name, kinds in executed.items() if hlo in kinds}
    return asked or set(executed)


def compiled_as(hlo_text: str, op: str | None, grad: bool = False, group: int = 2) -> str | None:
    """One line where the compiled step runs the asked collective as something else, and what
    :func:`target_instructions` then times: ``"compiled as reduce-scatter + all-gather: timed
    by those"`` (the asked kind never runs, other collectives do, named in the order the step's
    text has them), ``"offloaded as call-start/call-done (e.g. to the SparseCore): timed by that
    pair"`` (every execution of it is an async call's); None where it runs as itself, and for
    points timed whole (:func:`target_instructions` None)."""
    if op not in BY_OP or grad or group < 2:
        return None
    hlo = BY_OP[op].hlo
    executed = collective_executions(hlo_text)
    asked = [name for name, kinds in executed.items() if hlo in kinds]
    if not asked:
        kinds = list(dict.fromkeys(k for ks in executed.values() for k in ks))
        return f"compiled as {' + '.join(kinds)}: timed by those" if kinds else None
    opcodes = instruction_opcodes(hlo_text)
    if all(opcodes.get(name) in ("call-start", "call-done") for name in asked):
        return "offloaded as call-start/call-done (e.g. to the SparseCore): timed by that pair"
    return None


def perturbation(ops, traced_walls: list[float], t: Timing, backend: str | None = None, summary=None) -> dict:
    """What tracing did to the step, and how much of an untraced step the device spent.

    ``profiler_slowdown`` = traced step / untraced step (both wall times of one blocked
    step). ``dispatch_share`` = (step - device time) / step: the part of a step the device
    did not spend on the program (the host's dispatch and sync), from the device estimator;
    only where the device times its own ops (not on ``cpu``, where the "device time" is the
    traced host thread's: it waits for the other devices and is slowed by the profiler, 3.7-97x
    here, so it came out above the step, a share of -93.7), and never below 0.
    """
    step, device = t.estimate(STEP).median_s, t.estimate(DEVICE).median_s
    out = {"op_events": int(len(ops)), "traced_step_median_s": float(np.median(traced_walls))}
    if step:
        out["profiler_slowdown"] = out["traced_step_median_s"] / step
        if device and backend != "cpu" and device <= step:
            out["dispatch_share"] = (step - device) / step
    if len(ops):  # ``summary``: the ops' summary where the caller has it
        if summary is None:
            summary = trace_analysis.op_summary(trace_analysis.op_steps(ops))
        out["ops"] = summary.to_dict(orient="records")
    return out
