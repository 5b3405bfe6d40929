"""Rounds 2..R of a point's timing, interleaved across a sweep's points.

The machine drifts (other work, frequency, memory state): on the project's 2-core machine
the same 8 MiB AllReduce took 5.3 to 27.7 ms in five runs, each with a +-4% interval from
its own samples. So each point is timed in R rounds, and a sweep runs round r of every point
before round r+1 of any, in an order shuffled each round (the seed is recorded): drift then
hits every point alike, and a point's interval (:func:`analysis.statistics.stats.combine_rounds`)
covers the spread between its rounds.

Round 1 is part of a point's run (:func:`runner.worker.measure.measure`); the rounds after it only
re-time the compiled program (:func:`runner.worker.point_round.retime`). Each later round is appended,
one JSON line, to the point's journal (``rounds.jsonl``, :func:`analysis.runs.rundir.append_round`),
and result.json is written whole once, when the point's rounds end (:func:`finish`):
a sweep killed between rounds keeps every round it finished, and every reader of result.json
folds in the rounds its journal holds (:func:`analysis.runs.rundir.with_journal`).

Rounds are adaptive (:func:`rounds_rule`): a point stops after ``MIN_ROUNDS`` (2) when its rounds
agree and its interval meets ``timing.target_rel_ci``; only a point whose rounds disagree, or
whose interval is still wider, runs on to ``timing.rounds``. result.json's
``timing.rounds_rule`` says how many rounds the point took and why. The *loop* estimator, a
cross-check, runs again (in round 2) only where round 1's disagreed with the source estimator
(``timing.loop_rule``, :func:`runner.worker.estimators.loop_rule`).
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

from omegaconf import OmegaConf

from analysis.runs.record import Result, Round, RoundsRule, Samples, Timing, dump, upgraded
from analysis.runs.rundir import RESULT_NAME, ROUNDS_NAME, append_round, with_journal, write_json_atomic
from runner.config.jaxenv import process_env
from runner.config.spec import build_spec
from runner.errors import ConfigError, WorkerDied
from runner.sweep.bandwidth import bandwidth
from runner.sweep.pool import discard_worker, get_worker
from runner.worker.estimators import combined

log = logging.getLogger("shardlab")


# A point is judged once, after this many rounds: it stops there when its rounds agree and its
# interval meets timing.target_rel_ci, else it runs every round. With 2 rounds Cochran's Q has
# one degree of freedom: it is the two-sided z-test of the two rounds' log medians against their
# own intervals (at 99%: apart by more than 2.58 of their combined sigmas), a real test; and the
# bootstrap over 2 rounds (analysis.statistics.stats.combine_rounds: a quarter of the draws are round 1
# twice, a quarter round 2 twice) spans both rounds' medians and part of each round's own
# interval, so a ±5% interval says two rounds a sweep apart read within about 10% of each other.
# Judged once, not after every round: a point whose first two rounds disagree or are wide has
# shown drift or noise, and stopping it at a later, luckier round would pick its narrowest
# interval (optional stopping).
MIN_ROUNDS = 2


def wanted_rounds(result: Result) -> int:
    """Rounds the point's config asks for."""
    return int(result.config.timing.rounds or 1)


def rounds_rule(t: Timing, wanted: int, target_rel_ci: float) -> RoundsRule:
    """Whether a point's timing ``t`` (result.json's ``timing``) is done with its rounds, and
    why, in words the report shows: ``rounds``, ``wanted``, ``stopped`` and ``why``.

    A point stops early, after exactly ``MIN_ROUNDS`` rounds, only when every estimator with
    rounds (step; loop, where round 1's disagreed with the source and it was timed again;
    device) has rounds that agree (Cochran's Q at 99%, :func:`analysis.statistics.stats.rounds_disagree`)
    and the headline estimator's interval (which, over rounds, spans their spread) is within
    ``target_rel_ci`` of its median. Otherwise it runs every round ``wanted`` (``timing.rounds``),
    and every later sentence keeps why it ran on after ``MIN_ROUNDS`` (``after_min``)."""
    n = len(t.rounds)
    out = {"rounds": n, "wanted": wanted, "stopped": False}
    if wanted <= MIN_ROUNDS:
        return RoundsRule.of(**out, why=f"timing.rounds={wanted}: every round asked for")
    if n < MIN_ROUNDS:
        return RoundsRule.of(**out, why=f"{n} of {wanted} rounds so far")
    disagree = sorted(name for name, e in t.estimators.items() if e.rounds_disagree)
    rel = t.summary.rel_ci_halfwidth
    reasons = []
    if disagree:
        reasons.append(f"the {' and '.join(disagree)} rounds disagree (Cochran's Q, 99%)")
    if rel is None or not rel <= target_rel_ci:  # no headline time (n 0) never stops early
        shown = "no interval" if rel is None else f"±{100 * rel:.1f}%"
        reasons.append(f"interval {shown}, wider than the target ±{100 * target_rel_ci:g}%")
    if n == MIN_ROUNDS and not reasons:
        return RoundsRule.of(
            **dict(out, stopped=True),
            why=f"stopped after {n} of {wanted} rounds: they agree (Cochran's Q, 99%) and the interval "
            f"±{100 * rel:.1f}% meets the target ±{100 * target_rel_ci:g}%",
        )
    # why the point ran on past MIN_ROUNDS, as it stood then (kept for the last round's sentence)
    after_min = "; ".join(reasons) if n == MIN_ROUNDS else t.rounds_rule.after_min
    out["after_min"] = after_min or "; ".join(reasons)
    # an older file, judged after 3 or not at all, whose rounds meet the rule now: no reason kept
    detail = out["after_min"] or f"no judgement after round {MIN_ROUNDS} recorded"
    if n < wanted:
        return RoundsRule.of(**out, why=f"{n} of {wanted} rounds so far: {detail}")
    return RoundsRule.of(**out, why=f"all {wanted} rounds: after {MIN_ROUNDS}, {detail}")


