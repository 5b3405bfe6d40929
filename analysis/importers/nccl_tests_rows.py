"""What one nccl-tests / rccl-tests run holds, whichever way it was printed (the text table,
:mod:`analysis.importers.nccl_tests`, or ``-J``'s JSON, :mod:`analysis.importers.nccl_tests_json`):
the run, its rows and their two measurements, the checks a row passes before it becomes a point,
the collective read from the file where the run does not name it, and the points a run gives
(:func:`run_points`). Conventions: the text reader's module docstring."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from analysis.book.collectives import BY_OP
from analysis.book.dtypes import DTYPE_BYTES, NCCL_TESTS_TYPES
from analysis.importers import ImportFormatError
from analysis.importers.limits import (
    BANDWIDTH_GBPS_ALLOWED,
    COUNT_ALLOWED,
    MAX_SIZE_BYTES,
    MAX_TIME_S,
    MIN_TIME_S,
    SIZE_ALLOWED,
    TIME_US_ALLOWED,
    WRONG_ALLOWED,
    MAX_BANDWIDTH_Bps,
    as_whole,
    check,
)
from analysis.importers.sweep_writer import ImportedPoint

# nccl-tests' binaries -> shardlab's collectives (the model prices these four)
OPS = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "all_to_all",
}
OTHER_TESTS = ("broadcast", "reduce", "sendrecv", "scatter", "gather", "hypercube")
DTYPES = NCCL_TESTS_TYPES  # its type names -> shardlab's dtypes
# bytes per element of its types (wordSize in src/common.cu): a size is a whole number of them
ITEM_BYTES = {
    "float": 4, "half": 2, "bfloat16": 2, "double": 8, "int8": 1, "uint8": 1, "int32": 4, "uint32": 4,
    "int64": 8, "uint64": 8, "f8e4m3": 1, "f8e5m2": 1,
}  # fmt: skip
# the types a point may have: the report prices and prints a dtype the book has a size for
MODELLED_TYPES = [t for t, dtype in NCCL_TESTS_TYPES.items() if dtype in DTYPE_BYTES]
# where a file names its collective (op_from_file): the run's own line, a command echoed, its name
_STARTING = re.compile(r"Collective test starting:\s*(\w+?)_perf")
_TEST_NAME = re.compile(
    r"\b(all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce|sendrecv|scatter|gather|hypercube)_perf"
)
_FILE_NAME = re.compile(r"(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|alltoall)", re.I)


@dataclass
class Measured:
    """One of a row's two measurements (out-of-place or in-place)."""

    time_s: float
    algbw_Bps: float
    busbw_Bps: float
    wrong: int | None  # None: the run did not check (-c 0 prints N/A)


@dataclass
class Row:
    """One size of a table, with the file line it came from."""

    line: int
    S_bytes: int
    count: int
    type: str
    redop: str
    out_of_place: Measured
    in_place: Measured | None


@dataclass
class NcclRun:
    """One run of a test: what the file says about it and its rows."""

    path: str
    tool: str  # nccl-tests or rccl-tests
    op: str  # shardlab's name: all_reduce, ...
    op_from: str  # where the collective was read: binary name, file name or columns
    ranks: int
    hosts: list[str]  # in rank order, each once
    device_kinds: list[str]
    header: dict = field(default_factory=dict)  # nThread, nGpus, minBytes, ... as printed
    library_version: str | None = None
    rows: list[Row] = field(default_factory=list)
    # wrong values the run's closing line counts (nccl-tests' "# Out of bounds values : N
    # FAILED", -J's out_of_bounds.count); None where the file does not say
    out_of_bounds: int | None = None

    @property
    def nodes(self) -> int:
        return len(self.hosts)

    @property
    def dtype(self) -> str:
        return DTYPES.get(self.rows[0].type, self.rows[0].type) if self.rows else "unknown"


def number(tok, path, line: int | None, what: str) -> float:
    try:
        return float(tok)
    except (TypeError, ValueError, OverflowError):
        raise ImportFormatError(path, line, f"{what} {tok!r} is not a number") from None


