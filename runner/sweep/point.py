"""``run(cfg)``: one point, from a composed config to ``result.json`` in its folder.

This is the pure core behind ``python -m runner``; tests call it directly. It never
raises for a failing point: the failure is recorded (status ``failed``, the error, and
whatever was measured before it) so a sweep goes on.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from analysis.book.collective_cost import placed_group, predict_collective
from analysis.book.errors import BookError
from analysis.book.hardware import from_record, wraparound_for
from analysis.book.matmul_cost import predict_matmul
from analysis.book.notation import parse
from analysis.book.placement import Placement
from analysis.book.units import fmt_duration, format_size
from analysis.runs.record import ONE_ROUND, Config, Result, upgraded
from analysis.runs.rundir import (
    HLO_DIR,
    RESULT_NAME,
    ROUNDS_NAME,
    TRACE_DIR,
    now_iso,
    result_name,
    stamp,
    with_journal,
    write_json_atomic,
)
from runner.config.jaxenv import process_env
from runner.config.spec import build_spec
from runner.errors import ConfigError, OutputError, PlatformError, WorkerDied, WorkerRefused
from runner.sweep.bandwidth import bandwidth, bandwidth_words
from runner.sweep.pool import discard_worker, get_worker

log = logging.getLogger("shardlab")
# The JAX process index this host ran its last point as (distributed=auto: every host runs
# the sweep; only process 0 writes the report at its end).
last_process_index: int | None = None


def _point_dir() -> Path:
    return Path(HydraConfig.get().runtime.output_dir)


def run(cfg: DictConfig, point_dir: str | Path | None = None, rounds: int | None = None) -> dict:
    """Run the point ``cfg`` describes and write ``<point_dir>/result.json``.

    ``point_dir`` defaults to Hydra's output folder for this point. ``rounds`` (default
    ``timing.rounds``) is how many timing rounds to run now, back to back; a sweep runs only
    round 1 here and interleaves the rest across its points (:mod:`runner.sweep.rounds`).
    Returns the result dict.
    """
    point_dir = Path(point_dir) if point_dir is not None else _point_dir()
    point_dir.mkdir(parents=True, exist_ok=True)
    config = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    if config.get("resume"):
        adopt_unpadded(point_dir)
        if (kept := kept_result(point_dir, config)) is not None:
            return kept
    if ((config.get("distributed") or {}).get("mode")) != "auto":  # hosts of a cluster share the folder
        for stale in (TRACE_DIR, HLO_DIR):  # an earlier, interrupted attempt's files are not this run's
            shutil.rmtree(point_dir / stale, ignore_errors=True)
    t0 = time.perf_counter()
    result = Result.of(
        **stamp("result"),
        point=point_dir.name,  # a reader sets both to where it finds the file (a sweep may move)
        point_dir=str(point_dir.absolute()),
        status="failed",
        error=None,
        error_type=None,
        started_at=now_iso(),
        config=Config.from_json(config),
    )
    result, spec = _run_in_worker(cfg, point_dir, result)
    _warn_once(result)
    if result.ok:
        result = result.with_(prediction=predict(result.to_json()))
        result = result.with_(timing=result.timing.with_(seed=int(cfg.timing.seed)))
        # nccl-tests' algbw and busbw, as a sweep line prints them
        result = result.with_(bandwidth=bandwidth(result))
    result = result.with_(wall_s=time.perf_counter() - t0, ended_at=now_iso())
    written = result.to_json()
    index = _write(point_dir, result.environment.process_index or 0, written)
    if index == 0:  # an earlier run's later rounds are not this record's
        (point_dir / ROUNDS_NAME).unlink(missing_ok=True)
    # With distributed=auto every host would have to join each later round; they run round 1 only.
    # A sweep's round 1 (rounds=1) is whole as written (no journal: removed above): no second
    # read of the file.
    rounds = rounds or int(cfg.timing.rounds)
    if result.ok and index == 0 and spec["distributed"]["mode"] != "auto" and rounds > 1:
        from runner.sweep.rounds import add_round, finish  # brings numpy (runner.worker.timing): not at start-up

        records: dict = {}
        for r in range(2, rounds + 1):
            add_round(point_dir, r, spec, records=records)
        finish(point_dir, records)  # result.json whole with every round, if the last one did not end them
        written = json.loads((point_dir / RESULT_NAME).read_text())
        result = Result.from_json(written)
    _log_line(result, point_dir)
    return written


def _run_in_worker(cfg: DictConfig, point_dir: Path, result: Result) -> tuple[Result, dict | None]:
    """``result`` with what the worker measured (its record and reply; or why it could not: a
    bad config, a worker that died), and the point's spec (None when the config has no valid
    spec). The worker's record comes over the pipe as JSON and is read back as the typed record."""
    try:
        spec = build_spec(cfg)
    except ConfigError as exc:
        return result.with_(error_type="ConfigError", error=str(exc)), None
    worker = get_worker(process_env(spec["hardware"], spec["distributed"], spec["trace"]["gpu_command_buffers"]))
    if worker.starting():
        # This process would wait idle for JAX: import now what the sweep needs after round 1
        # (the later rounds, the console's time left: numpy and scipy, 0.35 s), which would
        # otherwise come between the first point and its console line.
        import runner.sweep.rounds  # noqa: F401
    try:
        check_platform(spec, worker.started(point_dir))
        reply = worker.run(spec, point_dir, float(cfg.timeout_s))
    except WorkerDied as exc:
        discard_worker()
        error_type = "ConfigError" if isinstance(exc, WorkerRefused) else "WorkerDied"
        return result.with_(error_type=error_type, error=str(exc)), spec
    record = reply.pop("record")
    if record.pop("restart_worker", False):  # the worker ends after such a point: start afresh
        discard_worker()
    # the record's keys, then the reply's (status, error, traceback, worker) over them
    result = result.with_(**Result.from_json(record).given())
    return result.with_(**Result.from_json(reply).given()), spec