def add_round(
    point_dir: Path, round_no: int, spec: dict | None = None, specs: dict | None = None, records: dict | None = None
) -> bool:
    """Time round ``round_no`` of the ok point in ``point_dir`` and append it to its journal
    (``rounds.jsonl``: one line); False (and nothing written) when the point is not ok,
    already has the round, stopped after ``MIN_ROUNDS`` (:func:`rounds_rule`), or the worker
    failed it. When this round ends the point's rounds (they stopped after ``MIN_ROUNDS``, or
    this was the last round its config asks for), result.json is written whole with every
    round and the journal goes (:func:`finish`). ``spec`` is the point's, else built from its
    config; ``specs`` caches the built ones by ``point_dir`` (a point's config does not change
    between rounds). ``records`` holds each point's record as its last round left it, so a
    later round reads result.json (and its journal) only once a sweep."""
    result = _record(point_dir, records)
    if result is None or not result.ok or len(result.timing.rounds) >= round_no:
        return False
    if result.timing.rounds_rule.stopped:  # its rounds agreed after MIN_ROUNDS
        return False
    if spec is None:
        spec = _spec(point_dir, result, round_no, specs)
        if spec is None:
            return False
    timed = _time_round(point_dir, result, round_no, spec)
    if timed is None:
        return False
    result, line = _with_round(result, *timed)
    if records is not None:  # before the journal: a round measured and not journalled (a full disk) is kept
        records[point_dir] = result
    append_round(point_dir, line)
    if result.timing.rounds_rule.stopped or round_no >= wanted_rounds(result):  # its rounds end here
        finish(point_dir, {point_dir: result})
    return True


def _spec(point_dir: Path, result: Result, round_no: int, specs: dict | None) -> dict | None:
    """The point's spec: built once a sweep from its config (``specs`` caches it by folder);
    None, with a warning, where its config no longer builds one."""
    if specs is not None and specs.get(point_dir) is not None:
        return specs[point_dir]
    try:
        spec = build_spec(OmegaConf.create(result.config.tree))
    except (ConfigError, KeyError) as exc:
        log.warning("round %d of %s skipped: %s", round_no, point_dir, exc)
        return None
    if specs is not None:
        specs[point_dir] = spec
    return spec


def _time_round(point_dir: Path, result: Result, round_no: int, spec: dict) -> tuple[Round, dict] | None:
    """Round ``round_no`` of the point, timed by the worker, and its phases' seconds; None
    (with a warning) where the worker died or failed it."""
    t = result.timing
    # round 1's trip counts: every round times the same loop programs (the persistent cache has them)
    loop = t.rounds[0].loop if t.rounds else Samples()
    # the loop again only where round 1's disagreed with the source estimator, and then up to
    # its last_round (timing.loop_rule, runner.worker.estimators.loop_rule); a file written before
    # the rule times it every round
    rule, last = t.loop_rule.given(), t.loop_rule.last_round
    rerun = bool(rule.get("rerun", True)) and (last is None or round_no <= int(last))
    worker = get_worker(process_env(spec["hardware"], spec["distributed"], spec["trace"]["gpu_command_buffers"]))
    timeout_s = float(result.config.tree.get("timeout_s", 600))
    try:
        reply = worker.run(spec, point_dir, timeout_s, kind="retime", round=round_no, K=loop.Ks or loop.K, loop=rerun)
    except WorkerDied as exc:
        discard_worker()
        log.warning("round %d of %s failed: %s", round_no, Path(point_dir).name, str(exc).splitlines()[0])
        return None
    if reply.get("status") != "ok":
        log.warning("round %d of %s failed: %s", round_no, Path(point_dir).name, reply.get("error"))
        return None
    rnd = dict(reply["round"])
    phases = rnd.pop("phases_s", {})
    return Round.from_json(rnd), phases


