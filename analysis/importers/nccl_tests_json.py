"""nccl-tests' ``-J FILE`` JSON report (``src/util.cu``), read into the same runs as its text
output (:mod:`analysis.importers.nccl_tests`), with the same bounds on every number."""

from __future__ import annotations

import json
from pathlib import Path

from analysis.importers import ImportFormatError
from analysis.importers.limits import (
    MAX_POINTS,
    MAX_RANKS,
    MISSING,
    POINTS_ALLOWED,
    RANKS_ALLOWED,
    as_whole,
    check,
    checked_name,
    small,
)
from analysis.importers.nccl_tests_rows import (
    OPS,
    Measured,
    NcclRun,
    Row,
    check_measured,
    check_repeats,
    check_size,
    check_type,
    number,
    op_from_file,
    wrong_count,
)


def _count(cfg: dict, key: str, path) -> int:
    """``config.nthreads`` / ``config.ngpus``: a whole number from 1 (1 where the file has none)."""
    raw = cfg.get(key)
    n = 1 if raw is None else as_whole(raw)
    allowed = f"a whole number from 1 to {MAX_RANKS} (over twice the largest cluster built)"
    check(n is not None and 1 <= n <= MAX_RANKS, path, None, f"config.{key}", raw, allowed)
    return n


def _measured(m, where: str, path, moved: bool) -> Measured | None:
    """One of a result's measurements (None where the file has none); ``where`` names it
    (``results[3].out_of_place``)."""
    if not isinstance(m, dict):
        return None
    key = "time" if "time" in m else "cpu_time"
    if m.get(key) is None or "alg_bw" not in m or "bus_bw" not in m:
        raise ImportFormatError(path, None, f"a result without time, alg_bw and bus_bw: {m!r}"[:160])
    got = Measured(
        number(m[key], path, None, f"{where}.{key}") * 1e-6,
        number(m["alg_bw"], path, None, f"{where}.alg_bw") * 1e9,
        number(m["bus_bw"], path, None, f"{where}.bus_bw") * 1e9,
        wrong_count(m.get("nwrong"), path, None, f"{where}.nwrong", True, moved),
    )
    if moved:
        names = {"time": key, "algbw": "alg_bw", "busbw": "bus_bw"}
        check_measured(got, {k: (f"{where}.{n}", m[n]) for k, n in names.items()}, path, None)
    return got


def _document(text: str, path: Path) -> dict:
    """The report as a JSON object holding ``config`` and ``results``, or ImportFormatError."""
    try:
        doc = json.loads(text)
    except RecursionError:  # brackets nested thousands deep: no report nccl-tests writes
        raise ImportFormatError(path, None, "not an nccl-tests JSON report (nested too deeply)") from None
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        raise ImportFormatError(
            path, line, f"not a whole nccl-tests JSON report ({getattr(exc, 'msg', exc)})"
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list) or not isinstance(doc.get("config"), dict):
        raise ImportFormatError(path, None, "a JSON file without nccl-tests' 'config' and 'results'")
    return doc


def _rows(results: list, path: Path) -> list[Row]:
    """One :class:`Row` per ``results[i]``, each checked as the text reader checks a table row;
    a size measured twice refused."""
    rows = []
    for i, r in enumerate(results):
        if not isinstance(r, dict):
            raise ImportFormatError(path, None, f"results[{i}] is not an object: {r!r}"[:160])
        type_name = checked_name(r.get("type"), path, None, f"results[{i}].type")
        count = 0 if r.get("count") is None else r["count"]  # older reports have none
        size, count = check_size(r.get("size", MISSING), count, type_name, path, None, f"results[{i}].")
        oop = _measured(r.get("out_of_place"), f"results[{i}].out_of_place", path, size > 0)
        inp = _measured(r.get("in_place"), f"results[{i}].in_place", path, size > 0)
        if oop is None and inp is None:
            raise ImportFormatError(path, None, f"results[{i}] has neither out_of_place nor in_place")
        if size > 0:
            check_type(type_name, path, None, f"results[{i}].type")
        redop = checked_name(r.get("redop"), path, None, f"results[{i}].redop")
        rows.append(Row(i, size, count, type_name, redop, oop or inp, inp))
    if not rows:
        raise ImportFormatError(path, None, "no results in it")
    check_repeats(rows, path, json=True)
    return rows


def parse_nccl_tests_json(text: str, path: str | Path = "<json>", op: str | None = None) -> list[NcclRun]:
    """The run in an nccl-tests ``-J FILE`` JSON report (``src/util.cu``: ``args``, ``config``
    with ``devices`` - one record per process, each with ``nthreads * ngpus`` ranks - and
    ``results``, each ``{size, count, type, redop, root, out_of_place, in_place}`` with ``time``
    (us), ``alg_bw`` and ``bus_bw`` (GB/s) and ``nwrong``; ``out_of_bounds.count``, the wrong
    values of the whole run). ImportFormatError as the text reader, naming the field
    (``results[3].size``)."""
    path = Path(path)
    doc = _document(text, path)
    cfg = doc["config"]
    listed = cfg.get("devices")
    devices = [d for d in listed if isinstance(d, dict)] if isinstance(listed, list) else []
    if not devices:
        raise ImportFormatError(path, None, "config.devices is empty: no ranks to read")
    per_proc = _count(cfg, "nthreads", path) * _count(cfg, "ngpus", path)
    ranks = len(devices) * per_proc
    check(ranks <= MAX_RANKS, path, None, "ranks (device records x nthreads x ngpus)", ranks, RANKS_ALLOWED)
    check(len(doc["results"]) <= MAX_POINTS, path, None, "number of results", len(doc["results"]), POINTS_ALLOWED)
    rows = _rows(doc["results"], path)
    bounds = doc.get("out_of_bounds")
    bounds = bounds if isinstance(bounds, dict) else {}
    wrong = wrong_count(bounds.get("count"), path, None, "out_of_bounds.count", True, True)
    if bounds.get("okay") is False:  # the run's own verdict, whatever its count says
        wrong = max(wrong or 0, 1)
    args = doc.get("args")
    binary = " ".join(str(a) for a in args) if isinstance(args, list) else ""
    name, where = (op, "--op") if op else op_from_file(path, [binary], rows, ranks)
    key = "alltoall" if name.replace("-", "_").lower() in ("all_to_all", "alltoall") else name.lower()
    if key not in OPS:
        raise ImportFormatError(
            path, None, f"{key}: shardlab models all_gather, reduce_scatter, all_reduce and alltoall only"
        )
    hosts, kinds = (
        list(dict.fromkeys(checked_name(d.get(field), path, None, f"config.devices[].{field}") for d in devices))
        for field in ("hostname", "device_info")
    )
    version = doc.get("nccl_version")
    version = None if version is None else checked_name(f"NCCL {version}", path, None, "nccl_version")
    return [
        NcclRun(
            str(path),
            "nccl-tests",
            OPS[key],
            where,
            ranks,
            hosts,
            kinds,
            small(dict(cfg, devices=len(devices))),
            version,
            rows,
            wrong,
        )
    ]
