"""What a point's compiled HLO and trace say, read once: its collectives (one row each, with
the mesh axes their groups span), its ops' traced times, and the compute/collective overlap.

The worker writes it (``ops_table.json`` in the point folder) right after it read the trace
for its own estimator, so a report reads one small file per point instead of parsing the
trace and the HLO again (about 50 ms a point; a 1000-point report spent 49 s there). The
file is stamped with the size and modification time of the HLO and trace it came from and
with the mesh: a stale or damaged one is rebuilt from the files, and written back where the
folder allows.

    from analysis.runs.point_table import point_table
    table = point_table(result)     # result: a Result; {"hlo": {"rows", "error"}, "trace": {"ops", "overlap", "error"}}
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import hlo as hlo_parser
from analysis import trace as trace_reader
from analysis.runs.record import Result
from analysis.runs.rundir import point_file, stamp, write_json_atomic
from analysis.trace.overlap import overlap_summary

TABLE_NAME = "ops_table.json"
FORMAT = 1  # raise when what the table holds changes: older tables are then rebuilt
MAX_HLO_BYTES = 1 << 30  # an HLO text file larger than this is not a program's
INPUTS = ("hlo_compiled", "xplane")  # result.json's ``files`` keys the table is read from
OP_COLUMNS = ("hlo_op", "op_time_s", "device_time_s", "arrival_skew_s", "iterations")


def point_ops(xplane: Path, hlo_text: str | None, steps: int | None = None) -> pd.DataFrame:
    """A traced point's device-op table (:func:`analysis.trace.device_ops`) as the worker and
    the report both read it: only collectives' async halves joined (a host offload's
    ``copy-start``/``copy-done`` stays two ops, as XProf keeps them), steps cut at the
    module's executions, of which the trace holds ``steps`` (the traced calls) where known.
    Without the HLO (``None``) the trace's own names pair the halves."""
    events = trace_reader.read_xplane(xplane)
    if hlo_text is None:
        return trace_reader.device_ops(events, steps=steps)
    return trace_reader.device_ops(
        events,
        hlo_parser.async_pairs(hlo_text),
        collectives=set(hlo_parser.collective_executions(hlo_text)),
        steps=steps,
    )


def _stamp(result: Result) -> dict:
    """What the table was built from: each input file's size and modification time (None
    where the point has none), the mesh, the traced steps and the table's format."""
    files = {}
    for key in INPUTS:
        rel = result.files.get(key)
        try:
            st = os.stat(Path(result.point_dir) / rel) if rel else None
        except (OSError, ValueError, TypeError):  # (TypeError: no point_dir, or a name that is no text)
            st = None
        files[key] = [rel, st.st_size, st.st_mtime_ns] if st else None
    return {"format": FORMAT, "files": files, "mesh_axes": result.spec.mesh.axes, "steps": _steps(result)}


def _steps(result: Result) -> int | None:
    steps = result.trace.iters
    return int(steps) if isinstance(steps, int) and steps > 0 else None


def hlo_rows(text: str, mesh_axes: dict) -> list[dict]:
    """One row per collective of the compiled HLO ``text``, its groups named by the axes of
    ``mesh_axes`` (the mesh as the point built it; HLO numbers devices by their position in it)."""
    axis_names = list(mesh_axes)
    device_ids = np.arange(int(np.prod(list(mesh_axes.values())))).reshape(list(mesh_axes.values()) or [0])
    rows = []
    for c in hlo_parser.parse_collectives(text, num_devices=int(device_ids.size) or None):
        try:
            groups = c.replica_groups or (tuple(int(d) for d in device_ids.ravel()),)
            axes = "".join(hlo_parser.group_mesh_axes(groups, device_ids, axis_names))
        except (hlo_parser.HloParseError, ValueError):
            axes = None
        rows.append(
            {
                "hlo_op": c.name,
                "hlo_kind": c.kind,
                "hlo_dtype": c.dtype,
                "hlo_operand_bytes": c.operand_bytes,
                "hlo_result_bytes": c.result_bytes,
                "hlo_group_size": c.group_size,
                "hlo_num_groups": c.num_groups,
                "hlo_axes": axes,
            }
        )
    return rows


