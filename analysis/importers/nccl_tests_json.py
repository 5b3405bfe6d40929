"""nccl-tests' ``-J FILE`` JSON report (``src/util.cu``), read into the same runs as its text
output (:mod:`analysis.importers.nccl_tests`)."""

from __future__ import annotations

from pathlib import Path

from analysis.importers import ImportFormatError
from analysis.importers.nccl_tests import OPS, Measured, NcclRun, Row, _op_from_file


def parse_nccl_tests_json(text: str, path: str | Path = "<json>", op: str | None = None) -> list[NcclRun]:
    """The run in an nccl-tests ``-J FILE`` JSON report (``src/util.cu``: ``args``, ``config``
    with ``devices`` - one record per process, each with ``nthreads * ngpus`` ranks - and
    ``results``, each ``{size, count, type, redop, root, out_of_place, in_place}`` with ``time``
    (us), ``alg_bw`` and ``bus_bw`` (GB/s) and ``nwrong``). ImportFormatError as the text reader."""
    import json

    path = Path(path)
    try:
        doc = json.loads(text)
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        raise ImportFormatError(
            path, line, f"not a whole nccl-tests JSON report ({getattr(exc, 'msg', exc)})"
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list) or not isinstance(doc.get("config"), dict):
        raise ImportFormatError(path, None, "a JSON file without nccl-tests' 'config' and 'results'")
    cfg = doc["config"]
    devices = [d for d in cfg.get("devices") or [] if isinstance(d, dict)]
    if not devices:
        raise ImportFormatError(path, None, "config.devices is empty: no ranks to read")
    per_proc = int(cfg.get("nthreads") or 1) * int(cfg.get("ngpus") or 1)

    def measured(m) -> Measured | None:
        if not isinstance(m, dict):
            return None
        t = m.get("time", m.get("cpu_time"))
        try:
            return Measured(
                float(t) * 1e-6,
                float(m["alg_bw"]) * 1e9,
                float(m["bus_bw"]) * 1e9,
                None if m.get("nwrong") is None else int(float(m["nwrong"])),
            )
        except (KeyError, TypeError, ValueError):
            raise ImportFormatError(path, None, f"a result without time, alg_bw and bus_bw: {m!r}"[:160]) from None

    rows = []
    for i, r in enumerate(doc["results"]):
        oop, inp = measured(r.get("out_of_place")), measured(r.get("in_place"))
        if oop is None and inp is None:
            raise ImportFormatError(path, None, f"results[{i}] has neither out_of_place nor in_place")
        rows.append(
            Row(i, int(r["size"]), int(r.get("count") or 0), str(r.get("type")), str(r.get("redop")), oop or inp, inp)
        )
    if not rows:
        raise ImportFormatError(path, None, "no results in it")
    binary = " ".join(str(a) for a in doc.get("args") or [])
    name, where = (op, "--op") if op else _op_from_file(path, [binary], rows, len(devices) * per_proc)
    key = "alltoall" if name.replace("-", "_").lower() in ("all_to_all", "alltoall") else name.lower()
    if key not in OPS:
        raise ImportFormatError(
            path, None, f"{key}: shardlab models all_gather, reduce_scatter, all_reduce and alltoall only"
        )
    hosts = list(dict.fromkeys(str(d.get("hostname")) for d in devices))
    kinds = list(dict.fromkeys(str(d.get("device_info")) for d in devices))
    version = doc.get("nccl_version")
    return [
        NcclRun(
            str(path),
            "nccl-tests",
            OPS[key],
            where,
            len(devices) * per_proc,
            hosts,
            kinds,
            dict(cfg, devices=len(devices)),
            None if version is None else f"NCCL {version}",
            rows,
        )
    ]