def _warn_once(result: Result) -> None:
    """What the console says once a sweep: a group of 1 times a copy; a chip without a model."""
    if not result.ok:
        return
    if result.spec.no_communication and "group of 1" not in _warned:
        _warned.add("group of 1")
        log.warning(
            "collectives need at least two devices; this mesh gives %s a group of 1, so what is timed "
            "is a copy, not communication (matmuls still measure)",
            result.spec.op,
        )
    hw = result.hardware
    if hw.get("known") is False and "unknown hardware" not in _warned:
        _warned.add("unknown hardware")  # hardware=auto on a chip no entry covers: said once, on the console
        log.warning("no model for this chip: %s", hw.get("source"))


def _write(point_dir: Path, index: int, written: dict) -> int:
    """Write the result ``written`` of JAX process ``index`` (distributed=auto: every host runs
    the point; process 0 writes result.json, the others beside it); ``index``."""
    global last_process_index
    last_process_index = index
    try:
        write_json_atomic(point_dir / result_name(index), written)
    except OSError as exc:  # a full disk or a folder made read-only: the sweep cannot go on
        then = (
            "the points before it are on disk (resume=true finishes the sweep once there is room)"
            if _in_multirun()
            else "its measurement is lost; free some space (or choose another hydra.run.dir) and run it again"
        )
        raise OutputError(f"cannot write {point_dir / result_name(index)}: {exc.strerror or exc}; {then}") from None
    return index


# The README's install lines ("Install"), word for word: shardlab's own extras pin a JAX it is
# tested with, where a bare "jax[...]" upgrade may not be (tests/project/test_install_line.py holds them equal)
INSTALL = {
    "tpu": 'pip install -e ".[tpu]"',
    "gpu": 'pip install -e ".[cuda12]" / pip install -e ".[cuda13]" (NVIDIA, CUDA 12 / 13) or JAX\'s ROCm build '
    "(https://docs.jax.dev/en/latest/installation.html)",
}
_warned: set[str] = set()


def check_platform(spec: dict, info: dict) -> None:
    """Stop when the config asks for an accelerator and JAX came up on another platform;
    say once on the console when an accelerator seems present but JAX runs on CPU."""
    want, got = spec["hardware"]["kind"], info.get("backend")
    if want in ("tpu", "gpu") and got not in (want, "cuda", "rocm") and got is not None:
        raise PlatformError(
            f"hardware={spec['hardware']['name']} asks for {want.upper()} devices but JAX came up on {got} "
            f"({info.get('device_count')} x {info.get('device_kind')})"
            + (f": {info['accelerator_unused']}" if info.get("accelerator_unused") else "")
            + f"; install JAX for {want.upper()} with {INSTALL[want]}, or use hardware=auto"
        )
    unused = info.get("accelerator_unused")
    if unused and unused not in _warned:
        _warned.add(unused)
        present = "/".join(info.get("accelerator_present") or []) or "an accelerator"
        log.warning(
            "JAX runs on %s although %s seems present (%s); to measure it, %s",
            got,
            present.upper(),
            unused,
            INSTALL.get((info.get("accelerator_present") or ["gpu"])[0], INSTALL["gpu"]),
        )