def build(
    result: Result, hlo_text: str | None = None, ops: pd.DataFrame | None = None, summary: pd.DataFrame | None = None
) -> dict:
    """The table of one point (``result``: its record, with ``point_dir``), read from its
    files; ``hlo_text``, ``ops`` and their ``summary`` (:func:`analysis.trace.op_summary`)
    where the caller has them already (the worker). A file
    that cannot be read leaves its part empty, with the problem in its ``error``."""
    table = {
        "stamp": _stamp(result),
        "hlo": {"rows": [], "error": None},
        "trace": {"ops": None, "overlap": {}, "error": None},
    }
    mesh_axes = result.spec.mesh.axes or {}
    text, path = hlo_text, None
    try:
        if text is None and (path := point_file(result, "hlo_compiled", MAX_HLO_BYTES)) is not None:
            text = path.read_text()
        if text is not None:
            table["hlo"]["rows"] = hlo_rows(text, mesh_axes)
            opcodes = hlo_parser.instruction_opcodes(text)
    except (OSError, UnicodeDecodeError, hlo_parser.HloParseError) as exc:  # (the last two are ValueErrors)
        table["hlo"]["error"], text = (f"{path}: {exc}" if path else str(exc)), None
    except ValueError as exc:  # point_file's refusals (outside the folder, not a file, too large)
        table["hlo"]["error"], text = str(exc), None
    try:
        xplane = point_file(result, "xplane")
    except ValueError as exc:
        table["trace"]["error"] = str(exc)
        return table
    if xplane is None:
        return table
    try:
        if ops is None:
            ops = point_ops(xplane, text, _steps(result))
    except (OSError, trace_reader.TraceError) as exc:
        table["trace"]["error"] = str(exc) if str(xplane) in str(exc) else f"{xplane}: {exc}"
        return table
    if not len(ops):
        return table
    overlap = overlap_summary(ops, opcodes if text is not None else None)
    # GPU command buffers (CUDA graphs) hide the ops they run: their kernels carry the buffer's name
    overlap["trace_command_buffers"] = int(ops["hlo_op"].astype(str).str.contains("command_buffer").sum())
    if summary is None:
        summary = trace_reader.op_summary(trace_reader.op_steps(ops))
    # the first row of an op name (op_summary has one per module and op)
    summary = summary.drop_duplicates("hlo_op")[list(OP_COLUMNS)]
    table["trace"]["ops"] = [
        {"hlo_op": str(op), **{k: _number(v) for k, v in zip(OP_COLUMNS[1:], rest)}}
        for op, *rest in summary.itertuples(index=False)
    ]
    table["trace"]["overlap"] = {k: _number(v) for k, v in overlap.items()}
    return table


def _number(v) -> int | float | None:
    """A plain JSON number, full precision; None for NaN."""
    if isinstance(v, (int, np.integer)):
        return int(v)
    return float(v) if v == v else None


def save(point_dir: Path, table: dict) -> Path:
    """Write ``table`` whole (a temporary file renamed) as the point's ``ops_table.json``."""
    path = Path(point_dir) / TABLE_NAME
    write_json_atomic(path, {**stamp("ops_table"), **table})  # strict JSON, opened by its format
    return path


def saved_table(result: Result) -> dict | None:
    """The point's ``ops_table.json`` where it was built from the files the point holds now
    (same sizes, times, mesh and format); None where it is missing, stale or damaged."""
    if not result.point_dir:  # a record read from elsewhere than its folder: nothing saved
        return None
    try:
        table = json.loads((Path(result.point_dir) / TABLE_NAME).read_text())
    except (OSError, ValueError):
        return None
    return table if isinstance(table, dict) and table.get("stamp") == _stamp(result) else None


def point_table(result: Result) -> dict:
    """The point's table: the saved one where it is current (:func:`saved_table`), else built
    again from the files and written back (a read-only folder keeps the old file; the table is
    still returned)."""
    if (table := saved_table(result)) is not None:
        return table
    table = build(result)
    if result.point_dir:
        try:
            save(result.point_dir, table)
        except OSError:
            pass
    return table


def trace_ops(table: dict) -> pd.DataFrame | None:
    """The table's per-op trace times as a frame (one row per op name), or None without a trace."""
    ops = table["trace"]["ops"]
    return pd.DataFrame(ops, columns=list(OP_COLUMNS)) if ops is not None else None
