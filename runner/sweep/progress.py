"""A sweep on the console: one line per point as it ends, and a closing summary.

``[ 3/17] op.size_bytes=4KiB       ok     252 us ±12%  algbw 0.018 GB/s  busbw 0.016 GB/s   0:05, about 0:31 left``

Hydra's BasicLauncher runs the points one after another in this process and tells the
callbacks as each starts and ends. It does not hand the callbacks its point list, so the list
is worked out the way BasicSweeper builds it (the sweep's values: ``hydra.sweeper.params``
plus the command line's ``hydra.overrides.task``) and written to ``sweep.json``, so that a
report can name the points that never ran. With another sweeper the list is unknown and
the lines just say which point ended.

The time left is estimated per point still to come, from what the points so far cost: a
fixed part (the median of their wall time outside the timed steps), the timed steps (the
median so far, but at most warm-up plus budget, and at least ~100 steps where one step is
long), and ~60 more steps for the trace, the ceiling's copies and the check. A point's step
time is extrapolated from the last measured points by their growth in V: their log-log slope,
clamped to 0.5..1 (a sweep's sizes grow: assume at least sqrt(V) growth while the small sizes
look flat, at most linear). Later rounds cost each point's timed steps again. Replayed on a
default sweep here (5 rounds, 47 s), the estimate was 0.45-2.7x the time really left at every
point; a linear fit of wall time on V (the earlier estimator) said 41 minutes at point 6 of
17, and a slope floor of 0 ran 3x low until the last points.
"""

from __future__ import annotations

import logging
import shlex
import sys
import time
from pathlib import Path

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from analysis.book.units import fmt_duration, parse_size
from analysis.runs.record import ONE_ROUND, STEP, Result
from analysis.runs.rundir import SWEEP_NAME, now_iso, stamp, write_json_atomic
from runner.sweep.bandwidth import bandwidth, bandwidth_words
from runner.sweep.command import this_command
from runner.sweep.lock import FolderInUse, hold

log = logging.getLogger("shardlab")
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def point_list(config: DictConfig) -> list[list[str]] | None:
    """The overrides of every point BasicSweeper will launch for ``config``, or None."""
    sweeper = OmegaConf.select(config, "hydra.sweeper") or {}
    if sweeper.get("_target_") != BASIC_SWEEPER:
        return None
    args = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
    args += list(OmegaConf.select(config, "hydra.overrides.task") or [])
    try:
        overrides = OverridesParser.create().parse_overrides(args)
        return [list(point) for point in BasicSweeper.split_arguments(overrides, None)[0]]
    except Exception:  # e.g. a glob() sweep, which needs the config loader: unknown
        return None


def count_points(config: DictConfig) -> int | None:
    """How many points BasicSweeper will launch for ``config``, or None if that can't be known."""
    points = point_list(config)
    return len(points) if points is not None else None


def varying(points: list[list[str]]) -> set[str]:
    """The keys whose values differ between points: what a line needs to say."""
    values: dict[str, set[str]] = {}
    for point in points:
        for o in point:
            k, _, v = o.partition("=")
            values.setdefault(k, set()).add(v)
    return {k for k, v in values.items() if len(v) > 1}


