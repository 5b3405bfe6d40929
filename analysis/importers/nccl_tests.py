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

This module reads the text; what a run holds, the checks its rows pass and the points it gives
(shared with the ``-J`` JSON reader) are :mod:`analysis.importers.nccl_tests_rows`.
"""

from __future__ import annotations

import re
from pathlib import Path

from analysis.importers import ImportFormatError
from analysis.importers.limits import (
    MAX_POINTS,
    MAX_RANKS,
    POINTS_ALLOWED,
    RANKS_ALLOWED,
    as_whole,
    check,
    checked_name,
    small,
)
from analysis.importers.nccl_tests_rows import (
    OPS,
    OTHER_TESTS,
    Measured,
    NcclRun,
    Row,
    check_measured,
    check_repeats,
    check_size,
    number,
    op_from_file,
    wrong_count,
)

MAX_HEADER_CHARS = 4096  # a "# nThread ..." line is about 200 characters; past this it is not one

_RANK = re.compile(
    r"^#\s*Rank\s+(\d+)(?:\s+Group\s+\d+)?\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
_VERSION = re.compile(r"^#?\s*(NCCL|RCCL) version\s*:?\s+(\S+)", re.I)
_LOG_LINE = re.compile(r"NCCL (INFO|WARN)|RCCL (INFO|WARN)|^\[\d+,\d+\]<std")
_OUT_OF_BOUNDS = re.compile(r"Out of bounds values\s*:\s*([0-9]+)?\s*(FAILED)?")


def _measured(toks: list[str], cols: list[str], path, line: int, label: str, moved: bool) -> Measured:
    get = dict(zip(cols, toks))
    for key in ("time", "algbw", "busbw"):
        if key not in get:
            raise ImportFormatError(
                path, line, f"the table's header has no {key!r} column (its measurement columns: {' '.join(cols)!r})"
            )
    m = Measured(
        time_s=number(get["time"], path, line, "time") * 1e-6,
        algbw_Bps=number(get["algbw"], path, line, "algbw") * 1e9,
        busbw_Bps=number(get["busbw"], path, line, "busbw") * 1e9,
        wrong=wrong_count(get.get("#wrong", get.get("error")), path, line, "#wrong", "#wrong" in get, moved),
    )
    if moved:
        check_measured(m, {k: (f"{label} {k}", get[k]) for k in ("time", "algbw", "busbw")}, path, line)
    return m


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
        number(get["count"], path, i, "count")  # a word: the message the table's other columns give
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
        name, where = (op, "--op") if op else op_from_file(path, self.lines[self.began : end_line], rows, n)
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
