"""Profiler traces: the xplane files ``jax.profiler`` writes, as tables of device-op times.

The face: :func:`read_xplane` (file -> event table; it and :mod:`.carried_hlo`, the HLO
modules a file carries, are the only code that knows the format),
:func:`device_ops` (event table -> per-device op executions on CPU, TPU and GPU),
:func:`op_steps` / :func:`op_summary` (executions lined up across devices, then medians),
and :mod:`.overlap` (how much collective time hides under compute).

May import: :mod:`analysis.book`, numpy, pandas, and ``jax.profiler`` (the reader).
"""

from analysis.trace.ops import device_ops, device_samples, op_steps, op_summary
from analysis.trace.xplane import EVENT_COLUMNS, TABLE_COLUMNS, XPROF_COLUMNS, TraceError, count_events, read_xplane

__all__ = [
    "EVENT_COLUMNS",
    "TABLE_COLUMNS",
    "TraceError",
    "XPROF_COLUMNS",
    "count_events",
    "device_ops",
    "device_samples",
    "op_steps",
    "op_summary",
    "read_xplane",
]
