"""Hydra callbacks: stop the worker when Hydra is done; at the end of a sweep, time the
points' later rounds (interleaved, :mod:`runner.sweep.rounds`), write the report, and say how it
went.

Ctrl-C anywhere in a sweep still leaves a report of what finished (:func:`interrupted`): in
a point or in the later rounds it interrupts at once (``Interrupt.armed``); between points,
while Hydra composes the next one, it is noted and acted on at the next callback, so Hydra
never sees it half-way through its own work."""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

import analysis.report
from analysis.runs.rundir import HEADLINE_NAME, REPORT_DIR, RESULT_NAME, SUMMARY_NAME, point_dirs
from runner.config.jaxenv import process_env
from runner.config.schema import renamed_override, unknown_key
from runner.config.spec import build_spec, check_gate
from runner.errors import ConfigError
from runner.sweep import command, ctrl_c, point, report_process
from runner.sweep.compose_once import (
    build_each_defaults_list_once,
    compose_each_point_once,
    merge_each_defaults_list_once,
    read_each_file_once,
)
from runner.sweep.folder import claim, repeated_point, resume_mix_for, single_run_problem, unwritable
from runner.sweep.held_stderr import release
from runner.sweep.lock import FolderInUse, hold
from runner.sweep.pool import discard_worker, get_worker, release_worker
from runner.sweep.progress import _rel, clock, point_list

log = logging.getLogger("shardlab")
NO_REPORT_EXIT = 4  # the sweep ran but its report could not be written (docs/programs.md, exit status)


class Interrupt:
    """Where a Ctrl-C may land: ``armed`` inside our own code (raise KeyboardInterrupt
    there), else ``pending`` until the next callback acts on it."""

    armed = False
    pending = False
    sweep_dir: Path | None = None

    @staticmethod
    def handler(signum, frame):
        if Interrupt.armed:
            raise KeyboardInterrupt
        Interrupt.pending = True

    @staticmethod
    def check(where: str) -> None:
        """Act on a Ctrl-C that came between points: report, two lines, exit 130."""
        if Interrupt.pending and Interrupt.sweep_dir is not None:
            discard_worker()
            interrupted(Interrupt.sweep_dir, where)
            sys.exit(130)


class armed:
    """``with armed():`` - a Ctrl-C in this block raises KeyboardInterrupt at once."""

    def __enter__(self):
        Interrupt.check("between points")
        Interrupt.armed = True

    def __exit__(self, *exc):
        Interrupt.armed = False
        return False


def resume_command(sweep_dir: Path, argv: list[str] | None = None) -> str:
    """The exact command that finishes this sweep: the same arguments (``-m`` too: without it a
    comma list is one value, not a sweep), its folder, resume."""
    return command.resume_command(_rel(sweep_dir), sys.argv[1:] if argv is None else argv)  # quoted to paste


