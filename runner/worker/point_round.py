"""A point ready to time, and one round of its timings: what a sweep point's first round
(:func:`runner.worker.measure.measure`) and each later round (:func:`retime`) share.

:func:`prepare` builds the mesh, the program and its inputs and compiles the step (and, once
its trip counts are known, the loop estimator's programs); :func:`time_round` times one round
of the *step* and *loop* estimators. :func:`retime` is a later round of a point measured before:
the point as the worker kept it (:mod:`runner.worker.point_cache`), one more round, which the
parent interleaves with the other points' rounds (:mod:`runner.sweep.rounds`).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np

from analysis import trace as trace_analysis
from analysis.runs.record import Round, RoundInputs, Samples
from analysis.runs.rundir import now_iso
from runner.config.memory import estimate
from runner.config.spec import check_against_devices
from runner.worker import estimators, meshes, point_cache, programs, timing, tracing
from runner.worker.programs.loop import LoopPrograms
from runner.worker.trace_facts import traced_ops


@dataclass
class Point:
    """A point ready to time: its program compiled, its inputs on the devices."""

    mesh: jax.sharding.Mesh
    mesh_axes: dict
    prog: programs.Program
    args: tuple
    lowered: object
    compiled: object
    loop: LoopPrograms | None = None  # the loop estimator's programs, compiled per K when timed
    loop_check: dict | None = None

    def step(self):
        return self.compiled(*self.args)


def prepare(spec: dict, phase: timing.Phases, record: dict | None = None) -> Point:
    """Mesh, program, inputs and the compiled step (and loop) program of ``spec``."""
    with phase("setup"):
        devices = jax.devices()
        mesh_axes = check_against_devices(spec, len(devices))  # last checks before device work
        point_cache.make_room(estimate(spec, mesh_axes), len(devices))  # points kept for later rounds
        cross = spec.get("distributed", {}).get("cross_process_axis")
        mesh = meshes.build_mesh(mesh_axes, cross, name=spec["mesh"]["name"])  # errors name the mesh
        prog = programs.build(spec, mesh)
    with phase("input"):
        args = prog.make_input()
        args = args if isinstance(args, tuple) else (args,)  # a matmul takes two arrays
    with phase("lower"):
        lowered = prog.fn.lower(*args)
    with phase("compile"):
        compiled = lowered.compile()
    point = Point(mesh, mesh_axes, prog, args, lowered, compiled)
    if spec["timing"]["loop"]:  # compiled in time_round, once its trip counts are known
        point.loop = LoopPrograms(prog.fn, mesh, args, compiled.as_text())
    return point


def time_round(
    point: Point, spec: dict, round_no: int, K: list[int] | int | None = None, loop: bool = True, kept: bool = False
) -> Round:
    """One round of the *step* and *loop* estimators, with the machine's state. ``loop`` False
    leaves the loop out of a later round: round 1's loop agreed with the source estimator
    (:func:`runner.worker.estimators.loop_rule`, decided by the parent). ``kept``: the point's
    program and inputs stayed in the worker since its earlier round, so the step warms up with
    :data:`runner.worker.timing.LATER_ROUND_WARM_ITERS` steps, not a settling warm-up. A later
    round (``round_no`` > 1) is timed within ``timing.later_budget_s``, not ``timing.budget_s``."""
    t = spec["timing"]
    if round_no > 1:  # the spread between rounds sets a point's interval, not the samples within one
        t = dict(t, budget_s=t["later_budget_s"])
    out = Round.of(round=round_no, started_at=now_iso(), **timing.machine_state())
    faults0 = timing.minor_faults()
    warm_iters = timing.LATER_ROUND_WARM_ITERS if kept else None
    step = timing.time_step(point.step, t, meshes.agree, warm_iters=warm_iters)
    steps_run = step["warmup_iters"] + len(step["samples_s"]) * t["iters_per_sample"]
    out = out.with_(
        page_faults_per_step=(timing.minor_faults() - faults0) / max(steps_run, 1),
        step=Samples.of(**{k: v for k, v in step.items() if k != "summary"}),  # summarise combines the samples
    )
    if point.loop is not None and loop and round_no == 1:
        long_step = estimators.loop_check_needless(step["summary"]["median_s"], spec["timing"], jax.default_backend())
        if meshes.agree(long_step):  # every process leaves it out, or none: they run the same collectives
            point.loop_check = {"ok": None, "why": long_step}
            loop = False
    if point.loop is not None and loop:
        # K1, K2 set how many collectives the loop calls run: every process takes process 0's
        # (a later round gets round 1's, so its compiles come from the persistent cache)
        Ks = timing.given_Ks(K) or meshes.agree(timing.loop_Ks(step["summary"]["median_s"], t["loop_target_s"]))
        calls = point.loop.calls(Ks)
        point.loop_check = point.loop.check
        out = out.with_(loop_compile_s=point.loop.compile_s)
        if calls is not None:
            looped = timing.time_loop(calls, Ks, t, meshes.agree, empty=point.loop.empty, kept=kept)
            out = out.with_(loop=Samples.of(**looped))
    return out


def retime(spec: dict, round_no: int, K: int | None, loop: bool = True) -> dict:
    """A later round of a point measured before, as the worker sends it: the round's JSON
    (:class:`analysis.runs.record.Round`) with its phases' seconds, ``phases_s`` (with the
    *loop* estimator only where ``loop``: :func:`runner.worker.estimators.loop_rule`). Where the
    device estimator is the one the fits use (TPU, GPU, or ``timing.estimator=device``), the
    round traces the point again, so that its device times have rounds too; the trace goes to
    a temporary folder (the point's own ``trace/`` keeps the first round's, for XProf).

    The point comes from the worker's cache of prepared points (:mod:`runner.worker.point_cache`):
    its inputs stay placed and its programs compiled from round 1, so the round costs its timed
    samples. Where the cache no longer has it, the round prepares it again and its ``inputs``
    entry says why."""
    phase = timing.Phases()
    point = point_cache.get(spec)
    if point is not None:
        inputs = RoundInputs.of(
            placed="kept", why="the inputs and programs of the point's earlier round, kept in the worker"
        )
    else:
        inputs = RoundInputs.of(placed="again", why=point_cache.why_missing(spec))
        point = prepare(spec, phase)
    try:
        with phase("timing"):
            out = time_round(point, spec, round_no, K, loop, kept=inputs.placed == "kept")
    except BaseException:
        point_cache.drop(spec)  # a round that failed part-way: its loop carry may be in any state
        raise
    if inputs.placed == "again":
        point_cache.put(spec, point)
    out = out.with_(inputs=inputs)
    if spec["trace"]["enabled"] and estimators.device_is_estimator(spec["timing"], jax.default_backend()):
        with phase("trace"), tempfile.TemporaryDirectory(prefix="shardlab-round-") as tmp:
            captured = tracing.capture(point.step, Path(tmp), spec["trace"])
            group = int(np.prod([point.mesh_axes[a] for a in spec["op"].axes]))
            ops, names = traced_ops(captured["xplane"], point.compiled.as_text(), spec["op"], group, captured["iters"])
            out = out.with_(device=Samples.of(samples_s=trace_analysis.device_samples(ops, names)))
    # the phases travel beside the round, not in it: the sweep adds them to the record's phases_s
    return dict(out.to_json(), phases_s=dict(phase))
