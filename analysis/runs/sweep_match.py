"""Which point folder holds which point of a sweep, told by the point's config (its overrides),
never by its number alone, and how two sweeps' point lists differ.

A point folder's number is only its position in the sweep that made it: a resume with another
size list makes ``001_op.size_bytes=4KiB`` beside an older ``001_op.size_bytes=2KiB``. A
folder is this sweep's point when its overrides (``.hydra/overrides.yaml``, else the
``<what varies>`` part of its name, which Hydra builds from them) are one the sweep's
``sweep.json`` lists.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import yaml

# Overrides that change nothing measured: left out when points are compared (as resume and
# Hydra's point folder names leave them out, conf/config.yaml). distributed.process_id differs
# between the hosts of one multi-host sweep, which share its folders.
NOT_MEASURED = (
    "resume",
    "overwrite",
    "sizes.min",
    "sizes.max",
    "sizes.factor",
    "check.min_busbw_GBps",
    "distributed.process_id",
)
# ... and also out of a folder's name (override_dirname.exclude_keys in conf/config.yaml)
NOT_IN_NAME = ("sweep", *NOT_MEASURED)
OVERRIDES_FILE = ".hydra/overrides.yaml"


def override_key(override: str) -> str:
    """``op.size_bytes`` of ``op.size_bytes=1KiB``; ``sweep`` of ``+sweep=allgather_sizes``."""
    return override.split("=", 1)[0].strip().lstrip("+~")


def point_key(overrides: list[str]) -> tuple[str, ...]:
    """What tells a point apart: its overrides without those that change nothing measured,
    in a fixed order."""
    return tuple(sorted(o.lstrip("+") for o in overrides if override_key(o) not in NOT_MEASURED))


def name_key(overrides: list[str]) -> str:
    """The ``<what varies>`` part of the point folder Hydra names for ``overrides`` (sorted,
    joined by commas, without the keys conf/config.yaml leaves out of names)."""
    return ",".join(sorted(o for o in overrides if override_key(o) not in NOT_IN_NAME))


MAX_NAME_BYTES = 200  # of a point folder's name: file systems allow 255, and the number and hash need room


def folder_name(name: str) -> str:
    """A point folder's ``<what varies>`` part made safe for any override value: a ``/`` would
    nest folders (``op.target=sub/step.py:fn``), so it is written ``%2F`` (and ``%`` itself
    ``%25``); a name too long for the file system keeps its first bytes and a hash of the
    whole (``...~3f2a9c1b0d``), so two long names stay apart."""
    safe = name.replace("%", "%25").replace("/", "%2F").replace("\0", "%00")
    raw = safe.encode()
    if len(raw) <= MAX_NAME_BYTES:
        return safe
    digest = hashlib.sha1(raw).hexdigest()[:10]
    return raw[: MAX_NAME_BYTES - 11].decode(errors="ignore") + "~" + digest


def point_overrides(point_dir: Path) -> list[str] | None:
    """The overrides Hydra recorded for a point folder (``.hydra/overrides.yaml``), or None."""
    try:
        data = yaml.safe_load((Path(point_dir) / OVERRIDES_FILE).read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return None
    return [str(o) for o in data] if isinstance(data, list) else None


def match_points(dirs: list[Path], expected: list[dict]) -> tuple[dict[int, Path], list[Path]]:
    """``({num: point folder}, [folders that are no point of the sweep])`` for the point folders
    ``dirs`` and the sweep's ``expected`` points (``sweep.json``: ``{"num", "overrides"}``).

    A folder is a point's when its overrides are the point's; of two folders for one point
    (another sweep's numbering), the one with the point's number is kept, the other is extra.
    """
    by_key = {point_key(p.get("overrides") or []): p["num"] for p in expected}
    by_name = {folder_name(name_key(p.get("overrides") or [])): p["num"] for p in expected}
    found: dict[Path, int | None] = {}
    for d in dirs:
        recorded = point_overrides(d)
        if recorded is not None:
            found[d] = by_key.get(point_key(recorded))
        else:  # copied without .hydra/: the folder's name says what it ran
            found[d] = by_name.get(Path(d).name.partition("_")[2])
    matched: dict[int, Path] = {}
    # a folder numbered as its point goes first, so that a stray copy is the one called extra
    for d in sorted(dirs, key=lambda d: _number(d) != found[d]):
        num = found[d]
        if num is not None and num not in matched:
            matched[num] = d
    extra = [d for d in dirs if d not in matched.values()]
    return matched, extra


def _number(point_dir: Path) -> int | None:
    head = Path(point_dir).name.split("_", 1)[0]
    return int(head) if head.isdigit() else None


def sweep_difference(old: list[list[str]], new: list[list[str]]) -> str | None:
    """How the point list ``new`` differs from ``old`` (each a list of overrides per point, in
    order), in words naming the keys, e.g. ``op.size_bytes: 1KiB,2KiB,4KiB there,
    1KiB,4KiB,8KiB in this command``; None when they are the same points in the same order."""
    a, b = [point_key(o) for o in old], [point_key(n) for n in new]
    if a == b:
        return None
    va, vb = _values(a), _values(b)
    said = [
        f"{k}: {_show(va.get(k))} there, {_show(vb.get(k))} in this command"
        for k in sorted(set(va) | set(vb))
        if va.get(k) != vb.get(k)
    ]
    return "; ".join(said) or f"the same values in another order or combination ({len(a)} points there, {len(b)} here)"


def _values(points: list[tuple[str, ...]]) -> dict[str, list[str]]:
    """Each key's values over the points, in first-seen order."""
    out: dict[str, list[str]] = {}
    for p in points:
        for o in p:
            k, _, v = o.partition("=")
            vals = out.setdefault(override_key(k), [])
            if v not in vals:
                vals.append(v)
    return out


def _show(values: list[str] | None) -> str:
    if not values:
        return "not set"
    return ",".join(values[:6]) + (",..." if len(values) > 6 else "")
