"""One sweep point, inside the worker process: mesh, program, compile, check, time, trace.

:func:`measure` is a point's first round: everything, once (it fills ``record`` as it goes,
so a failure part-way still leaves what was learnt in the point's result.json).
:func:`retime` is a later round of the same point: the program again (its compile comes
from JAX's persistent cache) and one more round of the *step* and *loop* timings, which
the parent interleaves with the other points' rounds (:mod:`runner.sweep.rounds`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np

from analysis import trace as trace_analysis
from analysis.book.collectives import BY_OP, busbw_factor, nccl_S_bytes
from analysis.hlo import collective_executions, instruction_opcodes
from analysis.runs import point_table
from analysis.runs.record import (
    DEVICE,
    STEP,
    Ceiling,
    Check,
    Compile,
    Environment,
    LoopCheck,
    MemoryEstimate,
    MemoryPeak,
    Mesh,
    Placement,
    Process,
    Result,
    Round,
    RoundInputs,
    Samples,
    Spec,
    Timing,
    Trace,
    dump,
)
from analysis.runs.rundir import HLO_COMPILED, HLO_DIR, HLO_LOWERED, TRACE_DIR, now_iso
from runner.config.memory import check_fits, estimate
from runner.config.op_spec import Op
from runner.config.spec import check_against_devices
from runner.errors import ConfigError
from runner.worker import copy_curve, meshes, point_cache, programs, timing, tracing
from runner.worker.ceiling import link_roofline
from runner.worker.devices import environment, resolve_hardware
from runner.worker.programs.loop import LoopPrograms
from runner.worker.result_check import check


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
    (:func:`runner.worker.timing.loop_rule`, decided by the parent). ``kept``: the point's
    program and inputs stayed in the worker since its earlier round, so the step warms up with
    :data:`runner.worker.timing.LATER_ROUND_WARM_ITERS` steps, not a settling warm-up."""
    t = spec["timing"]
    out = Round.of(round=round_no, started_at=now_iso(), **timing.machine_state())
    faults0 = timing.minor_faults()
    warm_iters = timing.LATER_ROUND_WARM_ITERS if kept else None
    step = timing.time_step(point.step, t, meshes.agree, warm_iters=warm_iters)
    steps_run = step["warmup_iters"] + len(step["samples_s"]) * t["iters_per_sample"]
    out = out.with_(
        page_faults_per_step=(timing.minor_faults() - faults0) / max(steps_run, 1),
        step=Samples.of(**{k: v for k, v in step.items() if k != "summary"}),  # summarise combines the samples
    )
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


def memory_now() -> dict:
    """This process's resident memory now and its high-water mark since the last reset
    (Linux ``/proc/self/status``; empty elsewhere)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return {}
    out = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out["rss_bytes" if key == "VmRSS" else "rss_peak_bytes"] = int(value.split()[0]) * 1024
    return out


def reset_peak_memory() -> None:
    """Restart the high-water mark of resident memory (Linux: ``5`` to ``/proc/self/clear_refs``)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def measure(spec: dict, point_dir: Path, record: dict) -> None:
    """Round 1 of ``spec``: write ``hlo/`` and ``trace/`` under ``point_dir``; fill ``record``.

    ``record`` is the point's record as it grows: result.json's sections by key, each a typed
    section of :mod:`analysis.runs.record` (``environment``, ``spec``, ``compile``, ``check``,
    ``ceiling``, ``trace``, ...) as soon as it is known, so a point that fails part-way still
    has what it learnt (:func:`as_json` turns it into the reply's JSON). ``timing`` is a
    :class:`analysis.runs.record.Timing` that :func:`runner.worker.timing.summarise` combines
    again whenever its samples grow (the trace's here, a later round's on the sweep's side)."""
    reset_peak_memory()
    before = memory_now()
    try:
        _measure(spec, point_dir, record)
    finally:  # what the point really held, beside the estimate it was admitted with
        after = memory_now()
        if before and after:
            record["memory_peak"] = MemoryPeak.of(
                rss_before_bytes=before["rss_bytes"],
                rss_peak_bytes=after["rss_peak_bytes"],
                growth_bytes=after["rss_peak_bytes"] - before["rss_bytes"],
            )


