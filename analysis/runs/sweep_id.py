"""A sweep's identity for tables that outlive its folder: ``summary.csv`` rows of several
sweeps concatenated stay apart by ``sweep_id`` and order by ``sweep_start_time``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from analysis.runs.record import Result
from analysis.runs.rundir import SWEEP_NAME


def sweep_identity(root: str | Path, results: list[Result] | None = None) -> tuple[str, str | None]:
    """``(sweep_id, start_time)`` of the sweep in ``root``. The start is ``sweep.json``'s
    ``started_at`` (else the earliest point's); the id is ``sweep.json``'s ``sweep_id`` if it has
    one, else 12 hex digits of the SHA-1 of start and command: the same on every report of the
    same sweep, different for two sweeps, so concatenated ``summary.csv`` files stay apart."""
    try:
        meta = json.loads((Path(root) / SWEEP_NAME).read_text())
        meta = meta if isinstance(meta, dict) else {}
    except (OSError, ValueError):
        meta = {}
    start = meta.get("started_at")
    if not start and results:
        starts = sorted(str(r.started_at) for r in results if r.started_at)
        start = starts[0] if starts else None
    if meta.get("sweep_id"):
        return str(meta["sweep_id"]), start
    key = f"{start}|{meta.get('command')}|{Path(root).resolve().name if not start else ''}"
    return hashlib.sha1(key.encode()).hexdigest()[:12], start
