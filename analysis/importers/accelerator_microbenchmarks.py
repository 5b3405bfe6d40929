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
from pathlib import Path

import numpy as np

from analysis.book.collectives import BY_OP
from analysis.importers import ImportFormatError
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


def _whole_numbers(path, line, name, dims, key, example, split=None, default=None) -> list[int]:
    """``dims[key]`` as positive whole numbers (``split`` apart), or ImportFormatError naming the key."""
    raw = dims.get(key, default)
    parts = None if raw is None else str(raw).lower().split(split) if split else [str(raw)]
    if parts is None or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        got = "missing" if raw is None else f"{raw!r}"
        raise ImportFormatError(path, line, f"{name}: dimensions' {key!r} is {got}; it must be {example}")
    return [int(p) for p in parts]


def _dtype(path, line, name, dims) -> tuple[str, float]:
    """The element type and its bytes: ``dtype`` is the element size as digits ("2") or a name
    ("bfloat16"); ImportFormatError naming the key otherwise."""
    from analysis.book.dtypes import DTYPE_BYTES, dtype_bytes
    from analysis.book.errors import NotationError

    item = str(dims.get("dtype", ""))
    if item in ITEMSIZE_DTYPES:
        return ITEMSIZE_DTYPES[item], int(item)
    try:
        dtype, size = dtype_bytes(item)
    except NotationError:
        allowed = ", ".join([*ITEMSIZE_DTYPES, *DTYPE_BYTES])
        got = "missing" if "dtype" not in dims else f"{item!r}"
        raise ImportFormatError(path, line, f"{name}: dimensions' 'dtype' is {got}; allowed: {allowed}") from None
    return dtype, float(size)  # int4 is half a byte


def _V(op: str, level: str, M: float, n: int) -> float:
    """The book's V of one benchmark over ``n`` devices of ``level`` (module docstring)."""
    if level == "ici":
        return M * n if op in ("all_gather", "all_to_all") else M
    return M if op in ("all_gather", "all_to_all") else M / n


def parse_results(text: str, path: str | Path = "<text>", hardware: str | None = None) -> list[ImportedPoint]:
    """The points of one ``metrics_report.jsonl``: one per line and level (ici, dcn) with a
    bandwidth; ImportFormatError naming the file and line for anything else."""
    path = Path(path)
    points: list[ImportedPoint] = []
    device_kind = "unknown"
    if hardware:
        from analysis.book.hardware import load_hardware

        device_kind = (load_hardware(hardware).device_kinds or (hardware,))[0]
    for i, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except ValueError as exc:
            raise ImportFormatError(path, i, f"not a JSON line ({exc.msg}), so not a metrics_report.jsonl") from None
        if (
            not isinstance(rec, dict)
            or not isinstance(rec.get("metrics"), dict)
            or not isinstance(rec.get("dimensions"), dict)
        ):
            raise ImportFormatError(path, i, "a line without 'metrics' and 'dimensions' objects")
        dims, metrics = rec["dimensions"], rec["metrics"]
        name = str(dims.get("test_name", ""))
        op = next((o for key, o in OPS if key in name), None)
        if op is None:
            continue  # ppermute, matmuls, HBM copies: not a collective the model prices
        shape = _whole_numbers(
            path, i, name, dims, "matrix_dim", "a whole number like 8192, or a shape like 8192x8x128", split="x"
        )
        dim = shape[0]
        sizes = {
            level: _whole_numbers(path, i, name, dims, f"{level}_size", "a whole number of devices", default="1")[0]
            for level in LEVELS
        }
        dtype, itemsize = _dtype(path, i, name, dims)
        M = float(dim) * dim * itemsize if len(shape) == 1 else float(np.prod(shape)) * itemsize
        for level, n in sizes.items():
            bw = metrics.get(f"{level}_bandwidth_gbyte_s_p50")
            t_ms = metrics.get(f"{level}_average_time_ms_p50", metrics.get(f"{level}_time_ms_p50"))
            if n < 2 or (bw is None and t_ms is None):
                continue
            V = _V(op, level, M, n)
            kind = BY_OP[op]
            # its bandwidth is nccl-tests' busbw, S (n-1)/n / t, and S is V / n for all_to_all
            t = (
                float(t_ms) / 1e3
                if t_ms is not None
                else V * kind.S_over_V(n) * kind.busbw_factor(n) / (float(bw) * 1e9)
            )
            points.append(
                ImportedPoint(
                    op=op,
                    dtype=dtype,
                    V_bytes=V,
                    S_bytes=V * kind.S_over_V(n),
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
                        "test_name": name,
                        "level": level,
                        "matrix_dim": dim,
                        "size_convention": "M = matrix_dim^2 * itemsize; V as in analysis.importers."
                        "accelerator_microbenchmarks",
                        "bandwidth_definition": "{level}_bandwidth_gbyte_s = nccl-tests' busbw of V over the level",
                        "bandwidth_Bps": None if bw is None else float(bw) * 1e9,
                        "metrics": metrics,
                    },
                )
            )
    if not points:
        raise ImportFormatError(path, None, "no psum, psum_scatter, all_gather or all_to_all result in it")
    return points
