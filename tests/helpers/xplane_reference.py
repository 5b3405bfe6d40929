"""The reference xplane reader the tests (and ``tests/bench/trace_reading.py``) hold
:func:`analysis.trace.read_xplane` against: the same table, read one Python step per event
through ``jax.profiler.ProfileData``, the reader that ships with jaxlib. No user path calls it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from jax.profiler import ProfileData

from analysis.trace import EVENT_COLUMNS, TABLE_COLUMNS, XPROF_COLUMNS, TraceError

PLAIN_STATS = EVENT_COLUMNS[5:]  # hlo_op, hlo_module, device_ordinal, scope_range_id
# the event stats the table reads: those, program_id and hlo_category, the device timespan
STATS = frozenset([*PLAIN_STATS, *XPROF_COLUMNS[1:], "device_offset_ps", "device_duration_ps"])


def read_with_profiledata(path: str | Path, candidates_only: bool = True) -> pd.DataFrame:
    """The reference reader: :func:`read_xplane` through ``jax.profiler.ProfileData`` (the
    reader that ships with jaxlib), one Python step per event. The tests and the benchmark
    compare the fast reader with it. ProfileData shows neither an event metadata's
    ``display_name`` nor its stats: here ``display_name`` is None and ``program_id`` /
    ``hlo_category`` come from the event's own stats only, so the tables are equal where the
    metadata carry neither (CPU traces); the tests check those columns on TPU files apart."""
    path = Path(path)
    try:
        data = ProfileData.from_serialized_xspace(path.read_bytes())
    except Exception as exc:  # the C++ reader raises a bare RuntimeError on bad bytes
        raise TraceError(f"{path}: not a readable xplane trace ({exc})") from exc
    cols: dict[str, list] = {c: [] for c in TABLE_COLUMNS}
    add_plane, add_line, add_name = cols["plane"].append, cols["line"].append, cols["name"].append
    add_start, add_dur = cols["start_ns"].append, cols["duration_ns"].append
    add_stats = [(key, cols[key].append) for key in PLAIN_STATS]
    add_texts = [(key, cols[key].append) for key in XPROF_COLUMNS[1:]]
    add_display = cols["display_name"].append

    def whole_ns(ps: int) -> int:  # C++ division, toward zero
        return -(-ps // 1000) if ps < 0 else ps // 1000

    def device_int(v) -> bool:
        return type(v) is int and v < 2**63  # an int64 or a uint64 an int64 holds

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
                kept = {k: v for k, v in ev.stats if k in STATS} if candidate else {}
                add_plane(pname)
                add_line(lname)
                add_name(name)
                off, dur = kept.get("device_offset_ps"), kept.get("device_duration_ps")
                if device_int(off) and device_int(dur):
                    add_start(whole_ns(off))
                    add_dur(whole_ns(dur))
                else:
                    add_start(ev.start_ns)
                    add_dur(ev.duration_ns)
                for key, add in add_stats:
                    add(kept.get(key))
                for key, add in add_texts:
                    v = kept.get(key)
                    add(None if v is None else v if isinstance(v, str) else str(v))
                add_display(None)
    return pd.DataFrame(cols).astype({"start_ns": "float64", "duration_ns": "float64"})