def as_json(record: dict) -> dict:
    """The record :func:`measure` filled, as the JSON the worker sends (result.json's keys)."""
    return dump(record)


def _measure(spec: dict, point_dir: Path, record: dict) -> None:
    phase = record["phases_s"] = timing.Phases()
    with phase("setup"):
        devices = _check_setup(spec, record)
    point = prepare(spec, phase)
    op = spec["op"]
    group = int(np.prod([point.mesh_axes[a] for a in op.axes]))
    record["spec"] = _spec_record(spec, point, record["hardware"], group, len(devices))
    record["process"] = Process.of(**meshes.process_info())
    record["compile"] = Compile.of(lower_s=phase["lower"], compile_s=phase["compile"])
    with phase("hlo_dump"):
        (point_dir / HLO_DIR).mkdir(parents=True, exist_ok=True)
        hlo_text = point.compiled.as_text()
        if jax.process_index() == 0:  # one copy per point; every process compiles the same program
            (point_dir / HLO_LOWERED).write_text(point.lowered.as_text())
            (point_dir / HLO_COMPILED).write_text(hlo_text)
    record["files"] = {"hlo_lowered": HLO_LOWERED, "hlo_compiled": HLO_COMPILED}
    # the asked collective compiled as others (or offloaded): the device estimator times those
    if rewritten := compiled_as(hlo_text, op.timed_collective(group)):
        record["spec"] = record["spec"].with_(rewritten=rewritten)

    _check_result(spec, point, phase, record)
    with phase("timing"):
        first = time_round(point, spec, 1)
    point_cache.put(spec, point)  # the later rounds time it as it stands (runner.worker.point_cache)
    check = LoopCheck.of(**point.loop_check) if point.loop_check is not None else None
    record["timing"] = Timing.of(rounds=(first,), loop_check=check, seed=spec["timing"]["seed"])
    record["timing"] = timing.summarise(record["timing"], spec["timing"], record["environment"].backend)

    with phase("ceiling"):
        found = ceiling(spec, record, point, group)
        record["ceiling"] = Ceiling.from_json(found) if found is not None else None

    if not spec["trace"]["enabled"]:
        _save_table(point_dir, record, hlo_text)
    elif (traced := _trace(spec, point_dir, record, point, hlo_text, group)) is not None:
        _save_table(point_dir, record, hlo_text, *traced)


def _check_setup(spec: dict, record: dict) -> list:
    """The devices, after the checks that need them (processes, mesh, memory); records the
    environment, the resolved hardware entry and the memory estimate."""
    devices = jax.devices()
    if jax.process_count() > 1 and spec.get("distributed", {}).get("mode", "none") == "none":
        raise ConfigError(
            f"JAX sees {jax.process_count()} processes (a multi-host slice or a cluster job) but "
            "distributed=none; use distributed=auto so that they join one mesh"
        )
    record["environment"] = Environment.of(**environment(jax, devices))
    record["hardware"] = resolve_hardware(spec["hardware"], devices)
    mesh_axes = check_against_devices(spec, len(devices))
    # memory_stats() is None on the CPU backend (its devices use host memory) and has no
    # bytes_limit with XLA_PYTHON_CLIENT_ALLOCATOR=platform: then the entry's HBM size
    stats = jax.local_devices()[0].memory_stats() or {}
    limit = stats.get("bytes_limit") or record["hardware"].get("memory_bytes")
    fits = check_fits(spec, mesh_axes, limit, devices_on_host=jax.default_backend() == "cpu")
    record["memory_estimate"] = MemoryEstimate.of(**fits)
    return devices


