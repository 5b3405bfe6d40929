"""nccl-tests and rccl-tests output, read as they print it.

One run prints a header (``# nThread 1 nGpus 1 minBytes ...``), one ``# Rank r ... on HOST
device d [bus] KIND`` line per rank under ``# Using devices``, the column header (``size count
type redop root time algbw busbw #wrong``, once for out-of-place and once for in-place; older
versions have no ``root`` and say ``error``), one row per size, and closes with ``# Out of
bounds values`` / ``# Avg bus bandwidth``. The table never names its collective: it is read
from the binary's name where the file shows it (``all_reduce_perf``), else from the file's
name, else from the columns (a reduction whose busbw/algbw is 2(n-1)/n is an AllReduce, (n-1)/n
a ReduceScatter).

Units and conventions (nccl-tests ``src/common.cu`` and ``src/*.cu``'s ``*GetBw``): ``size``
is S, the bytes algbw divides - the book's V for AllGather, ReduceScatter and AllReduce, V / n
for AllToAll (the per-rank buffer; :mod:`analysis.book.collectives`); ``time`` in
microseconds, ``algbw = S / time`` and ``busbw = algbw * factor(n)`` in GB/s (1e9 B/s).
"""

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
    MAX_POINTS,
    MAX_RANKS,
    MAX_SIZE_BYTES,
    MAX_TIME_S,
    MIN_TIME_S,
    POINTS_ALLOWED,
    RANKS_ALLOWED,
    SIZE_ALLOWED,
    TIME_US_ALLOWED,
    WRONG_ALLOWED,
    MAX_BANDWIDTH_Bps,
    as_whole,
    check,
    checked_name,
    small,
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
MAX_HEADER_CHARS = 4096  # a "# nThread ..." line is about 200 characters; past this it is not one

