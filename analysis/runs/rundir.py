"""The run folder: its file names and their reader. The runner writes with these names; the
analysis reads only through this module, so the layout is stated once.

A run (point) folder::

    .hydra/                       Hydra's composed config and overrides
    result.json                   status, error, spec, environment, timings, ...
    rounds.jsonl                  a sweep's later rounds not yet in result.json, one JSON line each
    result.host<i>.json           process i's record when each host wrote its own (distributed=auto)
    hlo/lowered.stablehlo.mlir    the program as JAX lowered it
    hlo/compiled.hlo.txt          after XLA's optimisations
    trace/plugins/profile/<time>/<host>.xplane.pb   (trace/host<i>/... with several processes)
    worker.log, worker.host<i>.log                  what each JAX process printed

A sweep folder holds point folders ``<n>_<what varies>/`` plus ``sweep.json`` (the points the
sweep asked for, written when it starts), ``summary.csv``, ``samples.csv``, ``fit.json``,
``headline.json`` and ``report/``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from analysis.runs.record import Result, upgraded

RESULT_NAME = "result.json"
# A point's later rounds (runner.sweep.rounds) as they land, one JSON line each, until its
# rounds end and result.json is written whole with them (then the journal goes):
# :func:`with_journal` folds what result.json lacks into every reader's record.
ROUNDS_NAME = "rounds.jsonl"
HLO_DIR = "hlo"
HLO_LOWERED = f"{HLO_DIR}/lowered.stablehlo.mlir"
HLO_COMPILED = f"{HLO_DIR}/compiled.hlo.txt"
TRACE_DIR = "trace"
LOG_NAME = "worker.log"
SUMMARY_NAME = "summary.csv"
FIT_NAME = "fit.json"
SAMPLES_NAME = "samples.csv"
HEADLINE_NAME = "headline.json"
REPORT_DIR = "report"
SWEEP_NAME = "sweep.json"


HOST_RESULTS_GLOB = "result.host*.json"

# The layout of result.json, fit.json and headline.json; raised when a key changes meaning
# or goes away (new keys do not raise it). Readers may check it.
FORMAT_VERSION = 2  # 2: result.json's experiment is spec; job, job_dir and the job columns are point


def shardlab_version() -> str:
    """The installed shardlab's version (``pyproject.toml``), or ``unknown`` in a checkout
    that was never installed."""
    try:
        return version("shardlab")
    except PackageNotFoundError:
        return "unknown"


def stamp(kind: str) -> dict:
    """The keys that open every JSON file shardlab writes: what it is, its format version,
    the shardlab that wrote it."""
    return {"format": f"shardlab.{kind}", "format_version": FORMAT_VERSION, "shardlab_version": shardlab_version()}


def now_iso() -> str:
    """Local time, ISO 8601 with its UTC offset: ``2026-11-23T17:05:09.123+00:00``."""
    return dt.datetime.now().astimezone().isoformat(timespec="milliseconds")


def result_name(process_index: int) -> str:
    """``result.json`` for process 0, ``result.host<i>.json`` for the others."""
    return RESULT_NAME if process_index == 0 else f"result.host{process_index}.json"


def log_name(process_index: int) -> str:
    """The log of one JAX process in a point folder: ``worker.log``, ``worker.host1.log``, ..."""
    return LOG_NAME if process_index == 0 else f"worker.host{process_index}.log"


def point_dirs(root: str | Path) -> list[Path]:
    """The run folders under ``root`` (``root`` itself if it is one), in point-number order."""
    root = Path(root)
    if (root / RESULT_NAME).is_file():
        return [root]
    dirs = [p.parent for p in root.glob(f"*/{RESULT_NAME}")]

    def key(p: Path):
        head = p.name.split("_", 1)[0]
        return (0, int(head), p.name) if head.isdigit() else (1, 0, p.name)

    return sorted(dirs, key=key)


MAX_RESULT_BYTES = 256 << 20  # a result.json larger than this is not one shardlab wrote


def _no_constant(name: str):
    raise ValueError(f"holds {name}, which shardlab never writes (it writes null)")


MAX_TIME_S = 7 * 24 * 3600  # no point's step takes a week
MAX_BYTES = 1 << 60


def _out_of_range(result: dict) -> list[str]:
    """The timing and size fields of an ok record that no measurement could give: a median
    that is not a positive number of seconds below a week, other summary numbers that are not
    finite, sizes that are not byte counts (``"NaN"``, 1e308 in a hand edit). Each is set to
    null in ``result``: the failed record it becomes still feeds the report's tables.

    This reads the file's JSON before it is typed, because it rewrites it: every key of
    ``timing.summary`` is judged, in the file's order, known to the record or not."""
    bad = _not_objects(result, ("timing", "spec"), "")
    timing = result.get("timing")
    if timing is not None:
        bad += _not_objects(timing, ("summary",), "timing.")
        if timing.get("summary") is not None:
            bad += _summary_out_of_range(timing["summary"])
    spec = result.get("spec")
    for key in ("V_bytes", "size_bytes"):
        value = spec.get(key) if spec is not None else None
        number = isinstance(value, (int, float)) and not isinstance(value, bool)  # imported V may be fractional
        if value is not None and not (number and math.isfinite(value) and 0 <= value <= MAX_BYTES):
            bad.append(f"spec.{key} as a byte count ({value!r})")
            spec[key] = None
    return bad


