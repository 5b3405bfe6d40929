"""The xplane reader: an ``.xplane.pb`` file -> a table of events.

The seam: :func:`read_xplane` is the only code that touches the profiler's format (with its
decoder, :mod:`.xspace_wire`, and :mod:`.event_stats`, which turns the events' stats into the
columns); it yields one row per event. Everything after it (:mod:`.ops`,
:mod:`.overlap`) works on that table and is tested with hand-built tables in the shapes CPU, TPU
and GPU profiles have:

* CPU: plane ``/host:CPU``, lines ``tf_XLAPjRtCpuClient/<thread>``, op events named after
  the HLO instruction with stats ``hlo_op``, ``hlo_module``, ``program_id``, ``device_ordinal``.
* TPU (seen in a real v6e trace): planes ``/device:TPU:N``, lines ``XLA Modules`` (one event
  per module execution, named ``jit_f(<program_id>)``), ``XLA Ops`` and ``Async XLA Ops``. An
  op event's metadata ``name`` is the whole HLO instruction text (``%fusion.3 = bf16[...]
  fusion(...), kind=kOutput, ...``), its metadata ``display_name`` the instruction name
  (``fusion.3``); per-op facts (``hlo_category``, ``program_id``, ``tf_op``, ``flops``) are
  stats on the *metadata*, and the events carry ``device_offset_ps``/``device_duration_ps``.
  No ``hlo_op``/``hlo_module`` stat.
* GPU: planes ``/device:GPU:N``, one line per stream, kernel events (``nccl...``, cuBLAS,
  ROCm ``*.kd``) carrying ``hlo_op`` / ``hlo_module`` / ``program_id`` stats. One HLO op may
  launch several kernels (seen on an H100: a cuBLAS matmul is a ``Memset`` then the GEMM
  kernel); they share a ``scope_range_id``, which groups them into one execution.

The columns (:data:`TABLE_COLUMNS`: :data:`EVENT_COLUMNS`, then :data:`XPROF_COLUMNS`):

* ``plane``, ``line``, ``name`` (the event metadata's name), as ProfileData gives them.
* ``start_ns``, ``duration_ns``: the event's timespan as XProf reads it (tsl
  ``GetEventTimespan``): where the event has both ``device_offset_ps`` and
  ``device_duration_ps`` stats with integer values, those (the offset is absolute, not from the
  line's timestamp); else the line's timestamp plus the event's offset, and its duration. Whole
  ns, truncated toward zero as ProfileData truncates.
* ``hlo_op``, ``hlo_module``, ``device_ordinal``, ``scope_range_id``: the event's stats of
  those names (None where absent), as ProfileData gives them.
* ``display_name``: the event metadata's ``display_name`` (None where unset): on TPU the HLO
  instruction name. XProf names the op by it where set (``SetOpMetadataFromHloEventMetadata``).
* ``program_id``: the module's program id as decimal text (a uint64 that may not fit an
  int64), from the event's stat, else its metadata's; None where neither has one.
* ``hlo_category``: XProf's op category (``all-gather``, ``all-reduce fusion``,
  ``convolution``, ...), from the event's stat, else its metadata's; None where neither has one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.trace import xspace_wire as wire
from analysis.trace.arrays import Lookup, objects, trunc_div
from analysis.trace.event_stats import PLAIN_STATS, TEXT_STATS, add_stat_columns

EVENT_COLUMNS = ["plane", "line", "name", "start_ns", "duration_ns", *PLAIN_STATS]
# What XProf reads and ProfileData does not show; the table's last columns. Apart from
# EVENT_COLUMNS so that tables built by hand in the older shape stay valid input to .ops.
XPROF_COLUMNS = ["display_name", *TEXT_STATS]
TABLE_COLUMNS = EVENT_COLUMNS + XPROF_COLUMNS
_METADATA_STATS = frozenset(TEXT_STATS)  # the metadata stats read: XProf's fallback for the event's


class TraceError(ValueError):
    """A trace file that cannot be read (missing, truncated, not an xplane)."""


def read_xplane(path: str | Path, candidates_only: bool = True) -> pd.DataFrame:
    """The events of an xplane file as a DataFrame with :data:`TABLE_COLUMNS` (module doc).

    With ``candidates_only`` (the default) it keeps just the events that can be device ops:
    everything on ``/device:*`` planes, and on host planes the events named like an HLO
    instruction (no spaces, colons or parentheses, unlike runtime bookkeeping such as
    ``Wait: ...`` or ``ThunkExecutor::Execute``); the stats columns are filled for those
    only. Pass ``candidates_only=False`` for every event of the file.

    The file is the serialized ``XSpace`` protobuf; :mod:`.xspace_wire` decodes it (the C
    protobuf parser for planes, lines and metadata, numpy for the events' fields, all events
    at once). An event's name lives in its plane's metadata, so which events are candidates
    is decided per metadata entry, and only those events' stats are decoded. Its
    :data:`EVENT_COLUMNS` are exactly what ``jax.profiler.ProfileData`` gives
    (``tests/helpers/xplane_reference.py`` reads through it: the reference the tests compare with), with
    the device timespan preferred as XProf does: ``start_ns`` is the line's timestamp plus
    the event's offset in whole ns, ``duration_ns`` whole ns, a stat whose metadata is
    missing or that has no value is skipped, a reference stat is the referenced metadata's
    name, and of two stats with one name the later wins. :data:`XPROF_COLUMNS` come from the
    event metadata, which ProfileData does not show.

    Where it is laxer than ProfileData: bytes inside an event that is not read (a host event
    that is no candidate) are not checked, and a name that is not UTF-8 is decoded with
    ``surrogateescape`` rather than refused. It needs ``google.protobuf`` (a dependency of
    xprof, which tensorboard-plugin-profile installs).
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{path}: not a readable xplane trace ({exc})") from exc
    try:
        try:
            return _table(wire.read_space(data, _METADATA_STATS), candidates_only)
        except wire.GroupField:  # rare: read again, the groups taken out as protobuf skips them
            return _table(wire.read_space(data, _METADATA_STATS, strip_groups=True), candidates_only)
    except (wire.WireError, IndexError) as exc:  # IndexError: a field running off the end
        raise TraceError(f"{path}: not a readable xplane trace ({exc})") from exc