def _with_round(result: Result, rnd: Round, phases: dict) -> tuple[Result, dict]:
    """``result`` with round ``rnd`` folded in (the estimators and rules computed again over
    every round so far, the bandwidth from their median, the round's phases added), and its
    journal line: the round and what it changed of the record, so a reader folds it in without
    computing anything (:func:`analysis.runs.rundir.with_journal`)."""
    config = result.config.timing
    t = result.timing.with_(rounds=(*result.timing.rounds, rnd))
    fields = combined(t, result.config.tree["timing"], result.environment.backend or "cpu")
    t = t.with_(**fields)
    t = t.with_(rounds_rule=rounds_rule(t, wanted_rounds(result), float(config.target_rel_ci)))
    result = result.with_(timing=t)
    if "bandwidth" in result.given():  # from the median of every round so far
        result = result.with_(bandwidth=bandwidth(result))
    added = dict(result.phases_s)
    for k, v in phases.items():  # later rounds' setup and compile count too (the benchmark reads them)
        added[f"rounds_{k}"] = added.get(f"rounds_{k}", 0.0) + v
    result = result.with_(phases_s=added)
    written = result.to_json()
    line = {
        "result_started_at": result.started_at,
        "round": rnd.to_json(),
        "timing": dump({**fields, "rounds_rule": t.rounds_rule}),
    }
    line.update({k: written[k] for k in ("bandwidth", "phases_s") if k in written})
    return result, line


def finish(point_dir: Path, records: dict | None = None) -> Result | None:
    """Write the point's record whole to its result.json, with every round its journal holds,
    then remove the journal; the record (None when result.json cannot be read). Nothing is
    written when there is no journal (result.json holds every round already). ``records`` as in
    :func:`add_round`. Called once a point's rounds end, and for every point at the end of
    :func:`interleave` and of a single run's rounds (a point whose last round failed)."""
    journal = Path(point_dir) / ROUNDS_NAME
    result = _record(point_dir, records)
    if result is None or not journal.exists():
        return result
    write_json_atomic(Path(point_dir) / RESULT_NAME, result.to_json())  # whole, then the journal it replaces
    journal.unlink(missing_ok=True)
    return result


def _record(point_dir: Path, records: dict | None) -> Result | None:
    """The point's record: as its last round left it (``records``), else read from its
    result.json (an older file's timing.source read as its estimator) with the rounds its
    journal holds that the file lacks (a sweep killed between rounds); None when unreadable.

    Not :func:`analysis.runs.rundir.read_result`: that reader sets ``point_dir`` to the folder
    as given, nulls numbers out of range and fails an incomplete record, none of which a writer
    may save back; this is the same file and journal, typed, and written back as it was."""
    if records is not None and point_dir in records:
        return records[point_dir]
    try:
        found = with_journal(upgraded(json.loads((Path(point_dir) / RESULT_NAME).read_text())), point_dir)
    except (OSError, ValueError):
        return None
    result = Result.from_json(found)
    if records is not None:
        records[point_dir] = result
    return result


def interleave(point_dirs: list[Path], rounds: int, seed: int = 0) -> int:
    """Rounds 2..``rounds`` of every point, round by round, each round in a shuffled order.
    Returns how many rounds were added. A round that cannot be written (a full disk, a folder
    made read-only) ends the rounds with one warning: every point keeps the rounds it finished,
    and the sweep goes on to its report."""
    rng = random.Random(seed)
    added = 0
    specs: dict = {}  # each point's spec, built at its first later round
    records: dict = {}  # each point's record, read once, then as its last round left it
    r = 2
    try:
        for r in range(2, rounds + 1):
            order = list(point_dirs)
            rng.shuffle(order)
            if r > MIN_ROUNDS:  # the points whose rounds agreed are done (the order stays the seed's)
                order = [d for d in order if not _stopped(_record(d, records))]
                if not order:
                    log.info("rounds %d to %d: none needed (every point's rounds agreed)", r, rounds)
                    break
            log.info("round %d of %d: %d point(s)", r, rounds, len(order))
            for point_dir in order:
                added += add_round(point_dir, r, specs=specs, records=records)
    except OSError as exc:
        log.warning(
            "the later rounds stop at round %d: cannot write %s (%s); every point keeps the rounds it "
            "finished (resume=true times the rest once there is room)",
            r,
            exc.filename or ROUNDS_NAME,
            exc.strerror or exc,
        )
    finally:  # a point whose last round failed, or a Ctrl-C: result.json whole with what finished
        finish_all(point_dirs, records)
    return added


def finish_all(point_dirs: list[Path], records: dict | None = None) -> None:
    """:func:`finish` each point that still has a journal; one that cannot be written (a full
    disk) keeps its journal, which every reader folds in, and says so."""
    for point_dir in point_dirs:
        if not (Path(point_dir) / ROUNDS_NAME).exists():
            continue
        try:
            finish(point_dir, records)
        except OSError as exc:
            log.warning("%s: its later rounds stay in %s (%s)", Path(point_dir).name, ROUNDS_NAME, exc)


def _stopped(result: Result | None) -> bool:
    """Whether a point's record says it stopped its rounds early (or cannot take more)."""
    if result is None:
        return True
    return not result.ok or bool(result.timing.rounds_rule.stopped)
