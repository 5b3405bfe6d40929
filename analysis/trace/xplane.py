"""The xplane reader: an ``.xplane.pb`` file -> a table of events.

The seam: :func:`read_xplane` is the only code that touches the profiler's format; it yields
one row per event. Everything after it (:mod:`.ops`, :mod:`.overlap`) works on that table and
is tested with hand-built tables in the shapes CPU, TPU and GPU profiles have:

* CPU: plane ``/host:CPU``, lines ``tf_XLAPjRtCpuClient/<thread>``, op events named after
  the HLO instruction with stats ``hlo_op``, ``hlo_module``, ``device_ordinal``.
* TPU: planes ``/device:TPU:N``, line ``XLA Ops``, events named after the HLO instruction.
* GPU: planes ``/device:GPU:N``, one line per stream, kernel events (``nccl...``, cuBLAS)
  carrying ``hlo_op`` / ``hlo_module`` stats. One HLO op may launch several kernels (seen on
  an H100: a cuBLAS matmul is a ``Memset`` then the GEMM kernel); they share a
  ``scope_range_id``, which groups them into one execution.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

EVENT_COLUMNS = ["plane", "line", "name", "start_ns", "duration_ns", "hlo_op", "hlo_module", "device_ordinal",
                 "scope_range_id"]
_STATS = EVENT_COLUMNS[5:]
_STAT_SET = frozenset(_STATS)


class TraceError(ValueError):
    """A trace file that cannot be read (missing, truncated, not an xplane)."""


def read_xplane(path: str | Path, candidates_only: bool = True) -> pd.DataFrame:
    """The events of an xplane file as a DataFrame with :data:`EVENT_COLUMNS`.

    Uses ``jax.profiler.ProfileData`` (the reader that ships with jaxlib). With
    ``candidates_only`` (the default) it keeps just the events that can be device ops:
    everything on ``/device:*`` planes, and on host planes the events named like an HLO
    instruction (no spaces, colons or parentheses, unlike runtime bookkeeping such as
    ``Wait: ...`` or ``ThunkExecutor::Execute``). That filter, applied while reading, is what
    keeps the parse fast: touching an event's fields and stats from Python is most of the
    cost. Pass ``candidates_only=False`` for every event of the file.
    """
    from jax.profiler import ProfileData

    path = Path(path)
    try:
        data = ProfileData.from_serialized_xspace(path.read_bytes())
    except Exception as exc:  # the C++ reader raises a bare RuntimeError on bad bytes
        raise TraceError(f"{path}: not a readable xplane trace ({exc})") from exc
    cols: dict[str, list] = {c: [] for c in EVENT_COLUMNS}
    add_plane, add_line, add_name = cols["plane"].append, cols["line"].append, cols["name"].append
    add_start, add_dur = cols["start_ns"].append, cols["duration_ns"].append
    add_stats = [(key, cols[key].append) for key in _STATS]
    for plane in data.planes:
        pname = plane.name
        on_device = pname.startswith("/device:")
        for line in plane.lines:
            lname = line.name
            for ev in line.events:
                name = ev.name
                candidate = on_device or not (" " in name or ":" in name or "(" in name)
                if candidates_only and not candidate:
                    continue
                kept = {k: v for k, v in ev.stats if k in _STAT_SET} if candidate else {}
                add_plane(pname)
                add_line(lname)
                add_name(name)
                add_start(ev.start_ns)
                add_dur(ev.duration_ns)
                for key, add in add_stats:
                    add(kept.get(key))
    df = pd.DataFrame(cols)
    df["start_ns"] = df["start_ns"].astype("float64")
    df["duration_ns"] = df["duration_ns"].astype("float64")
    return df


def count_events(path: str | Path) -> int:
    """How many events the file holds (for throughput figures)."""
    from jax.profiler import ProfileData

    data = ProfileData.from_serialized_xspace(Path(path).read_bytes())
    return sum(1 for plane in data.planes for line in plane.lines for _ in line.events)
