"""Imported measurements written as a sweep folder: one point folder with a ``result.json`` per
point, and ``sweep.json``, through :mod:`analysis.runs.rundir`'s names and writers, so ``load_sweep``
and every command that reads sweeps take it as one the runner wrote.

A point has no HLO, no trace and no samples: its time is the tool's (one number per size, the
tool's own average over its iterations), ``timing.estimator`` is ``imported``, and ``imported``
says where it came from (file, line, tool, both of the row's measurements as printed).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from analysis.book.device_kinds import resolve
from analysis.importers import ImportFormatError
from analysis.importers.limits import MAX_POINTS, POINTS_ALLOWED, check
from analysis.runs.record import IMPORTED
from analysis.runs.rundir import RESULT_NAME, SWEEP_NAME, now_iso, stamp, write_json_atomic


@dataclass
class ImportedPoint:
    """One measured size of one collective, as the tool reported it."""

    op: str  # shardlab's name
    dtype: str
    V_bytes: float  # the book's V
    S_bytes: float  # the bytes the tool divides by the time (nccl-tests' size)
    time_s: float
    ranks: int
    nodes: int
    hosts: list[str]
    device_kind: str
    backend: str  # gpu or tpu
    tool: str
    origin: dict = field(default_factory=dict)  # file, line, version, printed columns, ...
    wrong: int | None = None  # elements the tool found wrong (None: it did not check)
    check_error: str | None = None  # another way the tool's data check failed (in place; the run's count)


def hardware_of(device_kind: str, backend: str, override: str | None) -> tuple[str, str]:
    """The catalogue entry for the device kind (or ``override``), and how it was chosen."""
    if override:
        return override, f"--hardware {override}"
    why = resolve(device_kind, backend)
    return (why.entry["name"], why.reason) if why.known else (why.entry.get("name", f"unknown_{backend}"), why.reason)


def point_result(p: ImportedPoint, hardware: str, hardware_why: str, command: str) -> dict:
    """The ``result.json`` of one imported point."""
    error = f"{p.tool} counted {p.wrong} wrong elements at this size" if p.wrong else p.check_error
    return {
        **stamp("result"),
        # a size whose result the tool found wrong is no measurement of a working collective
        "status": "failed" if error else "ok",
        **({"error_type": "WrongResult", "error": error} if error else {}),
        "spec": {
            "op": p.op,
            "dtype": p.dtype,
            "size_bytes": p.S_bytes,
            "V_bytes": p.V_bytes,
            "group_size": p.ranks,
            "num_groups": 1,
            "axes": ["X"],
            "mesh": {"name": f"{p.nodes}x{p.ranks // max(p.nodes, 1)}" if p.nodes > 1 else "x", "axes": {"X": p.ranks}},
            "hardware": hardware,
            "nodes": p.nodes,
        },
        "environment": {
            "backend": p.backend,
            "device_kind": p.device_kind,
            "device_count": p.ranks,
            "process_count": None,
            "host": ",".join(p.hosts[:4]) + (f",... ({len(p.hosts)} hosts)" if len(p.hosts) > 4 else ""),
            "jax_version": None,
            "jaxlib_version": None,
        },
        "config": {"op": {"name": p.op, "size_bytes": p.S_bytes}, "dtype": p.dtype, "hardware": {"name": hardware}},
        "timing": {"estimator": IMPORTED, "summary": {"median_s": p.time_s, "n": 1, "rounds": 1}},
        IMPORTED: {**p.origin, "tool": p.tool, "hardware_resolved": hardware_why, "command": command},
        "files": {},
    }


def point_overrides(points: list[ImportedPoint], out: Path | str = "--out") -> list[list[str]]:
    """What tells each point apart, as a sweep's overrides do (a reader may take them back from
    the folder's name, as Hydra builds it): the collective, the size, and the run's number
    where there are several. ImportFormatError where two points would share them, or where
    there are more than :data:`~analysis.importers.limits.MAX_POINTS` (before anything is written)."""
    check(len(points) <= MAX_POINTS, out, None, "number of points", len(points), POINTS_ALLOWED)

    def run(p: ImportedPoint) -> tuple:
        return p.origin.get("file"), p.origin.get("run"), p.op, p.ranks

    runs = {key: i for i, key in enumerate(dict.fromkeys(map(run, points)))}
    names, seen = [], {}
    for p in points:
        overrides = [f"op={p.op}", f"op.size_bytes={int(p.S_bytes)}"]
        if len(runs) > 1:
            overrides.append(f"run={runs[run(p)]}")
        first = seen.setdefault(tuple(overrides), p)
        if first is not p:  # the readers find points by these: two alike would be one point twice
            raise ImportFormatError(
                p.origin.get("file"),
                p.origin.get("line"),
                f"the same point as {first.origin.get('file')}:{first.origin.get('line')} ({', '.join(overrides)}): "
                "a sweep holds one point per collective, size and run",
            )
        names.append(overrides)
    return names


def write_sweep(points: list[ImportedPoint], out: Path, command: str, hardware: str | None = None) -> Path:
    """Write ``points`` as a sweep folder at ``out`` (which must not exist or be empty), all or
    nothing: the points are checked first (:func:`point_overrides`), then the folder is built
    beside its place and renamed into it."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"--out {out}: exists and is not an empty folder; pick a new one")
    names = point_overrides(points, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        expected = []
        cache: dict[tuple, tuple[str, str]] = {}
        for i, (p, overrides) in enumerate(zip(points, names)):
            key = (p.device_kind, p.backend)
            if key not in cache:
                cache[key] = hardware_of(p.device_kind, p.backend, hardware)
            hw, why = cache[key]
            expected.append({"num": i, "overrides": overrides})
            point = tmp / f"{i:03d}_{','.join(sorted(overrides))}"  # Hydra's name for these overrides
            write_json_atomic(point / RESULT_NAME, point_result(p, hw, why, command))
        write_json_atomic(
            tmp / SWEEP_NAME,
            {**stamp("sweep"), "command": command, "expected_points": expected, "rounds": 1, "started_at": now_iso()},
        )
        os.chmod(tmp, 0o755)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