def adopt_unpadded(point_dir: Path) -> None:
    """Resume of a sweep from before point folders were zero-padded: ``3_op...`` becomes this
    point's ``003_op...`` (Hydra has just made it, with its own ``.hydra/``), so its result
    is kept or re-measured like any other."""
    head, _, rest = point_dir.name.partition("_")
    old = point_dir.with_name(f"{int(head)}_{rest}") if head.isdigit() else point_dir
    if old == point_dir or not old.is_dir() or (point_dir / RESULT_NAME).exists():
        return
    for item in old.iterdir():
        if not (point_dir / item.name).exists():
            shutil.move(str(item), str(point_dir / item.name))
    shutil.rmtree(old, ignore_errors=True)


def kept_result(point_dir: Path, config: dict) -> dict | None:
    """With ``resume``: the point's earlier result if it is ``ok`` for this same config.

    Read before any device work, so a resumed sweep whose points all passed starts no JAX.
    The file is left untouched; the returned dict says ``resumed`` for the progress log.
    """
    path = point_dir / RESULT_NAME
    try:
        # a format_version 1 file names its spec experiment, and its config timing.source
        old = with_journal(upgraded(json.loads(path.read_text())), point_dir)  # with rounds a kill left journalled
    except (OSError, ValueError):
        return None  # missing or damaged: run the point again
    if old.get("status") != "ok":
        return None

    def same(c):  # whether we resume, a sweep's size range and the gate change nothing measured
        return {k: v for k, v in (c or {}).items() if k not in ("resume", "overwrite", "sizes", "check")}

    if same(old.get("config")) != same(config):
        log.info("resume: %s has a result for another config; running the point again", point_dir)
        return None
    exp = Result.from_json(old).spec
    size = exp.size_bytes
    if not _in_multirun():  # a sweep's line for the point says "(kept from before)"
        log.info(
            "resume: kept the ok result of %s%s -> %s",
            exp.expr,
            f" {format_size(size)}" if size else "",
            point_dir,
        )
    return dict(old, resumed=True)


def predict(result: dict) -> dict:
    """The book's prediction for this run on the constants it ran with (the hardware node it
    recorded: its entry with any ``hardware.X=...`` overrides), or why there is none (the
    report models every point again, with fitted or calibrated constants where the hardware
    publishes none)."""
    exp = result["spec"]
    sizes = [exp["mesh"]["axes"][a] for a in exp["axes"]]
    try:
        hw = from_record(result["hardware"])  # not reloaded by name: a what-if or a search-path entry
        physical = exp["mesh"].get("physical")  # where the devices put the axes (TPU)
        place = Placement.from_dict(physical) if physical and hw.interconnect == "torus" else None
        if exp["op"] == "matmul":
            mm = parse(exp["expr"])
            p = predict_matmul(
                mm, exp["mesh"]["axes"], exp["dims"], exp["dtype"], hw, None, place, exp.get("precision")
            )
            return p.to_dict()
        if place is not None:
            placed = placed_group(hw, place, exp["axes"])
            p = predict_collective(exp["op"], exp["V_bytes"], hw=hw, **placed)
        else:
            p = predict_collective(exp["op"], exp["V_bytes"], sizes, hw, wraparound_for(hw, sizes))
    except BookError as exc:
        # cpu publishes no W or T_min (the note names the key to set): the report fits them to the sweep
        return {"time_s": None, "note": str(exc)}
    return p.to_dict()


def _in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def _log_line(result: Result, point_dir: Path) -> None:
    if _in_multirun():  # the sweep's console has one line per point (runner.sweep.progress)
        return
    exp, t = result.spec, result.timing
    what = exp.expr or result.config.op.name
    size = exp.size_bytes
    if exp.dims:  # a matmul: its dims and strategy say more than its bytes
        dims = " ".join(f"{k}={v}" for k, v in exp.dims.items())
        where = f"{what} {dims}" + (f" ({exp.strategy})" if exp.strategy else "")  # a block has none
    else:
        where = f"{what} {format_size(size) if size else ''}".strip()
    if result.ok and t.missing_reason:
        log.warning("%s: no time (%s estimator): %s -> %s", where, t.estimator, t.missing_reason, point_dir)
    elif result.ok:
        s = t.summary
        bw = bandwidth_words(result.bandwidth)
        n_rounds = s.rounds or 1
        log.info(
            "%s: median %s (+-%.0f%%, %s estimator, %d samples in %s)%s -> %s",
            where,
            fmt_duration(s.median_s),
            100 * s.rel_ci_halfwidth,
            t.estimator,
            s.n,
            ONE_ROUND if n_rounds == 1 else f"{n_rounds} round(s)",  # timing=quick: says what its +-% leaves out
            f"  {bw}" if bw else "",
            point_dir,
        )
    else:
        log.error("%s: FAILED (%s) %s -> %s", where, result.error_type, result.error, point_dir)