def report_and_summary(
    sweep_dir: Path, t_start: float | None = None, interrupted: bool = False, helper=None
) -> Path | None:
    """Write the report (never losing the measurements to a report bug) and print the
    closing summary: counts, each family's headline, where the report is, what to run next.
    ``helper``: the sweep's report process (:mod:`runner.sweep.report_process`), which writes
    it when it can; else it is written here."""
    written = time.time()
    out = helper.write_report(sweep_dir, written) if helper is not None else None
    if out is None:
        log.debug("the report is written here: the sweep's report process was not ready or did not answer")
        out = report_process.answer(sweep_dir, written)
    else:
        waited = f" (it was still importing: waited {helper.waited_s:.1f} s)" if helper.waited_s is not None else ""
        log.debug("the report was written by the sweep's report process%s", waited)
    for name, level, message in out.get("log", []):  # what the report's process logged
        logging.getLogger(name).log(level, "%s", message)
    if "mixed" in out:
        log.error(
            "no report: %s (%s)", out["mixed"], command.analysis_command("report", _rel(sweep_dir), "--allow-mixed")
        )
        return None
    if "oserror" in out:  # a full disk or a read-only folder: every file is whole, old or new
        filename = out["oserror"]["filename"]
        log.error(
            "no report: cannot write %s: %s; on disk: %s; once there is room: %s",
            _rel(Path(filename)) if filename else _rel(sweep_dir),
            out["oserror"]["strerror"],
            on_disk(sweep_dir, written),
            command.analysis_command("report", _rel(sweep_dir)),
        )
        return None
    if "exception" in out:  # the measurements are on disk; a report bug must not hide them
        rebuild = command.analysis_command("report", _rel(sweep_dir))
        log.error("could not write the report; rebuild it with `%s`\n%s", rebuild, out["exception"].rstrip())
        return None
    index = Path(out["index"])
    try:
        head = json.loads((sweep_dir / HEADLINE_NAME).read_text())
    except (OSError, ValueError):
        head = {"families": [], "missing_points": []}
    results = [json.loads(p.read_text()) for p in sorted(sweep_dir.glob(f"*/{RESULT_NAME}"))]
    ok = sum(r.get("status") == "ok" for r in results)
    failed = len(results) - ok
    fams = head.get("families") or []
    noisy = sum(f.get("noisy") or 0 for f in fams)
    unchecked = sum(f.get("unchecked") or 0 for f in fams)
    flagged = sum(f.get("flagged") or 0 for f in fams)
    missing = len(head.get("missing_points") or [])
    took = f" in {clock(time.perf_counter() - t_start)}" if t_start else ""
    log.info(
        "%s%s: %d ok, %d failed%s; %d noisy, %d flagged, %d unchecked",
        "interrupted" if interrupted else "done",
        took,
        ok,
        failed,
        f", {missing} not run" if missing else "",
        noisy,
        flagged,
        unchecked,
    )
    for f in fams:
        log.info("  %s", f.get("text"))
    for line in out["claims"]:
        log.info("  %s", line)
    log.info("report: %s", _rel(index))
    log.info("traces: %s", command.analysis_command("view", _rel(sweep_dir)))
    if failed or missing:
        log.info("resume: %s", resume_command(sweep_dir))
    return index


def on_disk(sweep_dir: Path, since: float) -> str:
    """What a report that failed at ``since`` left: the points' results (each written whole)
    and whose ``report/index.html`` is there, if any (every report file is written whole)."""
    n = len(list(sweep_dir.glob(f"*/{RESULT_NAME}")))
    index = sweep_dir / REPORT_DIR / "index.html"
    try:
        mtime = index.stat().st_mtime
    except OSError:
        page = f"no {REPORT_DIR}/index.html"
    else:
        when = time.strftime("%H:%M", time.localtime(mtime))
        whose = "this report" if mtime >= since - 1 else f"an earlier report ({when})"
        page = f"{REPORT_DIR}/index.html of {whose}"
    return f"the {n} point(s)' {RESULT_NAME}, each whole; {page}; no report file cut off"


def _status(path: Path) -> str | None:
    try:
        r = json.loads(path.read_text())
        return r.get("status") if isinstance(r, dict) else None
    except (OSError, ValueError):
        return None


def launcher_problem(target: str) -> str | None:
    """Why a Hydra launcher cannot run a sweep, or None. Points are timed one at a time on
    this machine's devices: a launcher that runs several at once here (joblib, ray, rq) would
    time them against each other. Hydra's basic launcher and submitit (one job per point,
    each on its own allocation) are allowed."""
    if target.endswith("BasicLauncher") or "submitit" in target.lower():
        return None
    name = target.rsplit(".", 1)[-1] or "(none)"
    return (
        f"hydra/launcher: {name} runs points side by side on one machine, where they would be timed "
        "against each other; allowed: basic (the default), submitit_local, submitit_slurm"
    )


def _stop_for_a_lost_ctrl_c() -> None:
    """Stop as a Ctrl-C of the start asked, where it was lost on the way. A library may turn the
    KeyboardInterrupt into another error (runner.sweep.ctrl_c), and Hydra's ``get_mode`` drops any
    error of its composition: it then took a sweep for a single run (``hydra.mode=RUN``), which went
    on to run its default point. Raised here, before Hydra writes anything, it ends in the start's
    two lines and exit 130 (runner.__main__)."""
    if ctrl_c.received:
        raise KeyboardInterrupt