def wrong_count(raw, path, line: int | None, field: str, whole: bool, moved: bool) -> int | None:
    """A row's count of wrong elements (None: not checked). Older versions print the largest
    error instead (the ``error`` column, ``whole=False``): a fraction below 1 is no wrong element."""
    if raw is None or raw in ("N/A", "-"):
        return None
    x = number(raw, path, line, field)
    if moved:
        check(x >= 0 and (x.is_integer() or not whole), path, line, field, raw, WRONG_ALLOWED)
    return int(x) if math.isfinite(x) else None


def check_measured(m: Measured, raw: dict, path, line: int | None) -> None:
    """Refuse a measurement no run prints, for a row that becomes a point: ``raw`` maps
    ``time``, ``algbw`` and ``busbw`` to the field's name in the file and its value as written."""
    for key, x, low, high, allowed in (
        ("time", m.time_s, MIN_TIME_S, MAX_TIME_S, TIME_US_ALLOWED),
        ("algbw", m.algbw_Bps, 0, MAX_BANDWIDTH_Bps, BANDWIDTH_GBPS_ALLOWED),
        ("busbw", m.busbw_Bps, 0, MAX_BANDWIDTH_Bps, BANDWIDTH_GBPS_ALLOWED),
    ):
        check(low <= x <= high, path, line, *raw[key], allowed)  # NaN fails every comparison


def check_size(size_bytes, count, type_name: str, path, line: int | None, where: str = "") -> tuple[int, int]:
    """A row's size and count as whole numbers in range, the size a whole number of elements of
    its type (where the type is one nccl-tests names); ``where`` prefixes the fields' names."""
    size, n = as_whole(size_bytes), as_whole(count)
    check(size is not None and 0 <= size <= MAX_SIZE_BYTES, path, line, f"{where}size", size_bytes, SIZE_ALLOWED)
    check(n is not None and 0 <= n <= MAX_SIZE_BYTES, path, line, f"{where}count", count, COUNT_ALLOWED)
    item = ITEM_BYTES.get(type_name)
    if item:
        whole = f"a whole number of {type_name} elements ({item} bytes each)"
        check(size % item == 0, path, line, f"{where}size", size_bytes, whole)
    return size, n


def check_type(type_name: str, path, line: int | None, field: str = "type") -> str:
    """The dtype of a row that becomes a point: refused where the book has no element size for
    it (uint64, or a table printed without its type column), which the report needs."""
    allowed = f"a type the model has an element size for: {', '.join(MODELLED_TYPES)}"
    check(type_name in MODELLED_TYPES, path, line, field, type_name, allowed)
    return DTYPES[type_name]


def check_repeats(rows: list[Row], path, json: bool = False) -> None:
    """Refuse a size measured twice in one run (a pasted row, or nccl-tests ``-d all`` / ``-o
    all``, which print every type or reduction in one table): a sweep holds one point per
    collective, size and run. ``json``: the rows are -J's ``results[i]``, not lines."""
    seen: dict[int, Row] = {}
    for r in rows:
        first = seen.setdefault(r.S_bytes, r)
        if first is r or r.S_bytes == 0:  # size 0 is never a point
            continue
        differ = f" (types {first.type} and {r.type})" if first.type != r.type else ""
        differ += f" (reductions {first.redop} and {r.redop})" if first.redop != r.redop else ""
        field, before = ("size", f"line {first.line}")
        if json:
            field, before = f"results[{r.line}].size", f"results[{first.line}]"
        raise ImportFormatError(
            path,
            None if json else r.line,
            f"{field}={r.S_bytes} again, first at {before}{differ}: a sweep holds one point per collective, size "
            "and run; keep one of the rows (or one type and reduction per file)",
        )


