"""The record between runner and analysis: what a point's ``result.json`` holds, declared once.

The runner's worker writes it (:mod:`runner.worker.measure`, :mod:`runner.worker.timing`; the
sweep side adds ``prediction``, ``bandwidth`` and ``timing.rounds_rule``; ``timing.loop_rule``
comes from :func:`runner.worker.estimators.summarise`, in the worker and after each round), the importers write
the same shape for another tool's numbers, and the analysis reads it through these classes
instead of walking the JSON. :mod:`analysis.runs.rundir` owns the folder's names and the reader
that turns a damaged file into a failed record; this module owns the keys inside the file.

Every section is a small frozen dataclass whose :meth:`_Section.from_json` takes what the file
has and tolerates what it lacks: a key written before it existed (or by an importer, which
writes only what it knows) reads as None, a missing or malformed section (``null``, a list)
as an empty one. Values are kept as the JSON gave them (no casting): the tables decide how to
show a missing number. A file written at ``format_version`` 1 names the spec ``experiment``
(and a reader of that time added ``job`` and ``job_dir``) and the estimator the tables use
its timing's ``source`` (and ``source_reason``): :func:`upgraded` reads those as ``spec``,
``point``, ``point_dir``, ``estimator`` and ``estimator_reason``, so every file ever written loads.

Every key the runner writes is declared here (``config`` is Hydra's, open-ended: ``Config.tree``
holds it whole), and the record writes itself back: :meth:`_Section.to_json`. The rule for None
(:mod:`analysis.runs.record_section`): a section remembers the keys its object held, in order,
and writes exactly those back, null where the file had null; a field the file lacked is written
only where it holds something. So for every file the runner writes,
``Result.from_json(d).to_json() == d`` (tests/analysis/runs/test_record.py holds every kind of
point to it); a writer builds its sections with :meth:`_Section.of`, which records the keys given.
The timing sections live in :mod:`analysis.runs.record_timing`, re-exported here.

:func:`analysis.runs.rundir.read_result` builds the record once, as it reads the file; a reader
asks ``result.timing.estimate(STEP).median_s``, never
``((r.get("timing") or {}).get("estimators") or {}).get("step") or {}``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from analysis.runs.record_section import _items, _Section, _section, dump, shape
from analysis.runs.record_timing import (
    DEVICE,
    ESTIMATORS,
    IMPORTED,
    LOOP,
    ONE_ROUND,
    RECORD_ESTIMATORS,
    STEP,
    Estimate,
    LoopCheck,
    LoopRule,
    Round,
    RoundInputs,
    RoundsRule,
    Samples,
    Timing,
)

# re-exported: every reader and writer takes the record's names from this module
__all__ = [
    "DEVICE",
    "ESTIMATORS",
    "IMPORTED",
    "LOOP",
    "ONE_ROUND",
    "RECORD_ESTIMATORS",
    "STEP",
    "Estimate",
    "LoopCheck",
    "LoopRule",
    "Round",
    "RoundInputs",
    "RoundsRule",
    "Samples",
    "Timing",
    "dump",
]

# format_version 1's keys and the names they have now (analysis.runs.rundir.FORMAT_VERSION 2)
V1_KEYS = {"experiment": "spec", "job": "point", "job_dir": "point_dir"}
# ... and inside ``timing`` and ``config.timing`` (of format_version 2 files too, written before the
# rename): *source* is a hardware entry's citation only
V1_TIMING_KEYS = {"source": "estimator", "source_reason": "estimator_reason"}


def _renamed(d, keys: dict):
    """``d`` with the old names of ``keys`` under their new ones, in place of the old (a key
    ``d`` has under its new name wins); ``d`` itself where it has none, or is no dict."""
    if not isinstance(d, dict) or not any(k in d for k in keys):
        return d
    return {keys.get(k, k): v for k, v in d.items() if k not in keys or keys[k] not in d}


def upgraded(result: dict) -> dict:
    """``result`` with format_version 1's keys under their names now (``experiment`` ->
    ``spec``, ``job`` -> ``point``, ``job_dir`` -> ``point_dir``, and in ``timing`` and
    ``config.timing`` ``source`` -> ``estimator``, ``source_reason`` -> ``estimator_reason``);
    a new dict where one was renamed, ``result`` itself otherwise. A key the file has under
    its new name wins."""
    if not isinstance(result, dict):
        return result
    out = _renamed(result, V1_KEYS)
    timing = _renamed(out.get("timing"), V1_TIMING_KEYS)
    config = out.get("config")
    config_timing = _renamed(config.get("timing"), V1_TIMING_KEYS) if isinstance(config, dict) else None
    if timing is not out.get("timing"):
        out = dict(out, timing=timing)
    if isinstance(config, dict) and config_timing is not config.get("timing"):
        out = dict(out, config=dict(config, timing=config_timing))
    return out


def either(recorded, otherwise):
    """``recorded`` unless the record lacks it (None), else ``otherwise``: what a point recorded
    as it ran, else what its config asked for (a point that failed before it ran, or a file
    from before the key was recorded)."""
    return recorded if recorded is not None else otherwise


@dataclass(frozen=True)
class Mesh(_Section):
    """``spec.mesh``: the mesh the point ran on (axes as built, in order)."""

    name: str | None = None
    axes: dict | None = None  # {axis: size}
    device_ids: list | None = None
    devices: list | None = None
    physical: dict | None = None  # each axis' physical extent and wraparound (TPU)


@dataclass(frozen=True)
class Placement(_Section):
    """``spec.placement``: which mesh axes cross JAX processes."""

    process_count: int | None = None
    cross_process_axes: list | None = None
    processes_per_group: int | None = None
    crosses_processes: bool | None = None


@dataclass(frozen=True)
class Spec(_Section):
    """``spec``: what was measured, as it ran (sizes resolved, the mesh built)."""

    op: str | None = None
    expr: str | None = None
    axes: list | None = None
    size_bytes: int | None = None
    V_bytes: float | None = None
    dtype: str | None = None
    # jax.lax.Precision of the matmuls (default, high, highest); runs before the key existed
    # ran every matmul at highest (analysis.runs.summary reads them so)
    precision: str | None = None
    group_size: int | None = None
    num_groups: int | None = None
    mesh: Mesh = field(default_factory=Mesh)
    hardware: str | None = None
    placement: Placement = field(default_factory=Placement)
    no_communication: str | None = None  # why a group of 1 moved nothing
    rewritten: str | None = None  # the collective compiled as others (or offloaded), timed by those
    # matmul and whole-step programs (the program's ``extra``)
    strategy: str | None = None
    dims: dict | None = None
    flops: float | None = None
    grad: bool | None = None
    plan: dict | None = None  # matmul: the steps its strategy runs (runner.worker.programs.matmul)
    # transformer_block: its sharding recipe, the mesh axes of each, its parameter count
    sharding: str | None = None
    fsdp_axis: str | None = None
    tp_axis: str | None = None
    params: int | None = None
    # program (a user's function): its target and inputs in the notation
    target: str | None = None
    inputs: list | None = None
    nodes: int | None = None  # an imported point's nodes (analysis.importers)
    _NESTED: ClassVar[dict[str, type]] = {"mesh": Mesh, "placement": Placement}


@dataclass(frozen=True)
class OpConfig(_Section):
    """``config.op``: the op as the user asked for it (before the worker resolved it)."""

    name: str | None = None
    expr: str | None = None
    axes: list | None = None
    grad: bool | None = None
    dims: dict | None = None


@dataclass(frozen=True)
class Named(_Section):
    """A config group read only for its name (``config.mesh``, ``config.hardware``)."""

    name: str | None = None


@dataclass(frozen=True)
class TimingConfig(_Section):
    """``config.timing``: what the readers need of the timing settings."""

    estimator: str | None = None
    rounds: int | None = None
    target_rel_ci: float | None = None


@dataclass(frozen=True)
class Config(_Section):
    """``config``: the composed Hydra config of the run (a failed point's only description
    of itself, so the readers fall back to it where ``spec`` lacks a key).

    ``tree`` is the whole config as the file holds it (a format_version 1 file's timing keys
    renamed), for the readers that compare every key of it (:func:`analysis.sweep.mixture`,
    :func:`analysis.compare.config_values`): the config is Hydra's, any group may add keys, so
    those readers flatten the mapping rather than a schema of it. Left out of the repr (long);
    the typed fields are read from it, so two configs are equal where their trees are."""

    op: OpConfig = field(default_factory=OpConfig)
    dtype: str | None = None
    precision: str | None = None
    mesh: Named = field(default_factory=Named)
    hardware: Named = field(default_factory=Named)
    timing: TimingConfig = field(default_factory=TimingConfig)
    tree: dict = field(default_factory=dict, repr=False)
    _NESTED: ClassVar[dict[str, type]] = {"op": OpConfig, "mesh": Named, "hardware": Named, "timing": TimingConfig}

    @classmethod
    def from_json(cls, d) -> Config:
        """The config section: the typed fields, and the whole mapping as ``tree``."""
        return dataclasses.replace(super().from_json(d), tree=_section(d))

    def to_json(self) -> dict:
        """The whole config mapping (``tree``), as it was read or given."""
        return dump(self.tree)


@dataclass(frozen=True)
class Environment(_Section):
    """``environment``: the JAX process that measured (process 0's, in a merged record)."""

    backend: str | None = None
    device_kind: str | None = None
    device_count: int | None = None
    local_device_count: int | None = None
    process_count: int | None = None
    process_index: int | None = None
    host: str | None = None
    jax_version: str | None = None
    jaxlib_version: str | None = None
    python_version: str | None = None
    platform: str | None = None  # Python's platform.platform()
    malloc_env: dict | None = None  # the MALLOC_* variables the worker ran with
    env: dict | None = None  # the variables that change XLA, JAX, libtpu and NCCL


@dataclass(frozen=True)
class TraceOptions(_Section):
    """``trace.options``: the profiler's tracer levels the trace was taken with."""

    python_tracer_level: int | None = None
    host_tracer_level: int | None = None


@dataclass(frozen=True)
class Trace(_Section):
    """``trace``: what the profiler captured and what tracing did to the step."""

    profiler_slowdown: float | None = None
    dispatch_share: float | None = None
    traced_step_median_s: float | None = None
    error: str | None = None
    iters: int | None = None  # the traced calls of the step (the trace holds that many executions)
    wall_samples_s: list | None = None  # each traced call's wall time
    write_s: float | None = None  # writing the trace out
    options: TraceOptions = field(default_factory=TraceOptions)
    wall_s: float | None = None  # the whole trace phase
    inspect_only: str | None = None  # why the trace times nothing (trace.inspect_iters)
    op_events: int | None = None  # device-op events the trace held
    ops: list | None = None  # per traced op, its times (analysis.trace.op_summary's rows)
    _NESTED: ClassVar[dict[str, type]] = {"options": TraceOptions}


@dataclass(frozen=True)
class Check(_Section):
    """``check``: the result against its NumPy reference (``passed`` None: not checked)."""

    passed: bool | None = None
    unchecked: bool | None = None
    why: str | None = None
    kind: str | None = None  # "finite": a program without a reference, checked for finite outputs
    outputs: int | None = None  # the outputs checked (a whole step has several)
    max_rel_error: float | None = None
    tolerance: float | None = None
    shape: list | None = None
    shards_checked: int | None = None
    slices: int | None = None
    wrong_devices: list | None = None


@dataclass(frozen=True)
class Compile(_Section):
    """``compile``: seconds to lower and compile the step program."""

    lower_s: float | None = None
    compile_s: float | None = None


@dataclass(frozen=True)
class CeilingCurve(_Section):
    """``ceiling.curve``: the CPU copy curve the ceiling was read off (runner.worker.copy_curve)."""

    measured_at: str | None = None
    file: str | None = None
    repeats: int | None = None
    wall_s: float | None = None
    reused: bool | None = None


@dataclass(frozen=True)
class Ceiling(_Section):
    """``ceiling``: the bus bandwidth the point is held to (None for programs without one)."""

    kind: str | None = None
    busbw_Bps: float | None = None
    ci_low_Bps: float | None = None
    ci_high_Bps: float | None = None
    inconsistent: str | None = None
    bytes_per_device: int | None = None  # device_copy: the bus bytes each device moves
    devices: int | None = None
    iterations: int | None = None  # device_copy measured at the point (runner.worker.ceiling)
    physical_axes: int | None = None  # link: the physical axes (links) the group spans
    curve: CeilingCurve = field(default_factory=CeilingCurve)  # device_copy read off the copy curve
    what: str | None = None
    _NESTED: ClassVar[dict[str, type]] = {"curve": CeilingCurve}


@dataclass(frozen=True)
class Process(_Section):
    """One JAX process of a point: ``process`` (this file's writer) or an entry of ``processes``
    (the runner merged several: ``distributed=local``)."""

    process_id: int | None = None
    host: str | None = None
    device_ids: list | None = None
    xplane: str | None = None  # the process's trace, relative to the point folder
    status: str | None = None
    error: str | None = None
    timing_summary: Estimate = field(default_factory=Estimate)
    log: str | None = None  # the process's worker log, relative to the point folder
    process_count: int | None = None
    pid: int | None = None
    _NESTED: ClassVar[dict[str, type]] = {"timing_summary": Estimate}


@dataclass(frozen=True)
class MemoryPeak(_Section):
    """``memory_peak``: the worker's resident memory before the point and its high-water mark
    while it ran (Linux), beside the estimate it was admitted with."""

    rss_before_bytes: int | None = None
    rss_peak_bytes: int | None = None
    growth_bytes: int | None = None


@dataclass(frozen=True)
class MemoryEstimate(_Section):
    """``memory_estimate``: what the point was estimated to need (runner.config.memory.check_fits)."""

    host_bytes: int | None = None
    per_device_bytes: int | None = None
    host_total_bytes: int | None = None


@dataclass(frozen=True)
class Worker(_Section):
    """``worker``: the JAX process (or processes) that served the point, and its start-up."""

    pid: int | None = None
    pids: list | None = None  # distributed=local: every process's
    coordinator: str | None = None
    points_served: int | None = None
    start_s: float | None = None  # spawn to JAX ready, on the point that started it (else None)
    start_wait_s: float | None = None  # of that, what the sweep waited


@dataclass(frozen=True)
class Result(_Section):
    """A point's ``result.json`` (with ``point`` and ``point_dir`` that
    :func:`analysis.runs.rundir.read_result` adds). ``check`` and ``process`` are None where
    the file has none. Fields in the order the runner writes them."""

    format: str | None = None  # "shardlab.result"
    format_version: int | None = None
    shardlab_version: str | None = None
    point: str | None = None
    point_dir: str | None = None
    status: str | None = None
    error: str | None = None
    error_type: str | None = None
    started_at: str | float | None = None  # ISO 8601 text; epoch seconds in older files
    config: Config = field(default_factory=Config)
    phases_s: dict = field(default_factory=dict)  # {phase: seconds}, the benchmark's breakdown
    environment: Environment = field(default_factory=Environment)
    hardware: dict = field(default_factory=dict)  # the entry the worker resolved (analysis.book.hardware)
    memory_estimate: MemoryEstimate = field(default_factory=MemoryEstimate)
    spec: Spec = field(default_factory=Spec)
    process: Process | None = None
    compile: Compile = field(default_factory=Compile)
    files: dict = field(default_factory=dict)  # {what: path relative to the point folder}
    check: Check | None = None
    timing: Timing = field(default_factory=Timing)
    ceiling: Ceiling = field(default_factory=Ceiling)
    trace: Trace = field(default_factory=Trace)
    ops_table_error: str | None = None  # why ops_table.json was not written (the report builds it)
    memory_peak: MemoryPeak = field(default_factory=MemoryPeak)
    processes: tuple = ()  # of Process, where the runner merged several
    traceback: str | None = None  # a point that failed in the worker: where
    worker: Worker = field(default_factory=Worker)
    prediction: dict = field(default_factory=dict)  # the book's, as analysis.book's to_dict writes it
    bandwidth: dict = field(default_factory=dict)  # algbw and busbw (runner.sweep.bandwidth)
    wall_s: float | None = None  # the point's run, composition to result.json
    ended_at: str | None = None
    imported: dict = field(default_factory=dict)  # an imported point: the file, line and tool's columns
    _NESTED: ClassVar[dict[str, type]] = {
        "config": Config,
        "environment": Environment,
        "memory_estimate": MemoryEstimate,
        "spec": Spec,
        "compile": Compile,
        "timing": Timing,
        "ceiling": Ceiling,
        "trace": Trace,
        "memory_peak": MemoryPeak,
        "worker": Worker,
    }

    @classmethod
    def from_json(cls, d) -> Result:
        """The whole record from ``result.json``'s object; every section present (empty where
        the file lacks it) but ``check`` and ``process``."""
        d = upgraded(_section(d))
        mappings = ("phases_s", "files", "hardware", "prediction", "bandwidth", "imported")
        special = ("check", "process", "processes", *mappings)
        return cls(
            **_read_plain(cls, d, special),
            check=Check.from_json(d["check"]) if d.get("check") else None,
            # None, not an empty process, where the file has none: a reader that looks for the
            # first point naming its host (analysis.report.nccl_export) skips those
            process=Process.from_json(d["process"]) if isinstance(d.get("process"), dict) else None,
            processes=tuple(Process.from_json(p) for p in _items(d.get("processes"))),
            **{k: _section(d.get(k)) for k in mappings},
            **shape(cls, d),
        )

    @property
    def ok(self) -> bool:
        """Whether the point measured (``status`` ok)."""
        return self.status == "ok"


def _read_plain(cls, d: dict, special: tuple) -> dict:
    """The fields of ``cls`` but ``special`` from ``d``: a nested section read as one, else the value."""
    return {
        f.name: (cls._NESTED[f.name].from_json(d.get(f.name)) if f.name in cls._NESTED else d.get(f.name))
        for f in dataclasses.fields(cls)
        if f.name not in special and f.name not in ("_keys", "_nulls")
    }
