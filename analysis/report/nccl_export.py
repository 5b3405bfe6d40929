"""A sweep's results as nccl-tests writes them, one pair of files per collective family in
``SWEEP/nccl-tests/``: ``<family>.json`` in the layout of nccl-tests' ``-J FILE`` report
(``src/util.cu``: ``version``, ``start_time``, ``args``, ``config`` with ``devices``, ``results``
of ``{size, count, type, redop, root, out_of_place{time, alg_bw, bus_bw, nwrong}, in_place}``,
``average_bus_bandwidth``) and ``<family>.txt``, the table as its binaries print it, closed by
``# Avg bus bandwidth``. Tools written for nccl-tests (jq scripts, dashboards, shardlab's own
``import nccl-tests``) then read a shardlab sweep unchanged.

Units are nccl-tests': time in us, bandwidths in GB/s (10^9 B/s), sizes in bytes of S; only the
out-of-place columns are filled (shardlab measures one buffer layout): ``in_place`` is null in
the JSON, and the text's rows stop after the out-of-place ``#wrong``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from analysis.report.nccl_table import NCCL_TYPES, avg_busbw_line, nccl_count
from analysis.runs.record import Result
from analysis.runs.rundir import SWEEP_NAME, write_json_atomic, write_text_atomic
from analysis.runs.sweep_id import sweep_identity

EXPORT_DIR = "nccl-tests"  # beside report/, in the sweep's folder
JSON_VERSION = 1  # nccl-tests' own "version" key of its -J report
PERF_NAMES = {"all_to_all": "alltoall"}  # nccl-tests' binary names where they differ from shardlab's ops
# "# Rank" lines the table lists: a group past this many lists its first ranks and its last (so
# a reader that counts ranks as the highest listed plus one, as shardlab's import does, counts
# them all) and says what it left out in one line, whatever a group size says
LISTED_RANKS = 64


def family_slug(family: str) -> str:
    """A file name for a family: ``all_gather X float32`` -> ``all_gather_X_float32``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(family)).strip("_") or "family"


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f else None


def _size(row) -> int:
    s = _num(row.get("S_bytes"))
    return int(s if s is not None else row["V_bytes"])


def nccl_json(g: pd.DataFrame, start_time: str | None, command: str | None, host: str = "localhost") -> dict:
    """One family's rows (a sweep's timed points, sorted by V) as an nccl-tests ``-J`` report;
    ``host``: the machine the sweep ran on."""
    g = g.sort_values("V_bytes")
    first = g.iloc[0]
    ranks = int(first["group_size"])
    results = []
    for r in g.to_dict("records"):
        size = _size(r)
        t, alg, bus = (_num(r.get(k)) for k in ("time_s", "algbw_Bps", "busbw_Bps"))
        results.append(
            {
                "size": size,
                "count": nccl_count(r["op"], size, r["group_size"], r["dtype"]),
                "type": NCCL_TYPES.get(r["dtype"], r["dtype"]),
                "redop": "sum" if r["op"] in ("all_reduce", "reduce_scatter") else "none",
                "root": -1,
                "out_of_place": {
                    "time": None if t is None else t * 1e6,
                    "alg_bw": None if alg is None else alg / 1e9,
                    "bus_bw": None if bus is None else bus / 1e9,
                    # devices whose result differed from NumPy's; unchecked points have none to give
                    "nwrong": 0 if r.get("checked") is True else None,
                },
                "in_place": None,
                "experiment_name": str(r["op"]),
            }
        )
    bw = pd.to_numeric(g["busbw_Bps"], errors="coerce").dropna()
    sizes = [x["size"] for x in results]
    return {
        "version": JSON_VERSION,
        "start_time": start_time,
        # the importer finds the collective by its *_perf binary name; the command follows it
        "args": [f"shardlab:{PERF_NAMES.get(first['op'], first['op'])}_perf", *(command.split() if command else [])],
        "env": [],
        "nccl_version": None,
        "config": {
            "nthreads": 1,
            "ngpus": ranks,  # one process record holding the group's devices (JAX drives them all)
            "minimum_bytes": min(sizes),
            "maximum_bytes": max(sizes),
            "devices": [{"rank": 0, "group": 0, "hostname": host, "device_info": _kind(first)}],
        },
        "results": results,
        "average_bus_bandwidth": float(bw.mean() / 1e9) if len(bw) else None,
    }