_RANK = re.compile(
    r"^#\s*Rank\s+(\d+)(?:\s+Group\s+\d+)?\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
_TEST_NAME = re.compile(
    r"\b(all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce|sendrecv|scatter|gather|hypercube)_perf"
)
_FILE_NAME = re.compile(r"(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|alltoall)", re.I)
_VERSION = re.compile(r"^#?\s*(NCCL|RCCL) version\s*:?\s+(\S+)", re.I)
_STARTING = re.compile(r"Collective test starting:\s*(\w+?)_perf")
_LOG_LINE = re.compile(r"NCCL (INFO|WARN)|RCCL (INFO|WARN)|^\[\d+,\d+\]<std")
_OUT_OF_BOUNDS = re.compile(r"Out of bounds values\s*:\s*([0-9]+)?\s*(FAILED)?")


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


def _num(tok, path, line: int | None, what: str) -> float:
    try:
        return float(tok)
    except (TypeError, ValueError, OverflowError):
        raise ImportFormatError(path, line, f"{what} {tok!r} is not a number") from None


def _wrong(raw, path, line: int | None, field: str, whole: bool, moved: bool) -> int | None:
    """A row's count of wrong elements (None: not checked). Older versions print the largest
    error instead (the ``error`` column, ``whole=False``): a fraction below 1 is no wrong element."""
    if raw is None or raw in ("N/A", "-"):
        return None
    x = _num(raw, path, line, field)
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


def _measured(toks: list[str], cols: list[str], path, line: int, label: str, moved: bool) -> Measured:
    get = dict(zip(cols, toks))
    for key in ("time", "algbw", "busbw"):
        if key not in get:
            raise ImportFormatError(
                path, line, f"the table's header has no {key!r} column (its measurement columns: {' '.join(cols)!r})"
            )
    m = Measured(
        time_s=_num(get["time"], path, line, "time") * 1e-6,
        algbw_Bps=_num(get["algbw"], path, line, "algbw") * 1e9,
        busbw_Bps=_num(get["busbw"], path, line, "busbw") * 1e9,
        wrong=_wrong(get.get("#wrong", get.get("error")), path, line, "#wrong", "#wrong" in get, moved),
    )
    if moved:
        check_measured(m, {k: (f"{label} {k}", get[k]) for k in ("time", "algbw", "busbw")}, path, line)
    return m


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


def _op_from_file(path: Path, lines: list[str], rows: list[Row], ranks: int) -> tuple[str, str]:
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


def _out_of_bounds(line: str) -> int | None:
    """The wrong values a run's ``# Out of bounds values : N OK|FAILED`` line counts (None
    where it says none; 1 where it says FAILED without a number)."""
    m = _OUT_OF_BOUNDS.search(line)
    if m is None or not (m.group(1) or m.group(2)):
        return None
    n = as_whole(m.group(1) or "0")
    n = 1 if n is None else n  # digits past a float's range: many
    return max(n, 1) if m.group(2) else n


class _TextReader:
    """Where :func:`parse_nccl_tests` is in the file: the run being read (its header, ranks
    and table so far) and the runs read before it."""

    def __init__(self, text: str, path: Path, op: str | None):
        self.path, self.op = path, op
        self.lines = text.splitlines()
        self.tool = "rccl-tests" if re.search(r"rccl|RCCL|AMD Instinct|AMD Radeon|\bMI\d{3}", text) else "nccl-tests"
        self.runs: list[NcclRun] = []
        self.header: dict = {}
        self.ranks: dict[int, tuple[str, str]] = {}
        self.version = None
        self.cols: list[str] | None = None
        self.in_first = True  # whether the first group of columns is out-of-place
        self.group_line = ""
        self.rows: list[Row] = []
        self.start = 0
        self.last = 0
        self.began = 0  # where this run's lines begin: after the previous run's table
        self.read = 0  # rows read in the whole file, against MAX_POINTS

    def line(self, i: int, s: str) -> None:
        """Read the stripped, non-empty line ``s`` (line number ``i``)."""
        path = self.path
        if s.startswith("# nThread") or s.startswith("nThread"):
            if self.cols is not None and self.rows:
                raise ImportFormatError(path, self.last, "the table stops here, without its '# Avg bus bandwidth' line")
            pairs = re.findall(r"([A-Za-z][\w ]*?):?\s+(-?[\w.()]+)(?=\s|$)", s[:MAX_HEADER_CHARS].lstrip("# "))
            self.header = small(dict(pairs))
            self.ranks, self.cols, self.rows, self.start = {}, None, [], i
            return
        m = _RANK.match(s)
        if m:
            rank = as_whole(m.group(1))
            allowed = f"a rank below {MAX_RANKS}: {RANKS_ALLOWED}"
            check(rank is not None and rank < MAX_RANKS, path, i, "# Rank", m.group(1), allowed)
            host, kind = (checked_name(m.group(k), path, i, what) for k, what in ((2, "host"), (5, "device")))
            self.ranks[rank] = (host, kind)
            return
        m = _VERSION.match(s)
        if m:
            self.version = checked_name(f"{m.group(1).upper()} {m.group(2)}", path, i, "version")
            return
        if s.startswith("#"):
            self._comment(i, s)
            return
        if self.cols is None:
            return  # prose, commands and logs around the run
        if _LOG_LINE.search(s):
            return  # NCCL_DEBUG=INFO lines printed between rows
        self.rows.append(self._row(i, s))
        self.last = i

    def _comment(self, i: int, s: str) -> None:
        """A ``#`` line: the column groups, the column header, or the run's closing line."""
        body = s.lstrip("#").split()
        if "out-of-place" in body or "in-place" in body:
            self.group_line = s
        elif body[:2] == ["size", "count"] and "time" in body:
            self.cols = body
            g = self.group_line
            self.in_first = (
                g.find("in-place") < 0 or g.find("out-of-place") < g.find("in-place") or g.find("out-of-place") < 0
            )
            self.rows, self.start = [], i
        elif (s.startswith("# Out of bounds") or s.startswith("# Avg bus bandwidth")) and self.cols is not None:
            if self.rows:
                self._close(i, _out_of_bounds(s))
                self.began = i
            self.cols, self.rows = None, []

    def _row(self, i: int, s: str) -> Row:
        """A table row, each field checked (a row that moved bytes, as a point's)."""
        path, cols = self.path, self.cols
        toks = s.split()
        first = cols.index("time")
        groups = cols.count("time")  # out-of-place and in-place, or only one of them
        half = (len(cols) - first) // groups
        # a row starts with its size; one that is no whole number ("1.5", "1²") is check_size's to refuse
        if not ("0" <= toks[0][0] <= "9") or len(toks) not in (len(cols), first + half):
            raise ImportFormatError(
                path,
                i,
                f"a table row with {len(toks)} fields where the header has {len(cols)}: {s[:60]!r} (cut short?)",
            )
        self.read += 1
        check(self.read <= MAX_POINTS, path, i, "number of rows", self.read, POINTS_ALLOWED)
        get = dict(zip(cols[:first], toks[:first]))
        type_name = checked_name(get.get("type", "?"), path, i, "type")
        _num(get["count"], path, i, "count")  # a word: the message the table's other columns give
        size, count = check_size(get["size"], get["count"], type_name, path, i)
        names = cols[first : first + half]
        # the labels as the group line prints them; both are checked in a row that becomes a point
        labels = ("out-of-place", "in-place") if self.in_first else ("in-place", "out-of-place")
        a = _measured(toks[first : first + half], names, path, i, labels[0], size > 0)
        b = (
            _measured(toks[first + half :], names, path, i, labels[1], size > 0)
            if groups > 1 and len(toks) == len(cols)
            else None
        )
        oop, inp = (a, b) if self.in_first else (b, a)
        if oop is None:  # only an in-place column printed: it is the point's time
            oop, inp = a, None
        redop = checked_name(get.get("redop", "none"), path, i, "redop")
        return Row(i, size, count, type_name, redop, oop, inp)

    def _close(self, end_line: int, out_of_bounds: int | None = None) -> None:
        """The run whose table ends at ``end_line``, checked and named, appended to the runs."""
        path, op, rows, ranks = self.path, self.op, self.rows, self.ranks
        if not rows:
            raise ImportFormatError(path, end_line, "a results table without a row")
        hosts = list(dict.fromkeys(h for _, (h, _) in sorted(ranks.items())))
        if not ranks:
            raise ImportFormatError(path, self.start, "no '# Rank ... on HOST device ...' lines before the table")
        check_repeats(rows, path)
        n = max(ranks) + 1
        name, where = (op, "--op") if op else _op_from_file(path, self.lines[self.began : end_line], rows, n)
        key = name.replace("-", "_").lower()
        key = "alltoall" if key in ("all_to_all", "alltoall") else key
        if key in OTHER_TESTS:
            raise ImportFormatError(
                path,
                self.start,
                f"{key}_perf: shardlab models all_gather, reduce_scatter, all_reduce and alltoall only",
            )
        if key not in OPS:
            raise ImportFormatError(path, None, f"--op={op!r}: one of {', '.join(OPS)}")
        kinds = list(dict.fromkeys(k for _, (_, k) in sorted(ranks.items())))
        self.runs.append(
            NcclRun(
                str(path), self.tool, OPS[key], where, n, hosts, kinds, dict(self.header), self.version, list(rows),
                out_of_bounds,
            )
        )  # fmt: skip

    def finish(self) -> list[NcclRun]:
        """The runs read, once the file has ended: ImportFormatError for a table cut short or none at all."""
        if self.cols is not None and self.rows:
            raise ImportFormatError(
                self.path, self.last, "the table stops here, without its '# Avg bus bandwidth' line (cut short?)"
            )
        if not self.runs:
            raise ImportFormatError(
                self.path, None, "no nccl-tests / rccl-tests results table (a '# size count type ...' header and rows)"
            )
        return self.runs


def parse_nccl_tests(text: str, path: str | Path = "<text>", op: str | None = None) -> list[NcclRun]:
    """The runs in one nccl-tests / rccl-tests output (usually one). ``op`` (``all_gather``,
    ``alltoall``, ...) overrides what the file says. Raises :class:`ImportFormatError` naming
    the file and line for anything that is not such output or is cut short."""
    reader = _TextReader(text, Path(path), op)
    for i, raw in enumerate(reader.lines, start=1):
        s = raw.strip()
        if s:
            reader.line(i, s)
    return reader.finish()


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
