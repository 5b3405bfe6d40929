"""Google's accelerator-microbenchmarks (github.com/AI-Hypercomputer/accelerator-microbenchmarks)
collective results: its ``metrics_report.jsonl``, one JSON object a line,
``{"metrics": {...}, "dimensions": {...}}`` (``benchmark_utils.maybe_write_metrics_file``).

What its numbers mean (``src/benchmark_collectives.py``, ``*_calculate_metrics``): each
benchmark moves a ``matrix_dim x matrix_dim`` matrix M (``dimensions.dtype`` is the element
size in bytes as a string); over ``ici`` every chip holds all of M, over ``dcn`` each slice holds
M / dcn_size. Its ``{ici,dcn}_bandwidth_gbyte_s_{p50,...}`` is, for psum, psum_scatter,
all_gather and all_to_all, exactly nccl-tests' bus bandwidth of the book's V over the level's n
devices (GB/s, 1e9 B/s):

* psum (AllReduce): V = M per chip (ici), M / d (dcn); bw = V * 2(n-1)/n / t
* psum_scatter (ReduceScatter): V = M (ici), M / d (dcn); bw = V (n-1)/n / t
* all_gather (AllGather): V = n * M (ici: each chip's M gathered), M (dcn); bw = V (n-1)/n / t
* all_to_all (AllToAll): V = n * M (ici), M (dcn); bw = V/n * (n-1)/n / t

so the point's time is ``V * factor(n) / bw`` at the median (a median bandwidth is the median
time's: t is monotone in bw). Where a line records a time (``*_average_time_ms_p50``, or
``*_time_ms_p50`` in later versions) that is used. ``matrix_dim`` may be a shape (``8192x8x128``,
later versions): M is then the product of its dims times the element size.

Versions differ in how the input is sharded (some give each chip M / n for all_gather and
all_to_all, so V = M): V here follows the commit named above, replicated input; a file from a
version that shards it needs V divided by n. The file does not name the chip: ``--hardware`` must.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from analysis.book.collectives import BY_OP
from analysis.book.dtypes import DTYPE_BYTES, dtype_bytes
from analysis.book.errors import NotationError
from analysis.book.hardware import load_hardware
from analysis.importers import ImportFormatError
from analysis.importers.limits import (
    MAX_POINTS,
    MAX_RANKS,
    MAX_SIZE_BYTES,
    MAX_TIME_S,
    MIN_TIME_S,
    POINTS_ALLOWED,
    RANKS_ALLOWED,
    MAX_BANDWIDTH_Bps,
    as_number,
    check,
    checked_name,
    shown,
    small,
)
from analysis.importers.sweep_writer import ImportedPoint

# its test names -> shardlab's collectives (longest first: psum_scatter before psum)
OPS = (
    ("psum_scatter", "reduce_scatter"),
    ("all_gather", "all_gather"),
    ("all_to_all", "all_to_all"),
    ("psum", "all_reduce"),
)
ITEMSIZE_DTYPES = {"4": "float32", "2": "bfloat16", "1": "int8", "8": "float64"}


LEVELS = ("ici", "dcn")
MAX_DIMS = 8  # dims of a matrix_dim shape: the tool writes 1 to 3
BW_ALLOWED = f"a bandwidth above 0 and at most {MAX_BANDWIDTH_Bps / 1e9:.0f} GB/s (1 PB/s)"
TIME_MS_ALLOWED = f"a time from {MIN_TIME_S * 1e3:g} ms to a week ({MAX_TIME_S * 1e3:.0f} ms)"


def _whole_numbers(path, line, name, dims, key, example, split=None, default=None) -> list[int]:
    """``dims[key]`` as positive whole numbers (``split`` apart), or ImportFormatError naming the key."""
    raw = dims.get(key, default)
    parts = None if raw is None else str(raw).lower().split(split) if split else [str(raw)]
    # ASCII digits only ("²" is a digit to str.isdigit), few enough for int() to read, and a
    # shape of at most MAX_DIMS: the product of more is no matrix the tool builds
    ok = parts is not None and len(parts) <= MAX_DIMS
    numbers = [int(p) if p.isascii() and p.strip().isdigit() and len(p) <= 30 else 0 for p in parts or []]
    if not ok or not all(n > 0 for n in numbers):
        got = "missing" if raw is None else shown(raw)
        raise ImportFormatError(path, line, f"{name}: dimensions' {key!r} is {got}; it must be {example}")
    return numbers


def _dtype(path, line, name, dims) -> tuple[str, float]:
    """The element type and its bytes: ``dtype`` is the element size as digits ("2") or a name
    ("bfloat16"); ImportFormatError naming the key otherwise."""
    item = str(dims.get("dtype", ""))
    if item in ITEMSIZE_DTYPES:
        return ITEMSIZE_DTYPES[item], int(item)
    try:
        dtype, size = dtype_bytes(item)
    except NotationError:
        allowed = ", ".join([*ITEMSIZE_DTYPES, *DTYPE_BYTES])
        got = "missing" if "dtype" not in dims else shown(item)
        raise ImportFormatError(path, line, f"{name}: dimensions' 'dtype' is {got}; allowed: {allowed}") from None
    return dtype, float(size)  # int4 is half a byte


def _V(op: str, level: str, M: float, n: int) -> float:
    """The book's V of one benchmark over ``n`` devices of ``level`` (module docstring)."""
    if level == "ici":
        return M * n if op in ("all_gather", "all_to_all") else M
    return M if op in ("all_gather", "all_to_all") else M / n