def _summary_out_of_range(summary: dict) -> list[str]:
    """The numbers of ``timing.summary`` no measurement could give, each set to null."""
    bad = []
    for key, value in summary.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue  # texts and nulls are the readers' to judge
        if not math.isfinite(value) or (key == "median_s" and not 0 < value < MAX_TIME_S):
            bad.append(f"timing.summary.{key} in range ({value!r})")
            summary[key] = None  # the failed record keeps no value a table could choke on
    return bad


def _not_objects(d: dict, keys: tuple, where: str) -> list[str]:
    """Each of ``keys`` that ``d`` holds as something other than an object (or null), said as
    ``<where><key> as an object`` and set to null: after this, each is a dict or None."""
    bad = []
    for key in keys:
        if d.get(key) is not None and not isinstance(d[key], dict):
            bad.append(f"{where}{key} as an object")
            d[key] = None
    return bad


def _lacks(r: Result) -> list[str]:
    """What an ok record lacks of what every ok point has: its op and its time (or why the
    chosen estimator found none)."""
    has = {
        "spec.op": isinstance(r.spec.op, str),
        # a point whose chosen estimator (device) found nothing has no time, and says why
        "timing.summary.median_s": isinstance(r.timing.summary.median_s, (int, float))
        or isinstance(r.timing.missing_reason, str),
    }
    return [k for k, ok in has.items() if not ok]


def read_result(point_dir: Path) -> Result:
    """A point's result.json as its typed record (:class:`analysis.runs.record.Result`), with
    ``point`` (folder name) and ``point_dir`` set to where it was read, and a format_version 1
    file's keys under their names now (:func:`analysis.runs.record.upgraded`).

    A missing, unreadable or malformed file (not a JSON object; ``ok`` without the timing
    and spec an ok point has) becomes a failed record that says why, so one damaged
    folder never stops a report and never passes for a measurement.
    """
    path = Path(point_dir) / RESULT_NAME
    try:
        if path.stat().st_size > MAX_RESULT_BYTES:
            raise ValueError(f"{path.stat().st_size} bytes, too large for a result")
        result = json.loads(path.read_text(), parse_constant=_no_constant)
        if not isinstance(result, dict):
            raise ValueError(f"holds a JSON {type(result).__name__}, not an object")
    except RecursionError:  # 200k nested brackets: hostile, not ours
        result = {"status": "failed", "error_type": "UnreadableResult", "error": f"{path}: nested too deeply"}
    except (OSError, ValueError) as exc:
        result = {"status": "failed", "error_type": "UnreadableResult", "error": f"{path}: {exc}"}
    result = with_journal(upgraded(result), point_dir)  # a sweep's rounds since result.json was written
    out_of_range = _out_of_range(result)  # nulled in any record; an ok one becomes failed
    result.update(point=Path(point_dir).name, point_dir=str(point_dir))
    record = Result.from_json(result)
    if record.ok:
        lacks = out_of_range + [k for k in _lacks(record) if not any(b.startswith(k) for b in out_of_range)]
        if lacks:
            record = dataclasses.replace(
                record,
                status="failed",
                error_type="IncompleteResult",
                error=f"{path}: says ok but has no {' or '.join(lacks)}",
            )
    return record


