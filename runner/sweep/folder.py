"""A sweep folder holds one sweep, and a single run never writes into one.

Before a sweep writes anything (:class:`runner.sweep.callbacks.SweepCheck`) it takes the folder's
lock (:mod:`runner.sweep.lock`: shared between the hosts of a ``distributed=auto`` sweep) and
compares the points it will run with those the folder's ``sweep.json`` records: a folder
that holds another sweep's results (other ops, another size list, other settings) is refused
in one line naming what differs, whether resumed or not, since the two sweeps' point folders
would sit side by side and one report would mix them. A single run (``hydra.run.dir``) into
a sweep's folder is refused too: its ``result.json`` at the top would stand for the sweep.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from analysis.runs.record import Result
from analysis.runs.rundir import RESULT_NAME, SWEEP_NAME, expected_points, point_dirs
from analysis.runs.sweep_match import point_key, sweep_difference
from runner.config.jaxenv import process_env
from runner.config.spec import build_spec
from runner.errors import ConfigError
from runner.sweep.lock import FolderInUse, hold, holder
from runner.sweep.progress import _os_error, _rel


def claim(config: DictConfig, points: list[list[str]] | None) -> str | None:
    """Take ``hydra.sweep.dir`` for the sweep of ``points`` (each point's overrides, None when
    the sweeper cannot list them), or the line that says why not."""
    sweep_dir = Path(config.hydra.sweep.dir)
    where = f"hydra.sweep.dir={_rel(sweep_dir)}"
    auto = OmegaConf.select(config, "distributed.mode", default="none") == "auto"
    try:
        hold(sweep_dir, shared=auto)  # the hosts of one distributed=auto sweep share the folder
    except (FolderInUse, OSError) as exc:
        return f"{where}: {_os_error(exc)}"
    if (sweep_dir / RESULT_NAME).is_file():
        return f"{where}: holds a single run ({RESULT_NAME} at its top); choose another hydra.sweep.dir"
    problem = other_sweep(sweep_dir, points) or kept_results(sweep_dir, config)
    return f"{where}: {problem}" if problem else None


def kept_results(sweep_dir: Path, config: DictConfig) -> str | None:
    """Why a sweep may not start in ``sweep_dir``: it holds measured points of this sweep and
    neither ``resume`` (keep the ok ones) nor ``overwrite`` (measure them all again) says what
    to do with them; else None. Nothing measured is replaced without a word."""
    if config.get("resume") or config.get("overwrite"):
        return None
    n = len(list(sweep_dir.glob(f"*/{RESULT_NAME}")))
    if not n:
        return None
    return (
        f"holds {n} measured point(s) of this sweep; resume=true keeps the ok ones and runs the rest, "
        "overwrite=true measures every point again and replaces them, or choose another hydra.sweep.dir"
    )


def other_sweep(sweep_dir: Path, points: list[list[str]] | None) -> str | None:
    """Why ``sweep_dir`` cannot take the sweep of ``points``: it holds results of a sweep whose
    recorded points (``sweep.json``) are other ones; None when it may."""
    recorded = sorted(expected_points(sweep_dir), key=lambda p: p["num"])
    if not recorded or points is None or not point_dirs(sweep_dir):
        return None  # nothing recorded or nothing measured yet: nothing to mix with
    differs = sweep_difference([p.get("overrides") or [] for p in recorded], points)
    if differs is None:
        return None
    return (
        f"holds another sweep ({differs}); a folder holds one sweep: resume that one with the command in "
        f"{SWEEP_NAME} and resume=true, or give this one a new folder, e.g. "
        f"hydra.sweep.dir={shlex.quote(str(free_name(sweep_dir)))}"
    )


def free_name(folder: Path) -> Path:
    """``folder_2`` (or ``_3``, ...): the first such name that does not exist yet."""
    n = 2
    while (candidate := folder.with_name(f"{folder.name}_{n}")).exists():
        n += 1
    return candidate


def unwritable(folder: Path, key: str) -> str | None:
    """Why Hydra could not write its output into ``folder`` (given as ``key``): a symlink loop
    or a dangling link on the way, a file where the folder should be, a folder that cannot be
    created or written (read-only, no permission, no space); else None, and the folder exists.
    Asked before Hydra creates the folder, whose own failure is a traceback."""
    where = f"{key}={folder}"
    how = f"choose another {key}"
    try:
        return _unwritable(folder, where, how)
    except OSError as exc:  # a name too long for the file system, an unreadable part on the way
        return f"{where}: cannot write there: {exc.strerror or exc}; {how}"


def _unwritable(folder: Path, where: str, how: str) -> str | None:
    for part in [folder, *folder.parents]:
        if part.is_symlink() and not part.exists():  # exists() follows the link: False on a loop
            try:
                os.stat(part)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    return f"{where}: {part} is a symlink loop; {how}"
            return f"{where}: {part} is a symlink to nothing ({os.readlink(part)}); {how}"
    if folder.exists() and not folder.is_dir():
        return f"{where}: is a file, not a folder; {how}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".shardlab-probe-"):
            pass
    except OSError as exc:
        return f"{where}: cannot write there: {exc.strerror or exc}; {how}"
    return None


def single_run_problem(run_dir: Path, overwrite: bool = False) -> str | None:
    """Why a single run may not write into ``run_dir``: it is a sweep's folder (it has a
    ``sweep.json``), one of a sweep's point folders, in use by another run, or it holds a
    result already and ``overwrite`` is not set; else None."""
    run_dir = Path(run_dir)
    where = f"hydra.run.dir={_rel(run_dir)}"
    if (run_dir / SWEEP_NAME).is_file():
        return (
            f"{where}: is a sweep's folder ({SWEEP_NAME}); a single run's {RESULT_NAME} there would hide the "
            "sweep's points: choose another hydra.run.dir"
        )
    if (run_dir.parent / SWEEP_NAME).is_file():
        return (
            f"{where}: is a point folder of the sweep in {_rel(run_dir.parent)}; a single run there would replace "
            "the point's result: resume that sweep (resume=true), or choose another hydra.run.dir"
        )
    for folder in (run_dir, run_dir.parent):
        if (who := holder(folder)) is not None:
            return (
                f"{where}: {folder} is in use by another shardlab run (pid {who.get('pid', '?')} on "
                f"{who.get('host', '?')}); choose another hydra.run.dir"
            )
    if not overwrite and (run_dir / RESULT_NAME).is_file():
        return (
            f"{where}: holds a run's {RESULT_NAME} already; overwrite=true measures again and replaces it, "
            "or choose another hydra.run.dir"
        )
    return None


def resume_mix(sweep_dir: Path, xla_flags: str) -> str | None:
    """Why ``resume=true`` may not keep the ok points in ``sweep_dir``: they were measured
    under other XLA flags or another JAX than this run would use (``xla_flags``: the flags its
    worker starts with), so one fit would mix them; else None."""
    try:
        now = {"jax": version("jax"), "jaxlib": version("jaxlib")}
    except PackageNotFoundError:
        now = {}
    for path in sorted(sweep_dir.glob(f"*/{RESULT_NAME}")):
        try:
            r = Result.from_json(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # damaged: that point runs again
        env = r.environment
        if not r.ok or not env.given():  # a failed point, or a file without its environment
            continue
        then = (env.env or {}).get("XLA_FLAGS")
        differs = []
        if then is not None and then != xla_flags:
            differs.append(f"XLA_FLAGS={then!r}, this run {xla_flags!r}")
        for name in now:
            then_version = getattr(env, f"{name}_version")
            if then_version not in (None, now[name]):
                differs.append(f"{name} {then_version}, this run {now[name]}")
        if differs:
            return (
                f"resume=true: {path.parent.name} was measured under {'; '.join(differs)}; one fit would mix "
                "them: resume under the same settings, or measure every point again (overwrite=true, no resume)"
            )
    return None


def repeated_point(points: list[list[str]] | None) -> str | None:
    """The line that refuses a sweep listing one point twice (``op.size_bytes=1KiB,1KiB``):
    both would be measured into folders that tell the same point, and Hydra fails on it half-way."""
    seen: set[tuple[str, ...]] = set()
    for point in points or []:
        if (key := point_key(point)) in seen:
            return (
                f"the sweep lists the point {' '.join(point) or '(defaults)'} twice; list each value once "
                "(timing.rounds repeats a point's measurement)"
            )
        seen.add(key)
    return None


def resume_mix_for(base: DictConfig, sweep_dir: Path) -> str | None:
    """:func:`resume_mix` for the XLA flags this sweep's worker would start with (its base config's)."""
    try:
        spec = build_spec(base)
    except (ConfigError, KeyError, ValueError):  # each point says what is wrong with it
        return None
    env = process_env(spec["hardware"], spec["distributed"], spec["trace"]["gpu_command_buffers"])
    return resume_mix(sweep_dir, env["XLA_FLAGS"])