class SweepCheck(Callback):
    """Before anything of a sweep is written: stop on a launcher that cannot time it, a key
    the schema does not have (each point would fail on it), a folder another sweep holds or
    uses (:mod:`runner.sweep.folder`); a single run into a sweep's folder stops too."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        _stop_for_a_lost_ctrl_c()
        # After this callback Hydra's sweeper composes every point to check the batch: a bad
        # value or option in a sweep list fails there. With the basic launcher stderr stays held
        # until the first point starts (on_job_start), so that error is one line and exit 2 like
        # any bad config (runner.sweep.app.start); another launcher's points start elsewhere.
        if not str(config.hydra.launcher.get("_target_", "")).endswith("BasicLauncher"):
            release()
        base = OmegaConf.masked_copy(config, [k for k in config.keys() if k != "hydra"])  # Hydra's job config
        problem = (
            launcher_problem(str(config.hydra.launcher.get("_target_", "")))
            or renamed_override(list(config.hydra.overrides.task))  # a sweep list Hydra composes later
            or unknown_key(base)
            or (None if str(config.hydra.sweep.dir).strip() else "hydra.sweep.dir is empty; name the sweep's folder")
            or unwritable(Path(config.hydra.sweep.dir), "hydra.sweep.dir")
        )
        try:
            check_gate(OmegaConf.to_container(base.check))
        except ConfigError as exc:
            problem = problem or str(exc)
        try:  # the sweep's lists, e.g. ${geometric:...} over sizes.min/max/factor
            OmegaConf.to_container(config.hydra.sweeper, resolve=True)
        except Exception as exc:  # noqa: BLE001 - Hydra would print a traceback of the resolver
            problem = problem or str(exc).splitlines()[0].split("while resolving interpolation: ")[-1]
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            sys.exit(2)
        points = point_list(config)
        # the folder's lock, and no other sweep's results in it (before progress writes sweep.json)
        if problem := repeated_point(points) or claim(config, points):
            print(f"error: {problem}", file=sys.stderr)
            sys.exit(2)
        if base.get("resume") and (problem := resume_mix_for(base, Path(config.hydra.sweep.dir))):
            print(f"error: {problem}", file=sys.stderr)
            sys.exit(2)
        compose_each_point_once()
        read_each_file_once()
        merge_each_defaults_list_once()
        build_each_defaults_list_once()
        prestart_worker(base)

    def on_job_start(self, config: DictConfig, **kwargs) -> None:
        release()  # the sweep's points are composed and checked: stderr straight through again

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        """A single run: never with a renamed key (``+timing.source=loop``), never into a
        sweep's folder (before Hydra writes anything there)."""
        _stop_for_a_lost_ctrl_c()
        release()  # the config is composed: stderr goes straight to the terminal again
        run_dir = Path(config.hydra.run.dir)
        problem = renamed_override(list(config.hydra.overrides.task))
        if not str(config.hydra.run.dir).strip():  # Path("") is the current folder
            problem = problem or "hydra.run.dir is empty; name a folder for the run (hydra.run.dir=. for this one)"
        overwrite = bool(config.get("overwrite"))
        if problem := problem or unwritable(run_dir, "hydra.run.dir") or single_run_problem(run_dir, overwrite):
            print(f"error: {problem}", file=sys.stderr)
            sys.exit(2)
        try:  # two runs into one folder: the second is refused, not one result silently lost
            hold(run_dir, shared=OmegaConf.select(config, "distributed.mode", default="none") == "auto")
        except FolderInUse as exc:
            print(f"error: hydra.run.dir={run_dir}: {exc}", file=sys.stderr)
            sys.exit(2)


def prestart_worker(base: DictConfig) -> None:
    """Start the JAX worker now, so that JAX starts while Hydra composes the first point
    (about 0.7 s of a sweep's start). The worker is built for the base config; a point that
    needs other process-wide settings replaces it (runner.sweep.pool), so a guess costs nothing."""
    if base.get("resume"):  # its points may all be kept: then no JAX should start at all
        return
    try:
        spec = build_spec(base)
    except (ConfigError, KeyError, ValueError):  # the base config need not be a valid point
        return
    if spec["distributed"]["mode"] == "none":
        get_worker(process_env(spec["hardware"], spec["distributed"], spec["trace"]["gpu_command_buffers"]))