@dataclass(frozen=True)
class _Line:
    """One benchmark's line of the file, as read: where it is and what it holds."""

    path: Path
    number: int
    name: str  # its test_name
    op: str  # shardlab's collective
    dims: dict
    metrics: dict


def _record(raw: str, path: Path, i: int) -> dict:
    """One line as a JSON object with ``metrics`` and ``dimensions`` objects, or ImportFormatError."""
    try:
        rec = json.loads(raw)
    except RecursionError:  # brackets nested thousands deep: no line the tool writes
        raise ImportFormatError(path, i, "not a metrics_report.jsonl line (nested too deeply)") from None
    except ValueError as exc:
        raise ImportFormatError(path, i, f"not a JSON line ({exc.msg}), so not a metrics_report.jsonl") from None
    if (
        not isinstance(rec, dict)
        or not isinstance(rec.get("metrics"), dict)
        or not isinstance(rec.get("dimensions"), dict)
    ):
        raise ImportFormatError(path, i, "a line without 'metrics' and 'dimensions' objects")
    return rec


def _matrix(ln: _Line) -> tuple[int, dict[str, int], str, float]:
    """The line's ``matrix_dim`` (its first dim), devices per level, dtype and M in bytes, each checked."""
    path, i, name, dims = ln.path, ln.number, ln.name, ln.dims
    shape = _whole_numbers(
        path, i, name, dims, "matrix_dim", "a whole number like 8192, or a shape like 8192x8x128", split="x"
    )
    dim = shape[0]
    sizes = {
        level: _whole_numbers(path, i, name, dims, f"{level}_size", "a whole number of devices", default="1")[0]
        for level in LEVELS
    }
    for level, n in sizes.items():
        if n > MAX_RANKS:
            raise ImportFormatError(path, i, f"{name}: dimensions' '{level}_size' is {n}; it must be {RANKS_ALLOWED}")
    dtype, itemsize = _dtype(path, i, name, dims)
    elems = dim * dim if len(shape) == 1 else math.prod(shape)  # exact: Python's ints do not wrap
    if elems > MAX_SIZE_BYTES / itemsize:  # elems may be past a float's range: compare it to one
        raise ImportFormatError(
            path,
            i,
            f"{name}: dimensions' 'matrix_dim' is {shown(dims['matrix_dim'])}; its {dtype} matrix must be at most "
            f"{MAX_SIZE_BYTES} bytes (1 TiB, more than any chip holds)",
        )
    return dim, sizes, dtype, float(elems) * itemsize