def count_events(path: str | Path) -> int:
    """How many events the file holds (for throughput figures)."""
    path = Path(path)
    try:
        return wire.count_events(path.read_bytes())
    except (OSError, wire.WireError) as exc:
        raise TraceError(f"{path}: not a readable xplane trace ({exc})") from exc


def _is_candidate_name(name: str) -> bool:
    return not (" " in name or ":" in name or "(" in name)


def _by_plane(lookups: list, cuts: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``lookups[pi]`` applied to the ids of plane pi, ``ids[cuts[pi]:cuts[pi + 1]]`` (the
    items are in plane order)."""
    return np.concatenate([look(ids[lo:hi]) for look, lo, hi in zip(lookups, cuts[:-1], cuts[1:])])


def _table(space: wire.Space, candidates_only: bool) -> pd.DataFrame:
    planes, buf = space.planes, space.buf
    lines = [(pi, ln) for pi, p in enumerate(planes) for ln in p.lines]
    counts = np.fromiter((ln.count for _, ln in lines), np.int64)
    n = int(counts.sum())
    if n == 0:
        return _frame({c: [] for c in TABLE_COLUMNS})
    line_plane = np.fromiter((pi for pi, _ in lines), np.int64)
    ev_line = np.repeat(np.arange(len(lines)), counts)
    bounds = np.cumsum([0, *(sum(ln.count for ln in p.lines) for p in planes)])  # plane pi: bounds[pi]:bounds[pi + 1]

    # Event names, as codes into `names` (0: "", the name ProfileData gives an event whose
    # metadata is missing), from each plane's metadata; candidacy per name and plane.
    code_of: dict[str, int] = {"": 0}
    event_lookup = [Lookup(p.event_names, 0, lambda name: code_of.setdefault(name, len(code_of))) for p in planes]
    names = list(code_of)
    candidate_name = np.fromiter(map(_is_candidate_name, names), bool)
    on_device = np.fromiter((p.name.startswith("/device:") for p in planes), bool)

    def resolve(ev: np.ndarray, mids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(name code, candidate?) of the events ``ev`` (ascending) with metadata ids ``mids``."""
        cuts = np.searchsorted(ev, bounds)
        codes = _by_plane(event_lookup, cuts, mids)
        return codes, candidate_name[codes] | np.repeat(on_device, np.diff(cuts))

    if candidates_only:
        # Most events are not candidates: tell them by their metadata id alone, which is the
        # first field of an event as every writer lays it out; the rest are decoded.
        first, has_first = wire.first_varint_field(buf, space.starts, space.stops, 0x08)
        _, cand = resolve(np.arange(n), first.view(np.int64))
        keep = np.flatnonzero(cand | ~has_first)
    else:
        keep = np.arange(n)
    d = wire.decode(
        buf, space.starts[keep], space.stops[keep], ((1, 0), (2, 0), (3, 0), (5, 0)), repeated=(4, 2), peek=0x08
    )
    codes, cand = resolve(keep, d.value[(1, 0)].view(np.int64))
    # offset_ps and num_occurrences are a oneof: with the latter set, the offset reads as 0
    offset = np.where(d.seen[(2, 0)] > d.seen[(5, 0)], d.value[(2, 0)].view(np.int64), 0)
    duration = d.value[(3, 0)].view(np.int64)
    rows = np.flatnonzero(cand) if candidates_only else np.arange(keep.size)
    if rows.size == 0:  # no event kept: the same empty table as a file without events
        return _frame({c: [] for c in TABLE_COLUMNS})
    ev = keep[rows]
    kept_line = ev_line[ev]
    line_ts = np.fromiter((ln.timestamp_ns for _, ln in lines), np.int64)
    cols = {  # whole ns as int64 here; _frame makes the times float64, as ProfileData gives them
        "plane": objects([p.name for p in planes])[line_plane[kept_line]],
        "line": objects([ln.name for _, ln in lines])[kept_line],
        "name": objects(names)[codes[rows]],
        "start_ns": trunc_div(offset[rows], 1000) + line_ts[kept_line],
        "duration_ns": trunc_div(duration[rows], 1000),
    }
    add_stat_columns(cols, space, d, keep, cand, bounds, rows, line_plane[kept_line])
    return _frame(cols)


def _frame(cols: dict) -> pd.DataFrame:
    df = pd.DataFrame(cols)
    df["start_ns"] = df["start_ns"].astype("float64")
    df["duration_ns"] = df["duration_ns"].astype("float64")
    return df
