"""The timing sections of the record (:mod:`analysis.runs.record`, which re-exports them):
``timing`` with its estimators, rounds and their samples, and the rules that decided the rounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from analysis.runs.record_section import _items, _Section, _section, shape

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
    # of the loop's, and whether that share is above runner.worker.estimators.LAUNCH_BOUND_SHARE
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
    # what timing them took: step: the warm-up's steps and seconds, then the samples' seconds;
    # loop: the warm-up calls and their seconds, then the pairs' seconds
    warmup_iters: int | None = None
    warmup_calls: int | None = None
    warmup_s: float | None = None
    timed_s: float | None = None
    call_s: list | None = None  # loop: each pair's [t(K1), t(K2)] seconds
    empty_loop_timed_s: float | None = None  # loop: seconds the empty loop's pairs took


@dataclass(frozen=True)
class RoundInputs(_Section):
    """``timing.rounds[i].inputs`` of a later round: whether the point's inputs and programs
    stayed in the worker since its earlier round (``placed`` kept) or were placed again."""

    placed: str | None = None
    why: str | None = None


@dataclass(frozen=True)
class Round(_Section):
    """One round of a point's timing (``timing.rounds[i]``), with the machine's state as it began."""

    round: int | None = None
    started_at: str | None = None
    loadavg_1m: float | None = None
    cpu_count: int | None = None
    page_faults_per_step: float | None = None  # minor page faults over the round's steps
    step: Samples = field(default_factory=Samples)
    loop_compile_s: float | None = None  # compiling the loop estimator's programs
    loop: Samples = field(default_factory=Samples)
    inputs: RoundInputs = field(default_factory=RoundInputs)  # later rounds only
    device: Samples = field(default_factory=Samples)  # later rounds that traced again
    _NESTED: ClassVar[dict[str, type]] = {STEP: Samples, LOOP: Samples, DEVICE: Samples, "inputs": RoundInputs}

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
    after_min: str | None = None  # why the point ran on past MIN_ROUNDS, kept for later rounds' words


@dataclass(frozen=True)
class LoopRule(_Section):
    """Whether the point's later rounds timed the *loop* estimator again, and why
    (``timing.loop_rule``, :func:`runner.worker.estimators.loop_rule`): decided on round 1, where the
    loop is a cross-check of the ``source`` estimator; ``rerun`` where round 1's intervals of
    the two do not overlap (the loop disagreed), up to round ``last_round`` (None: every round),
    ``loop_over_source`` the ratio of their round-1 medians."""

    rerun: bool | None = None
    last_round: int | None = None
    why: str | None = None
    source: str | None = None
    loop_over_source: float | None = None


@dataclass(frozen=True)
class LoopCheck(_Section):
    """``timing.loop_check``: whether the loop programs repeat the step's collectives K times
    (:mod:`runner.worker.programs.loop`); ``why`` where they do not."""

    ok: bool | None = None
    K: int | None = None
    step_collectives: list | None = None
    loop_collectives: list | None = None
    unroll: int | None = None
    executions: dict | None = None  # {collective: executions in the loop program}
    why: str | None = None
    Ks: list | None = None
    empty_loop: str | None = None  # "ok", or why the empty loop was not timed


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
    loop_check: LoopCheck | None = None  # None where the loop was not timed
    page_faults_per_step: float | None = None
    seed: int | None = None

    @classmethod
    def from_json(cls, d) -> Timing:
        """The timing section; estimators by name (unknown names kept out), rounds in order."""
        d = _section(d)
        found = _section(d.get("estimators"))
        check = d.get("loop_check")
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
            loop_check=LoopCheck.from_json(check) if isinstance(check, dict) else check,
            page_faults_per_step=d.get("page_faults_per_step"),
            seed=d.get("seed"),
            **shape(cls, d),
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
        round, empty rounds dropped, as :func:`runner.worker.estimators.summarise` combined them:
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