def _level_time(ln: _Line, level: str, n: int, M: float) -> tuple[float, float, float, object] | None:
    """One level's ``(V, S, time, bandwidth as written)``, each checked; None where the line
    measured nothing over it (fewer than 2 devices, or neither a bandwidth nor a time)."""
    path, i, name, metrics = ln.path, ln.number, ln.name, ln.metrics
    bw_key = f"{level}_bandwidth_gbyte_s_p50"
    t_key = next((k for k in (f"{level}_average_time_ms_p50", f"{level}_time_ms_p50") if k in metrics), "")
    bw, t_ms = metrics.get(bw_key), metrics.get(t_key)
    if n < 2 or (bw is None and t_ms is None):
        return None
    if bw is not None:
        x = as_number(bw)
        check(x is not None and 0 < x * 1e9 <= MAX_BANDWIDTH_Bps, path, i, f"{name}: metrics.{bw_key}", bw, BW_ALLOWED)
    if t_ms is not None:
        x = as_number(t_ms)
        check(
            x is not None and MIN_TIME_S <= x / 1e3 <= MAX_TIME_S,
            path,
            i,
            f"{name}: metrics.{t_key}",
            t_ms,
            TIME_MS_ALLOWED,
        )
    V = _V(ln.op, level, M, n)
    kind = BY_OP[ln.op]
    S = V * kind.S_over_V(n)
    if S > MAX_SIZE_BYTES:  # an all_gather's V over many chips: what each holds after it
        raise ImportFormatError(
            path,
            i,
            f"{name}: {S:.4g} bytes on each of {n} {level} devices (matrix_dim {shown(ln.dims['matrix_dim'])}); "
            f"it must be at most {MAX_SIZE_BYTES} bytes (1 TiB, more than any chip holds)",
        )
    if t_ms is not None:
        t = float(t_ms) / 1e3
    else:  # its bandwidth is nccl-tests' busbw, S (n-1)/n / t, and S is V / n for all_to_all
        t = S * kind.busbw_factor(n) / (float(bw) * 1e9)
        at = f"S = {S:.4g} bytes (matrix_dim {shown(ln.dims['matrix_dim'])}, it gives {t:.3g} s)"
        allowed = f"a bandwidth that gives a time from 1 ns to a week at {at}"
        check(MIN_TIME_S <= t <= MAX_TIME_S, path, i, f"{name}: metrics.{bw_key}", bw, allowed)
    return V, S, t, bw


def parse_results(text: str, path: str | Path = "<text>", hardware: str | None = None) -> list[ImportedPoint]:
    """The points of one ``metrics_report.jsonl``: one per line and level (ici, dcn) with a
    bandwidth; ImportFormatError naming the file, the line and the field for anything else
    (the bounds of :mod:`analysis.importers.limits`; a collective, size and group measured
    twice)."""
    path = Path(path)
    points: list[ImportedPoint] = []
    seen: dict[tuple, int] = {}  # (op, devices, S) -> its line: what a sweep's point folder is named by
    device_kind = "unknown"
    if hardware:
        device_kind = (load_hardware(hardware).device_kinds or (hardware,))[0]
    for i, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        rec = _record(raw, path, i)
        dims, metrics = rec["dimensions"], rec["metrics"]
        name = str(dims.get("test_name", ""))
        op = next((o for key, o in OPS if key in name), None)
        if op is None:
            continue  # ppermute, matmuls, HBM copies: not a collective the model prices
        ln = _Line(path, i, checked_name(name, path, i, "dimensions' 'test_name'"), op, dims, metrics)
        dim, sizes, dtype, M = _matrix(ln)
        for level, n in sizes.items():
            measured = _level_time(ln, level, n, M)
            if measured is None:
                continue
            V, S, t, bw = measured
            key = (op, n, int(S))
            if key in seen:
                raise ImportFormatError(
                    path,
                    i,
                    f"{ln.name}: {op} over {n} devices of S = {int(S)} bytes again ({level}), first at line "
                    f"{seen[key]}: a sweep holds one point per collective, size and group; keep one of the lines",
                )
            seen[key] = i
            check(len(points) < MAX_POINTS, path, i, "number of points", len(points) + 1, POINTS_ALLOWED)
            points.append(
                ImportedPoint(
                    op=op,
                    dtype=dtype,
                    V_bytes=V,
                    S_bytes=S,
                    time_s=t,
                    ranks=n,
                    nodes=n if level == "dcn" else 1,
                    hosts=[],
                    device_kind=device_kind,
                    backend="tpu",
                    tool="accelerator-microbenchmarks",
                    origin={
                        "file": str(path),
                        "run": 0,
                        "line": i,
                        "test_name": ln.name,
                        "level": level,
                        "matrix_dim": dim,
                        "size_convention": "M = matrix_dim^2 * itemsize; V as in analysis.importers."
                        "accelerator_microbenchmarks",
                        "bandwidth_definition": "{level}_bandwidth_gbyte_s = nccl-tests' busbw of V over the level",
                        "bandwidth_Bps": None if bw is None else float(bw) * 1e9,
                        "metrics": small(metrics),
                    },
                )
            )
    if not points:
        raise ImportFormatError(path, None, "no psum, psum_scatter, all_gather or all_to_all result in it")
    return points