def clock(seconds: float) -> str:
    """``0:31``, ``1:02:05``."""
    m, s = divmod(int(round(max(seconds, 0))), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def point_line(k: int, total: int | None, what: str, result: dict | None) -> str:
    """``[ 3/17] <what> ok 252 us ±12% algbw 0.018 GB/s busbw 0.016 GB/s`` (or FAILED and why; or ``ok no time``
    and why, for a point whose device estimator found no execution of its collective)."""
    width = len(str(total)) if total else 1
    head = f"[{k:>{width}}/{total}]" if total else f"[{k}]"
    if not isinstance(result, dict):
        return f"{head} {what:<28} FAILED (the point raised; see its folder's shardlab.log)"
    r = Result.from_json(result)  # the job's return: the point's result.json (and ``resumed``)
    if not r.ok:
        first = str(r.error or "").strip().splitlines()[0:1]
        return f"{head} {what:<28} FAILED {r.error_type}: {(first[0] if first else '')[:90]}"
    s, missing = r.timing.summary, r.timing.missing_reason
    if missing:  # the chosen estimator (device) found nothing: no other one's number stands in
        return f"{head} {what:<28} ok {'no time':>9}  {missing}" + (
            "  (kept from before)" if result.get("resumed") else ""
        )
    rel = s.rel_ci_halfwidth
    text = f"{head} {what:<28} ok {fmt_duration(s.median_s):>9}" + (f" ±{rel:.0%}" if rel is not None else "")
    bw = bandwidth_words(bandwidth(r))
    text += f"  {bw}" if bw else ""
    rewritten = r.spec.rewritten
    text += f"  ({rewritten})" if rewritten else ""  # timed by what the compiler ran in its place
    if result.get("resumed"):
        text += "  (kept from before)"
    return text


class ProgressCallback(Callback):
    """The console of a sweep: a header, one line per point, the time left."""

    def __init__(self) -> None:
        self.points: list[list[str]] | None = None
        self.keys: set[str] = set()
        self.t_start: float | None = None
        self.t_point: float | None = None
        # measured points: (V, wall seconds, seconds of timed steps, median step seconds)
        self.done: list[tuple[float, float, float, float]] = []
        self.rounds = 1
        self.timing_cap_s = 3.0  # timing.warmup_max_s + timing.budget_s: a point's timed steps stop by then
        self.argv: list[str] = []

    @property
    def total(self) -> int | None:
        return len(self.points) if self.points is not None else None

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            hold(sweep_dir)
            write_json_atomic(sweep_dir / ".write-test", {})  # a read-only or full folder: say so now
            (sweep_dir / ".write-test").unlink(missing_ok=True)  # distributed=auto: another host's may be gone
        except (FolderInUse, OSError) as exc:
            print(f"error: hydra.sweep.dir={_rel(sweep_dir)}: {_os_error(exc)}", file=sys.stderr)
            sys.exit(2)
        self.points = point_list(config)
        self.keys = varying(self.points) if self.points else set()
        self.t_start = time.perf_counter()
        self.done = []
        self.rounds = int(OmegaConf.select(config, "timing.rounds", default=1) or 1)
        self.timing_cap_s = float(OmegaConf.select(config, "timing.warmup_max_s", default=2.0) or 0) + float(
            OmegaConf.select(config, "timing.budget_s", default=1.0) or 0
        )
        self.argv = list(sys.argv[1:])
        if self.points is not None:
            write_json_atomic(
                sweep_dir / SWEEP_NAME,
                {
                    **stamp("sweep"),
                    "command": " ".join([this_command(), *(shlex.quote(a) for a in self.argv)]),
                    "expected_points": [{"num": i, "overrides": point} for i, point in enumerate(self.points)],
                    "rounds": self.rounds,
                    "started_at": now_iso(),
                },
            )
        log.info(
            "shardlab: %s points x %d round(s)%s -> %s",
            self.total or "?",
            self.rounds,
            f" ({ONE_ROUND})" if self.rounds == 1 else "",  # timing=quick
            _rel(sweep_dir),
        )
        if config.get("resume"):
            found = len(list(sweep_dir.glob("*/result.json")))
            if found:
                log.info("resume: %d result(s) there; ok ones of the same config are kept", found)
            else:
                log.warning(
                    "resume=true but %s holds no results: every point runs (pass "
                    "hydra.sweep.dir=<the sweep folder> to resume it)",
                    _rel(sweep_dir),
                )

    def on_job_start(self, config: DictConfig, **kwargs) -> None:
        if self.t_start is not None:
            self.t_point = time.perf_counter()

    def on_job_end(self, config: DictConfig, job_return=None, **kwargs) -> None:
        if self.t_point is None or self.t_start is None:
            return
        wall = time.perf_counter() - self.t_point
        self.t_point = None
        k = int(OmegaConf.select(config, "hydra.job.num", default=0))
        done = job_return is not None and job_return.status == JobStatus.COMPLETED
        result = job_return.return_value if done else None
        point = self.points[k] if self.points and k < len(self.points) else []
        what = " ".join(o for o in point if o.partition("=")[0] in self.keys) or "(defaults)"
        if isinstance(result, dict) and not result.get("resumed") and result.get("status") == "ok":
            r = Result.from_json(result)
            V = float(r.spec.V_bytes or r.spec.size_bytes or 0)
            timing = float(r.phases_s.get("timing", wall))
            # the blocked step's time, whichever estimator is the headline (device may have none)
            step = r.timing.estimators.get(STEP) or r.timing.summary
            self.done.append((V, wall, timing, float(step.median_s or 0.0)))
        line = point_line(k + 1, self.total, what, result)
        left = self.time_left(k)
        log.info(
            "%s  %s%s",
            line,
            clock(time.perf_counter() - self.t_start),
            f", about {clock(left)} left" if left is not None else "",
        )

    def time_left(self, k: int) -> float | None:
        """Seconds left: the points after ``k`` and the later rounds (see the module)."""
        if not self.points or not self.done:
            return None
        remaining = [_size_of(point) for point in self.points[k + 1 :]]
        return estimate_left(self.done, remaining, self.rounds, self.timing_cap_s)


TIMED_STEPS = 100  # steps a point times where one step is long (warm-up until stable, then the stop rule)
OTHER_STEPS = 60  # its other steps: trace (slowed by the profiler), the ceiling's copies, the check
# (both measured on the default sweep here: 95-118 and 57-69 step-times at 32 and 64 MiB)
MIN_GROWTH = 0.5  # step time grows at least as sqrt(V) beyond the sizes measured (see the module)


def estimate_left(
    done: list[tuple[float, float, float, float]], remaining: list[float | None], rounds: int, timing_cap_s: float
) -> float:
    """Seconds a sweep has left (the module says how): ``done`` the measured points' ``(V,
    wall s, timed-steps s, step s)``, ``remaining`` the V of each point to come (None when
    unknown), ``rounds`` the sweep's rounds, ``timing_cap_s`` warm-up plus budget."""
    import numpy as np  # not at start-up: `python -m runner` starts without numpy

    V, wall, timing, step = (np.array(c, dtype=float) for c in zip(*done))
    fixed, timed = float(np.median(wall - timing)), float(np.median(timing))
    order = np.argsort(V)
    last = order[-3:]  # the largest sizes measured: how their step time grows with V
    ok = (V[last] > 0) & (step[last] > 0)
    slope = MIN_GROWTH
    if ok.sum() >= 2 and np.ptp(np.log(V[last][ok])) > 0:
        slope = float(np.polyfit(np.log(V[last][ok]), np.log(step[last][ok]), 1)[0])
    slope = min(max(slope, MIN_GROWTH), 1.0)
    v_top, s_top = V[order[-1]], step[order[-1]]

    seen = (V > 0) & (step > 0)
    logV, logS = np.log(V[seen]), np.log(step[seen])
    by_size = np.argsort(logV)

    def step_at(v: float | None) -> float:
        if v is None or not v_top > 0:
            return s_top
        if v <= v_top and seen.any():  # a size within what was measured (another op, a later round)
            return float(np.exp(np.interp(np.log(v), logV[by_size], logS[by_size])))
        return s_top * (v / v_top) ** slope

    def timed_at(v: float | None) -> float:
        return min(max(timed, TIMED_STEPS * step_at(v)), timing_cap_s + step_at(v))

    points = sum(fixed + timed_at(v) + OTHER_STEPS * step_at(v) for v in remaining)
    later_rounds = (rounds - 1) * (float(timing.sum()) + sum(timed_at(v) for v in remaining))
    return points + later_rounds


def _size_of(point: list[str]) -> float | None:
    """A point's V from its overrides (``op.size_bytes=4KiB``), when it says."""
    for o in point:
        k, _, v = o.partition("=")
        if k in ("op.size_bytes", "+op.size_bytes"):
            try:
                return float(parse_size(v))
            except ValueError:
                return None
    return None


def _os_error(exc: Exception) -> str:
    """An OSError as one line (``Permission denied``), other errors as they say."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}" + (f" ({exc.filename})" if exc.filename else "")
    return str(exc)


def _rel(path: Path) -> str:
    """``path`` relative to the current folder when it is below it (shorter lines)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, RuntimeError, OSError):  # not below it; a symlink loop; an unreadable part
        return str(path)
