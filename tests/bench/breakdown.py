"""Where a finished sweep's wall time went, read from its points' result.json files: the
benchmark's breakdown (``tests/bench/run.py``), for the default sweep and for the side-by-side
with a peer (:mod:`peer`)."""

from __future__ import annotations

import datetime
from pathlib import Path

TIMED = "timed iterations (step: warm-up and samples; loop: pairs)"
LOOP_WARMUP = "timed iterations: the loop's warm-up pairs"
COMPILE = "compile: step program (later rounds from the cache)"
LOOP_COMPILE = "compile: loop programs"
START = "interpreter + Hydra start"
REPORT = "analysis + report (imports included)"
OTHER = "other (IPC, Hydra per point, point files, exit)"
JAX_START = "worker: waiting for JAX to start"
# What harness_overhead leaves out of its numerator: compiling and the estimators' timed work.
# Up to 2026-11-25 the benchmark counted the loop's compile and warm-up pairs as overhead.
NOT_OVERHEAD = (TIMED, LOOP_WARMUP, COMPILE, LOOP_COMPILE)
NOT_OVERHEAD_BEFORE = (TIMED, COMPILE)


def harness_overhead(parts: dict, total_s: float, leave_out=NOT_OVERHEAD) -> float:
    """(total - compile - timed iterations) / total, from :func:`parts`."""
    return (total_s - sum(parts[k] for k in leave_out)) / total_s


def phase_sum(results: list[dict], name: str) -> float:
    """Seconds all points spent in one phase the runner recorded (``phases_s``)."""
    return sum((r.get("phases_s") or {}).get(name, 0.0) for r in results)


def _rounds(results: list[dict]):
    return [rd for r in results for rd in r["timing"]["rounds"]]


def timed_s(results: list[dict]) -> float:
    """Seconds of timed work, every round of every point: the step's warm-up and samples, the
    loop's pairs (not its warm-up pair: :func:`loop_warmup_s`)."""
    return sum(
        rd["step"]["warmup_s"] + rd["step"]["timed_s"] + (rd.get("loop") or {}).get("timed_s", 0.0)
        for rd in _rounds(results)
    )


def loop_warmup_s(results: list[dict]) -> float:
    """Seconds of the loop estimator's warm-up pairs, every round of every point."""
    return sum((rd.get("loop") or {}).get("warmup_s", 0.0) for rd in _rounds(results))


def compile_s(results: list[dict]) -> float:
    """Seconds spent lowering and compiling the step program, later rounds' that had to prepare
    their point again (from JAX's cache) included."""
    step = sum(r["compile"]["lower_s"] + r["compile"]["compile_s"] for r in results)
    return step + sum(phase_sum(results, k) for k in ("rounds_lower", "rounds_compile"))


def loop_compile_s(results: list[dict]) -> float:
    """Seconds compiling the loop programs, inside a round's timing once round 1 knows their
    trip counts (later rounds find them compiled)."""
    return sum(rd.get("loop_compile_s") or 0.0 for rd in _rounds(results))


def executions(result: dict) -> int:
    """How many times one point ran its program: every round's warm-up and samples of the step,
    the loop calls' repetitions (warm-up pair included), the result check's step and the
    traced steps. The minimal loop of :mod:`peer_loop` runs 40."""
    per_sample = int((result.get("config") or {}).get("timing", {}).get("iters_per_sample") or 1)
    n = 0
    for rd in result["timing"]["rounds"]:
        step = rd["step"]
        n += step["warmup_iters"] + len(step["samples_s"]) * per_sample
        loop = rd.get("loop") or {}
        if loop:
            n += sum(loop["Ks"]) * (len(loop["samples_s"]) + 1)  # + 1: the warm-up pair
    n += int((result.get("check") or {}).get("passed") is not None)
    return n + int((result.get("trace") or {}).get("iters") or 0)


def parts(results: list[dict], total_s: float, t0: float, report_s: float) -> dict:
    """The sweep's ``total_s`` (started at ``t0``, a ``time.time()``) split into its parts; what
    the points' records do not account for is "other"."""
    first = min(datetime.datetime.fromisoformat(r["started_at"]).timestamp() for r in results)
    out = {
        START: first - t0,
        # only what the sweep waited for: JAX starts while Hydra composes the points
        JAX_START: sum(_start_wait(r.get("worker") or {}) for r in results),
        COMPILE: compile_s(results),
        LOOP_COMPILE: loop_compile_s(results),
        TIMED: timed_s(results),
        LOOP_WARMUP: loop_warmup_s(results),
        "tracing": sum(r["trace"]["wall_s"] - r["trace"]["write_s"] for r in results),
        "trace writing": sum(r["trace"]["write_s"] for r in results),
        "trace parsing (device estimator, perturbation)": phase_sum(results, "trace_parse"),
        "ceiling (device copies)": phase_sum(results, "ceiling"),
        "result check vs NumPy": phase_sum(results, "check"),
        "inputs, mesh, hardware record (all rounds)": sum(
            phase_sum(results, k) for k in ("setup", "input", "rounds_setup", "rounds_input")
        ),
        "HLO dumps": phase_sum(results, "hlo_dump"),
        REPORT: report_s,
    }
    out[OTHER] = total_s - sum(out.values())
    return out


def _start_wait(worker: dict) -> float:
    """Seconds a sweep waited for its worker's JAX (its whole start in results written before
    the wait was recorded)."""
    wait = worker.get("start_wait_s")
    return float(wait if wait is not None else worker.get("start_s") or 0.0)


def report_s(sweep_dir: Path) -> float:
    """Seconds the sweep's report took to build (the runner writes them beside it)."""
    return float((Path(sweep_dir) / "report" / "build_s.txt").read_text())