def _spec_record(spec: dict, point: Point, hardware: dict, group: int, n_devices: int) -> Spec:
    """result.json's ``spec``: what was run, on which mesh and devices, and how it is placed."""
    op = spec["op"]
    values = dict(
        op=op.name,
        expr=point.prog.expr,
        axes=list(op.axes),
        size_bytes=op.size_bytes,
        V_bytes=point.prog.V_bytes,
        dtype=spec["dtype"],
        precision=spec["precision"],
        group_size=group,
        num_groups=n_devices // group,
        mesh=Mesh.of(
            name=spec["mesh"]["name"],
            axes=point.mesh_axes,
            device_ids=point.mesh.device_ids.tolist(),
            devices=meshes.device_coords(point.mesh),
            # each axis' physical extent and wraparound (TPU)
            physical=meshes.physical_placement(point.mesh, hardware.get("wraparound")),
        ),
        hardware=hardware["name"],
    )
    # the program's own facts (a matmul's plan, a block's sharding, ...), over the op's where both say
    # (a matmul's axes and bytes are its operands')
    out = Spec.of(**values, **{k: v for k, v in point.prog.extra.items() if k not in values})
    out = out.with_(**{k: v for k, v in point.prog.extra.items() if k in values})
    if op.collective and group < 2:
        # XLA turns a collective over one device into a copy: what is timed is not communication
        out = out.with_(no_communication="group of 1: XLA runs the collective as a copy")
    # which axes cross processes
    return out.with_(placement=Placement.of(**meshes.describe(point.mesh, op.axes)))


def _check_result(spec: dict, point: Point, phase: timing.Phases, record: dict) -> None:
    """The result check, into ``record["check"]``; a wrong result then raises (the point fails,
    its record saying how)."""
    if not spec["check_result"]:
        record["check"] = Check.of(passed=None, unchecked=True, why="check_result=false")
        return
    with phase("check_run"):  # the one execution the check reads: device time, not the check's
        got = jax.block_until_ready(point.step())
    with phase("check"):
        want = point.prog.reference() if point.prog.reference is not None else None
        found = check(got, want, spec["dtype"], point.prog.tolerance)
        record["check"] = Check.of(**found)
    if not found["passed"]:
        raise AssertionError(f"result differs from the NumPy reference: {found}")


def _trace(spec: dict, point_dir: Path, record: dict, point: Point, hlo_text: str, group: int):
    """Trace the point's steps and read the trace: the device estimator's samples (where it is
    the estimator) and the profiler's perturbation. The trace's ops and their per-op summary
    (:func:`analysis.trace.op_summary`), or None when tracing failed (the point's timings
    stand; the worker ends after this point)."""
    op, backend = spec["op"], record["environment"].backend
    # a trace the estimator does not need (CPU under auto) is kept for inspection alone where
    # trace.inspect_iters says how many steps (timing=quick: 1); it then times nothing
    inspect = spec["trace"].get("inspect_iters")
    inspect_only = inspect is not None and not timing.device_is_estimator(spec["timing"], backend)
    trace_conf = dict(spec["trace"], iters=inspect) if inspect_only else spec["trace"]
    phase = record["phases_s"]
    try:
        with phase("trace"):
            captured = tracing.capture(point.step, meshes.trace_dir(point_dir / TRACE_DIR), trace_conf)
    except Exception as exc:  # a trace is for attribution: the point's timings stand without it
        record["trace"] = Trace.of(error=f"{type(exc).__name__}: {exc}")
        # The profiler may still be running in this process, and every later point would
        # fail with "Profile has already been started": the worker ends after this point.
        record["restart_worker"] = True
        return None
    record["files"]["xplane"] = str(captured.pop("xplane").relative_to(point_dir))
    record["trace"] = Trace.from_json(captured).with_(wall_s=phase["trace"])
    if inspect_only:
        record["trace"] = record["trace"].with_(
            inspect_only=f"trace.inspect_iters={inspect}: {captured['iters']} traced step(s) kept for inspection; "
            f"the {record['timing'].estimator} estimator needs no trace, so its device times are no estimator"
        )
    with phase("trace_parse"):
        ops, names = traced_ops(point_dir / record["files"]["xplane"], hlo_text, op, group, captured["iters"])
        if not inspect_only:
            device = Samples.of(
                samples_s=trace_analysis.device_samples(ops, names),
                what="the collective's device time" if names is not None else "the program's device time",
                instructions=sorted(names) if names is not None else None,
            )
            record["timing"] = timing.summarise(record["timing"].with_(device=device), spec["timing"], backend)
        summary = trace_analysis.op_summary(trace_analysis.op_steps(ops)) if len(ops) else None
        record["trace"] = record["trace"].with_(
            **perturbation(ops, captured["wall_samples_s"], record["timing"], backend, summary)
        )
    return ops, summary