def _kind(row) -> str:
    kind = row.get("device_kind")
    return str(kind) if isinstance(kind, str) and kind else str(row.get("hardware"))


def _fmt(v: float | None, width: int) -> str:
    if v is None:
        return "N/A".rjust(width)
    return f"{v:{width}.2f}" if v < 1e5 else f"{v:{width}.0f}"


def _rank_lines(device: dict, ranks: int) -> list[str]:
    """The ``# Rank`` lines of ``ranks`` devices of one process: at most :data:`LISTED_RANKS`
    of them, the last rank always among them, and a line for those left out."""
    host, kind = device["hostname"], device["device_info"]

    def line(i: int) -> str:
        return f"#  Rank {i:2d} Group  0 Pid      0 on {host} device {i:2d} [0000:00:00] {kind}"

    if ranks <= LISTED_RANKS:
        return [line(i) for i in range(ranks)]
    shown = LISTED_RANKS - 1
    left_out = f"#  ... ranks {shown} to {ranks - 2} ({ranks - 1 - shown} of them) on the same host, not listed"
    return [*(line(i) for i in range(shown)), left_out, line(ranks - 1)]


def nccl_text(doc: dict, g: pd.DataFrame) -> str:
    """The table of :func:`nccl_json`'s report as nccl-tests prints it, closed by its ``# Avg bus
    bandwidth`` line. Rows end after the out-of-place columns: shardlab has no in-place time, and
    a row cut there is what nccl-tests' readers (shardlab's own) take as out-of-place only."""
    lines = [
        f"# Collective test starting: {doc['args'][0].split(':', 1)[1]}",
        f"# shardlab sweep started {doc['start_time']}",
        "#",
        "# Using devices",
        *(ln for d in doc["config"]["devices"][:1] for ln in _rank_lines(d, doc["config"]["ngpus"])),
        "#",
        "#" + " " * 62 + "out-of-place                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
        "busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  "
        "(GB/s)       ",
    ]
    for r in doc["results"]:
        o = r["out_of_place"]
        wrong = "N/A" if o["nwrong"] is None else str(o["nwrong"])
        lines.append(
            f"{r['size']:12d}  {r['count']:12d}  {r['type']:>8s}  {r['redop']:>6s}  {r['root']:6d}  "
            f"{_fmt(o['time'], 7)}  {_fmt(o['alg_bw'], 6)}  {_fmt(o['bus_bw'], 6)}  {wrong:>5s}"
        )
    lines += ["# Out of bounds values : 0 OK", avg_busbw_line(g), "#"]
    return "\n".join(lines) + "\n"


def write_nccl_exports(root: str | Path, points: pd.DataFrame, results: list[Result] | None = None) -> list[Path]:
    """Write ``<family>.json`` and ``<family>.txt`` per family of ``points`` (a sweep's ok target
    rows with a time) into ``root/nccl-tests/``; return the JSON paths."""
    root = Path(root)
    timed = points[pd.to_numeric(points["time_s"], errors="coerce").notna()] if len(points) else points
    if not len(timed):
        return []
    _, start = sweep_identity(root, results)
    try:
        command = json.loads((root / SWEEP_NAME).read_text()).get("command")
    except (OSError, ValueError, AttributeError):
        command = None
    procs = [r.process for r in results or [] if r.process is not None]
    host = str(procs[0].host or "localhost") if procs else "localhost"
    out = root / EXPORT_DIR
    out.mkdir(exist_ok=True)
    written = []
    for fam, g in timed.groupby("family", sort=False):
        g = g.sort_values("V_bytes")
        doc = nccl_json(g, start, command, host)
        path = out / f"{family_slug(fam)}.json"
        write_json_atomic(path, doc)
        write_text_atomic(path.with_suffix(".txt"), nccl_text(doc, g))
        written.append(path)
    return written
