"""Which ``conf/hardware`` entry a device JAX reports belongs to (:func:`resolve`,
:func:`resolve_auto`), and the catalogue's own check (:func:`catalogue_problems`).

Resolution is by exact rules, never by file order: an entry lists the device kinds it covers
exactly (``device_kinds``, compared case-insensitively) and may add anchored regular
expressions (``device_kind_patterns``). An exact name wins; else the longest matching pattern;
two entries matching equally is a catalogue bug, reported as a HardwareError (and caught over
the whole catalogue by tests/analysis/book/test_device_kinds.py). A kind no entry covers resolves to an
``unknown_<platform>`` record without constants, whose ``source`` says how to add one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import yaml

from analysis.book.errors import HardwareError
from analysis.book.hardware import compile_pattern, hardware_dir


@functools.lru_cache(maxsize=1)
def entries() -> tuple[dict, ...]:
    """Every ``conf/hardware`` entry as its plain YAML dict, read once per process (the one
    reader of that folder; the runner records these dicts in ``result.json``)."""
    out = []
    for path in sorted(hardware_dir().glob("*.yaml")):
        raw = yaml.safe_load(path.read_text()) or {}
        if isinstance(raw, dict) and raw.get("name") and raw.get("kind") != "auto":
            out.append(raw)
    return tuple(out)


PLATFORMS = {"cpu": "cpu", "tpu": "tpu", "gpu": "gpu", "cuda": "gpu", "rocm": "gpu"}


def normalize_platform(platform: str) -> str:
    """JAX's platform name as a hardware ``kind``: ``cuda`` and ``rocm`` are ``gpu``."""
    p = str(platform).strip().lower()
    return PLATFORMS.get(p, p)


@dataclass(frozen=True)
class Resolution:
    """Which entry a device kind resolves to: ``entry`` (the YAML dict, or the unknown record),
    ``matched_by`` (``exact``, ``pattern`` or ``unknown``) and why, in one line."""

    device_kind: str
    platform: str
    entry: dict
    matched_by: str
    reason: str

    @property
    def known(self) -> bool:
        return self.matched_by != "unknown"


def resolve(device_kind: str, platform: str | None = None) -> Resolution:
    """The entry for a device kind (of ``platform``, or of any platform when None): an exact
    ``device_kinds`` name, else the longest matching ``device_kind_patterns`` entry. Raises
    HardwareError when two entries match equally (a catalogue bug)."""
    plat = normalize_platform(platform) if platform else None
    kind = str(device_kind).strip()
    if plat == "cpu":
        kind = "cpu"  # JAX's CPU devices: the host, whatever their kind string says
    pool = [e for e in entries() if plat is None or e.get("kind") == plat]
    exact = [e for e in pool if kind.lower() in (str(k).lower() for k in e.get("device_kinds") or ())]
    if len(exact) > 1:
        raise HardwareError(
            f"device kind {kind!r} is listed by several entries: "
            f"{', '.join(e['name'] for e in exact)}; fix conf/hardware"
        )
    if exact:
        e = exact[0]
        return Resolution(kind, str(e["kind"]), dict(e), "exact", f"{kind!r} is listed in {e['name']}'s device_kinds")
    best: list[tuple[int, dict, str]] = []
    for e in pool:
        hits = [p for p in e.get("device_kind_patterns") or () if compile_pattern(p, e["name"]).fullmatch(kind)]
        if hits:
            best.append((max(map(len, hits)), e, max(hits, key=len)))
    if best:
        top = max(n for n, _, _ in best)
        winners = [(e, p) for n, e, p in best if n == top]
        if len(winners) > 1:
            raise HardwareError(
                f"device kind {kind!r} matches patterns of equal length in "
                f"{', '.join(e['name'] for e, _ in winners)}; fix conf/hardware"
            )
        e, p = winners[0]
        return Resolution(
            kind,
            str(e["kind"]),
            dict(e),
            "pattern",
            f"{kind!r} matches {e['name']}'s pattern {p!r} (the longest that matches)",
        )
    plat = plat or _guess_platform(kind)
    return Resolution(kind, plat, _unknown(plat, kind), "unknown", _unknown_line(plat, kind))


def _guess_platform(kind: str) -> str:
    k = kind.lower()
    return "cpu" if k == "cpu" else "tpu" if k.startswith("tpu") else "gpu"


def _unknown_line(platform: str, kind: str) -> str:
    near = [
        (e["name"], k)
        for e in entries()
        for k in e.get("device_kinds") or ()
        if kind.lower().startswith(str(k).lower()) and e.get("kind") == platform
    ]
    hint = f" ({near[0][0]} covers exactly {near[0][1]!r}, not this kind)" if near else ""
    return (
        f"no conf/hardware entry covers {platform} device kind {kind!r}{hint}, so the model has no constants "
        f"for it: add conf/hardware/NAME.yaml with device_kinds: [{kind!r}] and its constants, or fit them "
        "with `python -m analysis calibrate`"
    )


def _unknown(platform: str, kind: str) -> dict:
    return {
        "name": f"unknown_{platform}",
        "kind": platform,
        "known": False,
        "device_kinds": [kind],
        "source": _unknown_line(platform, kind),
    }


def resolve_auto(platform: str, device_kind: str) -> dict:
    """The entry for devices JAX reports as ``platform`` / ``device_kind`` (``hardware=auto``),
    as a plain dict the runner records: the YAML entry with ``known: True``, or an
    ``unknown_<platform>`` record without constants (:func:`resolve` for the rules)."""
    r = resolve(device_kind, platform)
    return {**r.entry, "known": True} if r.known else r.entry


def catalogue_problems() -> list[str]:
    """Every way the catalogue could resolve a kind ambiguously or wrongly: a kind listed by
    two entries of a platform, a pattern in two entries, a bad pattern, or a listed kind that
    does not resolve to its own entry. Empty when the catalogue is sound."""
    problems, seen_kind, seen_pat = [], {}, {}
    for e in entries():
        for k in e.get("device_kinds") or ():
            key = (e.get("kind"), str(k).lower())
            if key in seen_kind:
                problems.append(f"{k!r} is listed by {seen_kind[key]} and {e['name']}")
            seen_kind[key] = e["name"]
        for p in e.get("device_kind_patterns") or ():
            key = (e.get("kind"), p.lower())
            if key in seen_pat:
                problems.append(f"pattern {p!r} is in {seen_pat[key]} and {e['name']}")
            seen_pat[key] = e["name"]
            try:
                compile_pattern(p, e["name"])
            except HardwareError as err:
                problems.append(str(err))
    for (plat, k), name in seen_kind.items():
        try:
            got = resolve(k, plat).entry["name"]
        except HardwareError as err:
            got = str(err)
        if got != name and plat != "cpu":
            problems.append(f"{k!r} resolves to {got}, not {name}")
    return problems