class ReportCallback(Callback):
    """At the end of a multirun: the later rounds, then ``report/`` from the sweep folder."""

    def __init__(self) -> None:
        self.t_start: float | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        self.t_start = time.perf_counter()
        Interrupt.sweep_dir = Path(config.hydra.sweep.dir)
        signal.signal(signal.SIGINT, Interrupt.handler)

    def on_job_start(self, config: DictConfig, **kwargs) -> None:
        num = OmegaConf.select(config, "hydra.job.num", default=None)  # missing in a single run
        if num is not None:
            Interrupt.check(f"before point {int(num) + 1}")

    def on_job_end(self, config: DictConfig, job_return, **kwargs) -> None:
        # once the first point's line is out (nothing may delay it), the report's process imports
        # the report's modules on idle CPU while the other points run
        if OmegaConf.select(config, "hydra.job.num", default=None) == 0:
            report_process.start()

    def on_run_end(self, config: DictConfig, **kwargs) -> None:
        discard_worker()

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        from runner.sweep.rounds import interleave  # brings numpy (runner.worker.timing): not at start-up

        sweep_dir = Path(config.hydra.sweep.dir)
        Interrupt.check("after the last point")
        if point.last_process_index:  # a cluster run: every host ran the sweep; process 0 reports
            discard_worker()
            report_process.stop()
            log.info(
                "process %d: the report is process 0's to write (or `python -m analysis report %s`)",
                point.last_process_index,
                sweep_dir,
            )
            return
        try:
            if int(config.timing.rounds) > 1 and config.distributed.mode != "auto":
                with armed():
                    interleave(point_dirs(sweep_dir), int(config.timing.rounds), int(config.timing.seed))
        except KeyboardInterrupt:
            discard_worker()
            interrupted(sweep_dir, "during the later timing rounds: the points keep the rounds they finished")
            sys.exit(130)
        release_worker()  # no more device work: the worker's exit overlaps the report
        try:
            with armed():  # Ctrl-C while the report is written stops it (each report file is whole)
                index = report_and_summary(sweep_dir, self.t_start, helper=report_process.take())
        except KeyboardInterrupt:
            discard_worker()
            n = len(list(sweep_dir.glob("*/result.json")))
            print(
                f"\ninterrupted while the report was written: the {n} point(s) are on disk, each whole\n"
                f"report: {command.analysis_command('report', _rel(sweep_dir))}",
                file=sys.stderr,
                flush=True,
            )
            sys.exit(130)
        discard_worker()
        if index is None:  # said why, and what is on disk
            sys.exit(NO_REPORT_EXIT)
        bad = [p for p in sweep_dir.glob("*/result.json") if _status(p) != "ok"]
        if bad:  # after the report: a sweep in which any point failed does not exit 0
            sys.exit(1)
        bar = OmegaConf.select(config, "check.min_busbw_GBps", default=None)
        if bar is not None and (line := gate(sweep_dir, float(bar) * 1e9)):
            print(f"error: {line}", file=sys.stderr)
            sys.exit(3)


def gate(sweep_dir: Path, min_busbw_Bps: float) -> str | None:
    """nccl-tests' average bus-bandwidth check over the report's summary.csv: the line to
    print when a family is below the bar, or None."""
    import pandas as pd

    from analysis.gate import below_bar, gate_message

    try:
        failures = below_bar(pd.read_csv(sweep_dir / SUMMARY_NAME), min_busbw_Bps)
    except (OSError, ValueError, KeyError) as exc:  # no summary: the report failed; say so
        return f"check.min_busbw_GBps: no summary to check ({exc})"
    return gate_message(failures, min_busbw_Bps) if len(failures) else None


def interrupted(sweep_dir: Path, where: str) -> None:
    """Ctrl-C: a report of what finished, marked incomplete, and two lines: what happened
    with the report's path, and the exact command that resumes. The caller exits."""
    done = len(list(sweep_dir.glob("*/result.json")))
    if not done:  # Ctrl-C while the first point (or its worker) was starting: nothing to report
        print(
            f"\ninterrupted {where}, before any point finished: nothing was measured\n"
            f"resume: {resume_command(sweep_dir)}",
            file=sys.stderr,
            flush=True,
        )
        return
    logging.disable(logging.INFO)  # no closing summary: two lines
    try:
        index = _rel(analysis.report.write_report(sweep_dir))
    except Exception as exc:  # noqa: BLE001 - the measurements stay on disk either way
        index = f"(no report: {exc})"
    finally:
        logging.disable(logging.NOTSET)
    print(
        f"\ninterrupted {where}; report of the {done} point(s) that finished (incomplete): {index}\n"
        f"resume: {resume_command(sweep_dir)}",
        file=sys.stderr,
        flush=True,
    )