def op_from_file(path: Path, lines: list[str], rows: list[Row], ranks: int) -> tuple[str, str]:
    """The collective, and where it was read (module docstring). ``lines`` are the run's own:
    from the end of the previous run in the file to this run's end."""
    for text in lines:  # nccl-tests >= 2.14 names it: "# Collective test starting: all_reduce_perf"
        m = _STARTING.search(text)
        if m:
            return m.group(1), "binary name"
    for text in lines:  # else the command line echoed before the run
        m = _TEST_NAME.search(text)
        if m and "concluded" not in text:  # "# Collective test concluded: ..." closes the run before
            return m.group(1), "binary name"
    m = _FILE_NAME.search(path.name)
    if m:
        key = m.group(1).lower().replace("_", "")
        return {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter"}.get(
            key, "alltoall"
        ), "file name"
    big = [r for r in rows if r.out_of_place.algbw_Bps > 0]
    if big and ranks > 1 and big[0].redop not in ("none", "-"):
        ratio = big[-1].out_of_place.busbw_Bps / big[-1].out_of_place.algbw_Bps
        for name in ("all_reduce", "reduce_scatter"):
            if abs(ratio / BY_OP[name].busbw_factor(ranks) - 1) < 0.02:
                return name, "columns (busbw / algbw and the reduction)"
    raise ImportFormatError(
        path,
        None,
        "cannot tell which collective this table measured (no *_perf binary name in it, none in the file "
        "name, and its columns fit several); name the file after it (all_gather.txt, alltoall.log, ...) or pass --op",
    )


def run_points(run: NcclRun, index: int = 0):
    """One :class:`~analysis.importers.sweep_writer.ImportedPoint` per row that moved bytes
    (nccl-tests' size-0 rows time an empty launch): the out-of-place time is the point's, the
    in-place one stays in ``imported``."""

    def wrong(m: Measured | None) -> int:
        return (m.wrong or 0) if m is not None else 0

    # a closing line that counts wrong values no row owns leaves every size of the run in doubt
    unowned = bool(run.out_of_bounds) and not any(wrong(r.out_of_place) or wrong(r.in_place) for r in run.rows)
    out = []
    for r in run.rows:
        if r.S_bytes <= 0:
            continue
        check_error = None
        if wrong(r.in_place) and not wrong(r.out_of_place):
            check_error = f"{run.tool} counted {r.in_place.wrong} wrong elements at this size, in place"
        elif unowned:
            check_error = (
                f"{run.tool} found wrong values in this run ({run.out_of_bounds} by its out-of-bounds count) and no "
                "row says at which size"
            )

        def cols(m: Measured | None) -> dict | None:
            return (
                None
                if m is None
                else {"time_s": m.time_s, "algbw_Bps": m.algbw_Bps, "busbw_Bps": m.busbw_Bps, "wrong": m.wrong}
            )

        origin = {
            "file": run.path,
            "run": index,  # the run's place in its file (a log may hold several)
            "line": r.line,
            "op_from": run.op_from,
            "library_version": run.library_version,
            "header": run.header,
            "size_convention": "nccl-tests' size is S (the bytes algbw divides): V for all_gather, reduce_scatter "
            "and all_reduce, V / ranks for alltoall",
            "bandwidth_definition": "algbw = S / time; busbw = algbw * factor(ranks), nccl-tests' *GetBw",
            "type": r.type,
            "redop": r.redop,
            "out_of_place": cols(r.out_of_place),
            "in_place": cols(r.in_place),
        }
        out.append(
            ImportedPoint(
                op=run.op,
                dtype=check_type(r.type, run.path, r.line),
                V_bytes=r.S_bytes / BY_OP[run.op].S_over_V(run.ranks),
                S_bytes=r.S_bytes,
                time_s=r.out_of_place.time_s,
                ranks=run.ranks,
                nodes=run.nodes,
                hosts=run.hosts,
                device_kind=run.device_kinds[0] if run.device_kinds else "unknown",
                backend="gpu",
                tool=run.tool,
                origin=origin,
                wrong=r.out_of_place.wrong,
                check_error=check_error,
            )
        )
    return out