def _save_table(point_dir: Path, record: dict, hlo_text: str, ops=None, summary=None) -> None:
    """The point's HLO and trace facts for the report (:mod:`analysis.runs.point_table`), from what
    this round already read: the report then parses neither again. Process 0 writes it, as it
    writes the HLO. Without it (a full disk, a reader's bug) the report builds it from the files."""
    if jax.process_index():
        return
    try:
        with record["phases_s"]("ops_table"):
            rec = Result.from_json(dict(as_json(record), point_dir=str(point_dir)))  # the reader's record of it
            point_table.save(point_dir, point_table.build(rec, hlo_text, ops, summary))
    except Exception as exc:  # noqa: BLE001 - the point's timings stand without it
        record["ops_table_error"] = f"{type(exc).__name__}: {exc}"


def retime(spec: dict, round_no: int, K: int | None, loop: bool = True) -> dict:
    """A later round of a point measured before, as the worker sends it: the round's JSON
    (:class:`analysis.runs.record.Round`) with its phases' seconds, ``phases_s`` (with the
    *loop* estimator only where ``loop``: :func:`runner.worker.timing.loop_rule`). Where the
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
    if spec["trace"]["enabled"] and timing.device_is_estimator(spec["timing"], jax.default_backend()):
        with phase("trace"), tempfile.TemporaryDirectory(prefix="shardlab-round-") as tmp:
            captured = tracing.capture(point.step, Path(tmp), spec["trace"])
            group = int(np.prod([point.mesh_axes[a] for a in spec["op"].axes]))
            ops, names = traced_ops(captured["xplane"], point.compiled.as_text(), spec["op"], group, captured["iters"])
            out = out.with_(device=Samples.of(samples_s=trace_analysis.device_samples(ops, names)))
    # the phases travel beside the round, not in it: the sweep adds them to the record's phases_s
    return dict(out.to_json(), phases_s=dict(phase))


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


def ceiling(spec: dict, record: dict, point: Point, group: int) -> dict | None:
    """The point's bus-bandwidth ceiling: on CPU the copy curve (measured once per process or
    reused from this machine's cache, :mod:`runner.worker.copy_curve`) read at the point's bus bytes
    per device, with its interval; the book's roofline elsewhere (:mod:`runner.worker.ceiling`); None
    for programs without a collective to hold to it, and on CPU with ``timing.ceiling=false``."""
    op = spec["op"]
    if (collective := op.timed_collective(group)) is None:
        return None
    n_axes = sum(1 for a in op.axes if point.mesh_axes[a] > 1)
    if record["hardware"].get("kind") == "cpu" or record["environment"].backend == "cpu":
        if not spec["timing"].get("ceiling", True):  # timing.ceiling=false (timing=quick): no curve measured
            return None
        bus_bytes = nccl_S_bytes(collective, point.prog.V_bytes, group) * busbw_factor(collective, group)
        return copy_curve.at(copy_curve.cpu_curve(), int(bus_bytes))
    return link_roofline(record["hardware"], n_axes, record["spec"].mesh.physical, list(op.axes))


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
