"""One sweep point's first round, inside the worker process: mesh, program, compile, check,
time, ceiling, trace.

:func:`measure` does everything, once (it fills ``record`` as it goes, so a failure part-way
still leaves what was learnt in the point's result.json). The point it builds and the round it
times are :mod:`runner.worker.point_round`'s, which also times the later rounds
(:func:`runner.worker.point_round.retime`); what the HLO and the trace say about the collective
is :mod:`runner.worker.trace_facts`'.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

from analysis import trace as trace_analysis
from analysis.book.collectives import busbw_factor, nccl_S_bytes
from analysis.runs import point_table
from analysis.runs.record import (
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
    Samples,
    Spec,
    Timing,
    Trace,
    dump,
)
from analysis.runs.rundir import HLO_COMPILED, HLO_DIR, HLO_LOWERED, TRACE_DIR
from runner.config.memory import check_fits
from runner.config.spec import check_against_devices
from runner.errors import ConfigError
from runner.worker import copy_curve, estimators, meshes, point_cache, timing, tracing
from runner.worker.ceiling import link_roofline
from runner.worker.devices import environment, resolve_hardware
from runner.worker.point_round import Point, prepare, time_round
from runner.worker.result_check import check
from runner.worker.trace_facts import compiled_as, perturbation, traced_ops


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
    :class:`analysis.runs.record.Timing` that :func:`runner.worker.estimators.summarise` combines
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
    record["timing"] = estimators.summarise(record["timing"], spec["timing"], record["environment"].backend)

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
    # trace.inspect_iters says how many steps (timing=quick: 1); it then times nothing. Either
    # way its steps end within trace.inspect_max_s there, not max_s.
    inspect = spec["trace"].get("inspect_iters")
    aside = not estimators.device_is_estimator(spec["timing"], backend)
    inspect_only = inspect is not None and aside
    trace_conf = spec["trace"]
    if aside:
        trace_conf = dict(trace_conf, max_s=min(trace_conf["max_s"], trace_conf["inspect_max_s"]))
    if inspect_only:
        trace_conf = dict(trace_conf, iters=inspect)
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
            record["timing"] = estimators.summarise(record["timing"].with_(device=device), spec["timing"], backend)
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