def append_round(point_dir: Path, line: dict) -> None:
    """Append one later round to the point's journal (:data:`ROUNDS_NAME`): ``line`` as one line
    of strict JSON, handed to the kernel by ``write`` (no buffer in this process) before this
    returns, so a sweep killed after it keeps the round. Not fsync'd, as result.json is not: that
    guards only against the machine losing power, and cost 4 to 13 ms a line here, more than
    rewriting a whole result.json (about 3 ms). A line torn by a kill mid-write is ended first:
    it stays a line of its own, which :func:`journal_rounds` skips, and never swallows this one."""
    data = json.dumps(json_safe(line), default=str, allow_nan=False, separators=(",", ":")).encode() + b"\n"
    fd = os.open(Path(point_dir) / ROUNDS_NAME, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def journal_rounds(point_dir: Path) -> list[dict]:
    """The later rounds in the point's journal, in the order they were written: each line that
    parses as one (an object whose ``round`` is a round with its number and whose ``timing`` is
    an object); a torn or damaged line is skipped. Empty without a journal."""
    path = Path(point_dir) / ROUNDS_NAME
    try:
        if path.stat().st_size > MAX_RESULT_BYTES:
            return []
        raw = path.read_bytes()
    except OSError:
        return []
    out = []
    for text in raw.splitlines():
        try:
            line = json.loads(text, parse_constant=_no_constant)
        except (ValueError, RecursionError):
            continue  # the line a kill cut short, or not one of ours
        if not isinstance(line, dict) or not isinstance(line.get("timing"), dict):
            continue
        rnd = line.get("round")
        if isinstance(rnd, dict) and isinstance(rnd.get("round"), int) and not isinstance(rnd.get("round"), bool):
            out.append(line)
    return out


def with_journal(result: dict, point_dir: Path) -> dict:
    """``result`` (a point's result.json, read) with the later rounds its journal holds and it
    lacks: each line written for this record (its ``result_started_at`` is the record's
    ``started_at``: a journal left by an earlier run of the folder is not this one's) whose round
    number ``timing.rounds`` does not hold, appended in the journal's order; then the last such
    line's ``timing`` (the estimators, summary and rules, as :func:`runner.sweep.rounds.add_round`
    computed them over every round so far), ``bandwidth`` and ``phases_s`` replace the record's.
    So a sweep killed between rounds reads back every round it finished. ``result`` itself when
    nothing is to fold (no journal, a failed point, every round held)."""
    timing = result.get("timing") if isinstance(result, dict) else None
    if not isinstance(timing, dict) or not isinstance(timing.get("rounds"), list) or result.get("status") != "ok":
        return result
    lines = journal_rounds(point_dir)
    held = {r.get("round") for r in timing["rounds"] if isinstance(r, dict)}
    new = []
    for line in lines:
        if line.get("result_started_at") == result.get("started_at") and line["round"]["round"] not in held:
            held.add(line["round"]["round"])
            new.append(line)
    if not new:
        return result
    last = new[-1]
    timing = {**timing, **{k: v for k, v in last["timing"].items() if k != "rounds"}}
    timing["rounds"] = [*result["timing"]["rounds"], *(line["round"] for line in new)]
    out = dict(result, timing=timing)
    out.update({k: last[k] for k in ("bandwidth", "phases_s") if k in last})
    return out


def point_file(result: Result, key: str, max_bytes: int = 4 << 30) -> Path | None:
    """The file ``result.files[key]`` names, inside its point folder; None when there is none.

    Raises ValueError for a name that is absolute or leaves the point folder (``..``, a link
    out), or that is not a regular file or is too large: a result.json is data, and its paths
    must not send a reader to ``/dev/zero`` or anywhere else on disk.
    """
    rel = result.files.get(key)
    return safe_path(Path(result.point_dir), rel, key, max_bytes) if rel else None


def safe_path(point_dir: Path, rel: str, what: str = "file", max_bytes: int = 4 << 30) -> Path:
    """``point_dir / rel`` if it is a regular file inside ``point_dir`` of at most ``max_bytes``;
    else ValueError saying why (see :func:`point_file`)."""
    point_dir = Path(point_dir).resolve()
    if Path(str(rel)).is_absolute():
        raise ValueError(f"{what}={rel!r}: an absolute path; a run folder's files are relative to it")
    path = (point_dir / str(rel)).resolve()
    if point_dir not in path.parents:
        raise ValueError(f"{what}={rel!r}: leaves the point folder")
    if not path.is_file():
        raise ValueError(f"{path}: missing or not a regular file")
    if path.stat().st_size > max_bytes:
        raise ValueError(f"{path}: {path.stat().st_size} bytes, larger than {max_bytes}")
    return path


def read_results(root: str | Path) -> list[Result]:
    """Every point's result under ``root``, each read once into its typed record (:func:`read_result`)."""
    return [read_result(d) for d in point_dirs(root)]


def read_host_results(point_dir: str | Path) -> list[Result]:
    """The records the other JAX processes of a point wrote beside its ``result.json``
    (``result.host<i>.json``, ``distributed=auto``), in name order; one that cannot be read
    or is not a JSON object is left out (process 0's record speaks for the point)."""
    out = []
    for path in sorted(Path(point_dir).glob(HOST_RESULTS_GLOB)):
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(found, dict):
            out.append(Result.from_json(found))
    return out


def point_number(point_dir: Path) -> int | None:
    """The sweep position a point folder's name starts with (``07_op.size_bytes=...`` -> 7)."""
    head = Path(point_dir).name.split("_", 1)[0]
    return int(head) if head.isdigit() else None


def sweep_command(root: str | Path) -> str | None:
    """The command that started the sweep (``sweep.json``), or None."""
    try:
        return json.loads((Path(root) / SWEEP_NAME).read_text()).get("command")
    except (OSError, ValueError, AttributeError):
        return None


def expected_points(root: str | Path) -> list[dict]:
    """The points the sweep asked for (``sweep.json``), ``[{"num", "overrides"}]``; empty when
    the folder has no such file (a single run, or a sweep from an older shardlab)."""
    try:
        data = json.loads((Path(root) / SWEEP_NAME).read_text())
        return [p for p in data.get("expected_points", []) if isinstance(p, dict) and "num" in p]
    except (OSError, ValueError, AttributeError):
        return []


def json_safe(obj):
    """``obj`` with every NaN and infinity replaced by None, so strict JSON parsers read it
    (numpy scalars become Python numbers; tuples become lists)."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):  # numpy scalar
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json_atomic(path: Path, data) -> None:
    """Write ``data`` as strict JSON (no NaN or Infinity) to ``path`` via a temp file and a
    rename: a reader never sees a half-written file."""
    write_text_atomic(path, json.dumps(json_safe(data), indent=1, default=str, allow_nan=False))


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temp file beside it, renamed)."""
    write_bytes_atomic(path, text.encode())


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (a temp file beside it, renamed)."""
    target = atomic_path(path, keep_open=True)
    with target, os.fdopen(target.fd, "wb") as f:
        f.write(data)


class atomic_path:
    """``with atomic_path(path) as tmp:`` - write the file at ``tmp`` (a name beside ``path``
    with the same suffix, so a writer that goes by the suffix, e.g. ``savefig``, picks the same
    format); on success it is renamed to ``path`` (mode 0644), on any error removed, so
    ``path`` is either its old self or the whole new file (a full disk leaves no stub)."""

    def __init__(self, path: Path, keep_open: bool = False):
        self.path = Path(path)
        self.keep_open = keep_open  # the temp file's descriptor stays open, as ``self.fd``
        self.tmp: Path | None = None
        self.fd: int | None = None

    def __enter__(self) -> Path:

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.stem}.", suffix=f".tmp{self.path.suffix}", dir=self.path.parent)
        self.tmp = Path(tmp)
        if self.keep_open:
            self.fd = fd
        else:
            os.close(fd)
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> bool:

        assert self.tmp is not None
        if exc_type is None:
            try:
                os.chmod(self.tmp, 0o644)  # readable like the rest of the folder (mkstemp makes it 0600)
                os.replace(self.tmp, self.path)
                return False
            except BaseException:
                self.tmp.unlink(missing_ok=True)
                raise
        self.tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:  # a failed write names no file: say which
            exc.filename = str(self.path)
        return False
