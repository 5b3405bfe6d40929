"""The record between runner and analysis: what a point's ``result.json`` holds, declared once.

The runner's worker writes it (:mod:`runner.worker.measure`, :mod:`runner.worker.timing`; the
sweep side adds ``prediction``, ``bandwidth`` and ``timing.rounds_rule``; ``timing.loop_rule``
comes from :func:`runner.worker.timing.summarise`, in the worker and after each round), the importers write
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

:func:`analysis.runs.rundir.read_result` builds the record once, as it reads the file; a reader
asks ``result.timing.estimate(STEP).median_s``, never
``((r.get("timing") or {}).get("estimators") or {}).get("step") or {}``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

# The three timing estimators (runner.worker.timing): *step* the wall time of one blocked step,
# *loop* the per-repetition slope between two loop calls, *device* the devices' own op times
# from the trace. Every place that names one takes it from here.
ESTIMATORS = ("step", "loop", "device")
STEP, LOOP, DEVICE = ESTIMATORS
# A point imported from another tool's log (analysis.importers): that tool's average, no samples
# of ours, so no interval of ours and no noise to judge.
IMPORTED = "imported"
# Every name a record's timing.estimator may hold: a timed one, which has samples (only these
# have rounds and an Estimate: _checked), or imported, which has one number and no samples.
RECORD_ESTIMATORS = (*ESTIMATORS, IMPORTED)
# What a point timed in one round says of its interval (timing=quick, timing.rounds=1): it is
# the samples' within that round, with no later round to show drift. The report, summary.csv's
# rounds_why, the headline and the console all say it in these words.
ONE_ROUND = "one round: not checked for run-to-run drift"


def _section(value) -> dict:
    """A JSON object, or an empty one for anything else (missing, ``null``, a list)."""
    return value if isinstance(value, dict) else {}


def _items(value) -> list:
    """A JSON array, or an empty one for anything else."""
    return value if isinstance(value, list) else []


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


class _Section:
    """``from_json`` for the frozen dataclasses below: each field from the key of its name
    (None where missing), the fields named in ``_NESTED`` read as those sections."""

    _NESTED: ClassVar[dict[str, type]] = {}

    @classmethod
    def from_json(cls, d):
        """The section from its JSON object; what the object lacks is None (an empty section
        for a nested one)."""
        d = _section(d)
        return cls(**{f.name: _read(cls._NESTED.get(f.name), d.get(f.name)) for f in _keyed(cls)})


def _read(kind, value):
    return kind.from_json(value) if kind is not None else value


def _keyed(cls) -> list:
    """The fields of ``cls`` read from a key of their own name (all but ``Config.tree``)."""
    return [f for f in dataclasses.fields(cls) if f.name != "tree"]


@dataclass(frozen=True)
class Estimate(_Section):
    """One estimator's samples combined over rounds (:func:`analysis.statistics.stats.combine_rounds`):
    ``timing.summary`` (the chosen estimator's) and each of ``timing.estimators``."""

    n: int | None = None
    median_s: float | None = None
    mean_s: float | None = None
    min_s: float | None = None
    max_s: float | None = None
    std_s: float | None = None
    p10_s: float | None = None
    p90_s: float | None = None
    p95_s: float | None = None
    p99_s: float | None = None
    ci_low_s: float | None = None
    ci_high_s: float | None = None
    cv: float | None = None
    rel_ci_halfwidth: float | None = None
    rounds: int | None = None
    round_medians_s: list | None = None
    within_round_rel_ci: float | None = None
    rounds_disagree: bool | None = None
    K: int | None = None  # the loop estimator's longer trip count
    # the loop estimator: the empty loop's seconds per repetition (median over rounds), its share
    # of the loop's, and whether that share is above runner.worker.timing.LAUNCH_BOUND_SHARE
    empty_loop_s: float | None = None
    empty_loop_share: float | None = None
    launch_bound: bool | None = None


@dataclass(frozen=True)
class Samples(_Section):
    """One estimator's samples in one round (``timing.rounds[i].step``, ``.loop``, ``.device``;
    round 1's device samples are ``timing.device``, from the point's own trace)."""

    samples_s: list | None = None
    stop_reason: str | None = None
    K: int | None = None  # loop: the longer trip count; Ks both
    Ks: list | None = None
    what: str | None = None  # device: the collective's time or the whole program's
    # loop: the same loop with an empty body, seconds per repetition (median of its slopes)
    empty_loop_s: float | None = None
    empty_loop_samples_s: list | None = None
    instructions: list | None = None  # device: the HLO instructions timed (None: the program)


@dataclass(frozen=True)
class Round(_Section):
    """One round of a point's timing (``timing.rounds[i]``)."""

    round: int | None = None
    step: Samples = field(default_factory=Samples)
    loop: Samples = field(default_factory=Samples)
    device: Samples = field(default_factory=Samples)
    page_faults_per_step: float | None = None
    _NESTED: ClassVar[dict[str, type]] = {STEP: Samples, LOOP: Samples, DEVICE: Samples}

    def samples(self, estimator: str) -> list[float]:
        """This round's samples of ``estimator`` (empty where it has none)."""
        return list(getattr(self, _checked(estimator)).samples_s or [])


@dataclass(frozen=True)
class RoundsRule(_Section):
    """How many rounds a sweep asked of the point and why it took the ones it did
    (``timing.rounds_rule``, :func:`runner.sweep.rounds.rounds_rule`)."""

    wanted: int | None = None
    why: str | None = None
    stopped: bool | None = None
    rounds: int | None = None  # the rounds it had when the rule was last judged


@dataclass(frozen=True)
class LoopRule(_Section):
    """Whether the point's later rounds timed the *loop* estimator again, and why
    (``timing.loop_rule``, :func:`runner.worker.timing.loop_rule`): decided on round 1, where the
    loop is a cross-check of the ``source`` estimator; ``rerun`` where round 1's intervals of
    the two do not overlap (the loop disagreed), up to round ``last_round`` (None: every round),
    ``loop_over_source`` the ratio of their round-1 medians."""

    rerun: bool | None = None
    last_round: int | None = None
    why: str | None = None
    source: str | None = None
    loop_over_source: float | None = None


@dataclass(frozen=True)
class Timing(_Section):
    """``timing``: the estimator the tables and fits use (``estimator``, why in
    ``estimator_reason``, its ``summary``; no time and ``missing_reason`` where *device* was
    chosen and found none), every estimator under its own name, the rounds and their samples."""

    estimator: str | None = None  # one of RECORD_ESTIMATORS
    estimator_reason: str | None = None
    missing_reason: str | None = None
    summary: Estimate = field(default_factory=Estimate)
    estimators: dict = field(default_factory=dict)  # {name in ESTIMATORS: Estimate}
    rounds: tuple = ()  # of Round
    device: Samples = field(default_factory=Samples)
    rounds_rule: RoundsRule = field(default_factory=RoundsRule)
    loop_rule: LoopRule = field(default_factory=LoopRule)
    loop_check: dict | None = None
    page_faults_per_step: float | None = None
    seed: int | None = None

    @classmethod
    def from_json(cls, d) -> Timing:
        """The timing section; estimators by name (unknown names kept out), rounds in order."""
        d = _section(d)
        found = _section(d.get("estimators"))
        return cls(
            estimator=d.get("estimator"),
            estimator_reason=d.get("estimator_reason"),
            missing_reason=d.get("missing_reason"),
            summary=Estimate.from_json(d.get("summary")),
            estimators={name: Estimate.from_json(found[name]) for name in ESTIMATORS if name in found},
            rounds=tuple(Round.from_json(r) for r in _items(d.get("rounds"))),
            device=Samples.from_json(d.get("device")),
            rounds_rule=RoundsRule.from_json(d.get("rounds_rule")),
            loop_rule=LoopRule.from_json(d.get("loop_rule")),
            loop_check=d.get("loop_check"),
            page_faults_per_step=d.get("page_faults_per_step"),
            seed=d.get("seed"),
        )

    def estimate(self, name: str) -> Estimate:
        """The combined samples of estimator ``name`` (empty where the point has none)."""
        return self.estimators.get(_checked(name)) or Estimate()

    def rounds_why(self) -> str | None:
        """Why the point took the rounds it did: the adaptive rule's words (``rounds_rule``), or
        :data:`ONE_ROUND` for a point timed in one round (None where nothing says)."""
        return self.rounds_rule.why or (ONE_ROUND if len(self.rounds) == 1 else None)

    def estimator_rounds(self) -> list[list[float]]:
        """The samples of the chosen estimator (*step* where none is said), one list per
        round, empty rounds dropped, as :func:`runner.worker.timing.summarise` combined them:
        step and loop from every round; device from the point's own trace (round 1) and the
        later rounds' traces."""
        estimator = self.estimator or STEP
        if estimator == DEVICE:
            found = [self.device.samples_s or []] + [r.samples(DEVICE) for r in self.rounds[1:]]
        elif estimator in ESTIMATORS:
            found = [r.samples(estimator) for r in self.rounds]
        else:  # IMPORTED (the one untimed name of RECORD_ESTIMATORS): another tool's average, no samples
            found = []
        return [[float(x) for x in r] for r in found if r]


def _checked(estimator: str) -> str:
    # a timed estimator, the names with samples: not IMPORTED, whose point has none
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator {estimator!r}: not one of {', '.join(ESTIMATORS)}")
    return estimator


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
    sharding: str | None = None
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


@dataclass(frozen=True)
class Trace(_Section):
    """``trace``: what the profiler captured and what tracing did to the step."""

    profiler_slowdown: float | None = None
    dispatch_share: float | None = None
    traced_step_median_s: float | None = None
    error: str | None = None
    iters: int | None = None  # the traced calls of the step (the trace holds that many executions)


@dataclass(frozen=True)
class Check(_Section):
    """``check``: the result against its NumPy reference (``passed`` None: not checked)."""

    passed: bool | None = None
    unchecked: bool | None = None
    why: str | None = None


@dataclass(frozen=True)
class Compile(_Section):
    """``compile``: seconds to lower and compile the step program."""

    lower_s: float | None = None
    compile_s: float | None = None


@dataclass(frozen=True)
class Ceiling(_Section):
    """``ceiling``: the bus bandwidth the point is held to (None for programs without one)."""

    kind: str | None = None
    busbw_Bps: float | None = None
    ci_low_Bps: float | None = None
    ci_high_Bps: float | None = None
    inconsistent: str | None = None


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
    _NESTED: ClassVar[dict[str, type]] = {"timing_summary": Estimate}


@dataclass(frozen=True)
class Result(_Section):
    """A point's ``result.json`` (with ``point`` and ``point_dir`` that
    :func:`analysis.runs.rundir.read_result` adds). ``check`` and ``process`` are None where
    the file has none."""

    status: str | None = None
    error_type: str | None = None
    error: str | None = None
    point: str | None = None
    point_dir: str | None = None
    format_version: int | None = None
    started_at: str | float | None = None  # ISO 8601 text; epoch seconds in older files
    config: Config = field(default_factory=Config)
    environment: Environment = field(default_factory=Environment)
    spec: Spec = field(default_factory=Spec)
    timing: Timing = field(default_factory=Timing)
    trace: Trace = field(default_factory=Trace)
    check: Check | None = None
    compile: Compile = field(default_factory=Compile)
    ceiling: Ceiling = field(default_factory=Ceiling)
    files: dict = field(default_factory=dict)  # {what: path relative to the point folder}
    process: Process | None = None
    processes: tuple = ()  # of Process, where the runner merged several
    hardware: dict = field(default_factory=dict)  # the entry the worker resolved
    prediction: dict = field(default_factory=dict)
    bandwidth: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, d) -> Result:
        """The whole record from ``result.json``'s object; every section present (empty where
        the file lacks it) but ``check`` and ``process``."""
        d = upgraded(_section(d))
        sections = {
            "config": Config,
            "environment": Environment,
            "spec": Spec,
            "timing": Timing,
            "trace": Trace,
            "compile": Compile,
            "ceiling": Ceiling,
        }
        plain = ("status", "error_type", "error", "point", "point_dir", "format_version", "started_at")
        return cls(
            **{k: d.get(k) for k in plain},
            **{k: kind.from_json(d.get(k)) for k, kind in sections.items()},
            check=Check.from_json(d["check"]) if d.get("check") else None,
            # None, not an empty process, where the file has none: a reader that looks for the
            # first point naming its host (analysis.report.nccl_export) skips those
            process=Process.from_json(d["process"]) if isinstance(d.get("process"), dict) else None,
            processes=tuple(Process.from_json(p) for p in _items(d.get("processes"))),
            **{k: _section(d.get(k)) for k in ("files", "hardware", "prediction", "bandwidth")},
        )

    @property
    def ok(self) -> bool:
        """Whether the point measured (``status`` ok)."""
        return self.status == "ok"
