"""Hardware constants (``conf/hardware/*.yaml``) and which mesh axes are rings.

A topology string such as ``4x4x4`` or ``8x16`` names the physical axes of a slice. Whether
an axis wraps around (a ring) or not (a line) depends on the chip, as the YAML's
``wraparound`` says: ``always`` (v3), ``never``, ``multiple_of_4`` (v4p/v5p: axes that span
full 4x4x4 cubes) or ``only_16`` (v5e/v6e: only a full edge of 16).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Sequence

from analysis.book.errors import HardwareError, NotationError

__all__ = ["Hardware", "Calibration", "calibrated_for", "load_hardware", "hardware_dir", "hardware_names",
           "entries", "resolve_auto", "parse_topology", "wraparound_for", "wraparound_reason"]

WRAPAROUND_RULES = ("always", "never", "multiple_of_4", "only_16")
INTERCONNECTS = ("torus", "switch", "host")


def hardware_dir() -> Path:
    """The repository's ``conf/hardware`` folder, found relative to this package."""
    return Path(__file__).resolve().parents[2] / "conf" / "hardware"


def hardware_names() -> list[str]:
    """Every entry in ``conf/hardware`` (``auto`` is a choice, not an entry)."""
    return sorted(p.stem for p in hardware_dir().glob("*.yaml") if p.stem != "auto")


@dataclass(frozen=True)
class Calibration:
    """W and T_min measured for one collective over ``n_axes`` mesh axes, written by
    ``python -m analysis calibrate`` into a hardware file's ``calibrated:`` list."""
    op: str
    n_axes: int
    link_bw_bidir_Bps: float
    hop_latency_s: float
    rel_rms_error: float | None = None
    n_points: int | None = None


@dataclass(frozen=True)
class Hardware:
    """One chip's constants. W and T_min may be None (``cpu``): callers that fitted them
    supply them with ``dataclasses.replace(hw, link_bw_bidir_Bps=..., hop_latency_s=...)``."""
    name: str
    kind: str
    interconnect: str | None = None
    wraparound: str | None = None
    link_bw_unidir_Bps: float | None = None
    link_bw_bidir_Bps: float | None = None
    hop_latency_s: float | None = None
    hbm_bw_Bps: float | None = None
    flops_per_s: dict[str, float] = field(default_factory=dict)
    device_kinds: tuple[str, ...] = ()
    device_count: int | None = None
    source: str = ""
    calibrated: tuple[Calibration, ...] = ()

    def require(self, attr: str) -> float:
        """A constant the model needs, or a HardwareError saying how to supply it."""
        value = getattr(self, attr)
        if value is None:
            raise HardwareError(f"hardware {self.name!r} has no {attr} (null in its YAML); supply a fitted "
                                f"value: dataclasses.replace(hw, {attr}=...), or --{attr.replace('_', '-')} "
                                "on the command line")
        return float(value)

    def flops(self, dtype: str) -> float:
        """Peak FLOP/s for ``dtype`` (C in the book)."""
        if dtype not in self.flops_per_s:
            known = ", ".join(self.flops_per_s) or "none"
            raise HardwareError(f"hardware {self.name!r} has no flops_per_s for {dtype} (known: {known})")
        return float(self.flops_per_s[dtype])


def calibrated_for(hw: Hardware, op: str, n_axes: int) -> Hardware:
    """``hw`` with the constants measured for ``op`` over ``n_axes`` mesh axes, where its
    ``calibrated`` list has an entry for them; otherwise ``hw`` unchanged.

    The fit behind an entry took one W for every link, so both W fields get it: the model
    then divides by the measured W whichever one its formula uses (ring, line or switch).
    """
    for entry in hw.calibrated:
        if entry.op == op and entry.n_axes == n_axes:
            return replace(hw, link_bw_bidir_Bps=entry.link_bw_bidir_Bps,
                           link_bw_unidir_Bps=entry.link_bw_bidir_Bps, hop_latency_s=entry.hop_latency_s)
    return hw


def _calibrations(raw: Any, where: str) -> tuple[Calibration, ...]:
    if not isinstance(raw, list) or not all(isinstance(e, dict) for e in raw):
        raise HardwareError(f"{where}: calibrated must be a list of "
                            "{op, n_axes, link_bw_bidir_Bps, hop_latency_s}")
    try:
        return tuple(Calibration(op=str(e["op"]), n_axes=int(e["n_axes"]),
                                 link_bw_bidir_Bps=_num(e["link_bw_bidir_Bps"], "link_bw_bidir_Bps", where),
                                 hop_latency_s=_num(e["hop_latency_s"], "hop_latency_s", where),
                                 rel_rms_error=_num(e.get("rel_rms_error"), "rel_rms_error", where),
                                 n_points=None if e.get("n_points") is None else int(e["n_points"]))
                     for e in raw)
    except KeyError as err:
        raise HardwareError(f"{where}: a calibrated entry has no {err.args[0]}") from err
    except (TypeError, ValueError) as err:
        raise HardwareError(f"{where}: a calibrated entry is malformed ({err})") from err


def _num(value: Any, key: str, where: str) -> float | None:
    # PyYAML reads `4.5e10` (no sign in the exponent) as a string, so coerce explicitly.
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError) as err:
        raise HardwareError(f"{where}: {key}={value!r} is not a number") from err


def load_hardware(name_or_path: str) -> Hardware:
    """Load ``conf/hardware/<name>.yaml``, or a YAML file given by path."""
    import yaml  # pyyaml: a small import, kept lazy like everything the CLI may not need

    path = Path(name_or_path)
    if not (path.suffix in (".yaml", ".yml") and path.is_file()):
        path = hardware_dir() / f"{name_or_path}.yaml"
    if not path.is_file():
        known = hardware_names()
        raise HardwareError(f"unknown hardware {name_or_path!r} (known: {', '.join(known)}; or a path to a YAML file)")
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict) or "name" not in raw:
        raise HardwareError(f"{path}: not a hardware file (needs at least name and kind)")
    where = str(path)
    known_keys = {f.name for f in fields(Hardware)}
    kw: dict[str, Any] = {k: v for k, v in raw.items() if k in known_keys}
    for key in ("link_bw_unidir_Bps", "link_bw_bidir_Bps", "hop_latency_s", "hbm_bw_Bps"):
        kw[key] = _num(raw.get(key), key, where)
    kw["flops_per_s"] = {str(k): _num(v, f"flops_per_s.{k}", where) for k, v in (raw.get("flops_per_s") or {}).items()}
    kw["device_kinds"] = tuple(raw.get("device_kinds") or ())
    kw["kind"] = str(raw.get("kind", "auto"))
    kw["calibrated"] = _calibrations(raw.get("calibrated") or [], where)
    if kw.get("wraparound") not in (None, *WRAPAROUND_RULES):
        raise HardwareError(f"{where}: wraparound={kw['wraparound']!r} is not one of {WRAPAROUND_RULES}")
    if kw.get("interconnect") not in (None, *INTERCONNECTS):
        raise HardwareError(f"{where}: interconnect={kw['interconnect']!r} is not one of {INTERCONNECTS}")
    return Hardware(**kw)


@functools.lru_cache(maxsize=1)
def entries() -> tuple[dict, ...]:
    """Every ``conf/hardware`` entry as its plain YAML dict, read once per process (the one
    reader of that folder; the runner records these dicts in ``result.json``)."""
    import yaml

    out = []
    for path in sorted(hardware_dir().glob("*.yaml")):
        raw = yaml.safe_load(path.read_text()) or {}
        if isinstance(raw, dict) and raw.get("name") and raw.get("kind") != "auto":
            out.append(raw)
    return tuple(out)


def resolve_auto(platform: str, device_kind: str) -> dict:
    """The entry for devices JAX reports as ``platform`` / ``device_kind`` (``hardware=auto``):
    ``cpu`` on the CPU backend, else the first entry of that platform whose ``device_kinds``
    names the kind; an ``unknown_<platform>`` record without constants when none does."""
    wanted = "cpu" if platform == "cpu" else device_kind.lower()
    for entry in entries():
        if entry.get("kind") != ("cpu" if platform == "cpu" else platform):
            continue
        names = [k.lower() for k in entry.get("device_kinds", [])]
        if wanted in names or any(n in wanted for n in names if len(n) > 3):
            return dict(entry)
    return {"name": f"unknown_{platform}", "kind": platform, "device_kinds": [device_kind],
            "source": f"no conf/hardware entry names device kind {device_kind!r}; model constants unknown"}


def parse_topology(topology: str) -> list[int]:
    """``"4x4x4"`` -> ``[4, 4, 4]``."""
    try:
        sizes = [int(p) for p in topology.lower().replace("×", "x").split("x")]
    except ValueError:
        sizes = []
    if not sizes or any(s <= 0 for s in sizes):
        raise NotationError(f"topology {topology!r} is not like 4x4x4 or 8x16")
    return sizes


def _ring(rule: str | None, size: int) -> bool:
    if rule == "always":
        return True
    if rule == "multiple_of_4":
        return size % 4 == 0
    if rule == "only_16":
        return size == 16
    return False


def wraparound_for(hw: Hardware, axis_sizes: Sequence[int], topology: str | None = None) -> list[bool]:
    """Per mesh axis: True if it is a ring (wraparound), False if a line.

    With a topology, mesh axes map onto its physical axes in order and must match their
    sizes; without one, each mesh axis is taken as its own physical axis of that size. A
    switch counts as all-to-all connected and the host as a ring (its W and T_min are fitted
    to the ring formula), so both return True.
    """
    sizes = [int(s) for s in axis_sizes]
    if topology is not None:
        phys = parse_topology(topology)
        if len(phys) < len(sizes) or any(p != s for p, s in zip(phys, sizes)):
            raise NotationError(f"mesh axes {'x'.join(map(str, sizes))} do not map onto topology {topology!r} "
                                "(mesh axes take the topology's axes in order, with equal sizes)")
        if math.prod(phys) != math.prod(sizes):
            raise NotationError(f"topology {topology!r} has {math.prod(phys)} chips but the mesh has "
                                f"{math.prod(sizes)}")
        sizes = phys[: len(sizes)]
    if hw.interconnect in ("switch", "host"):
        return [True] * len(sizes)
    return [_ring(hw.wraparound, s) for s in sizes]


def wraparound_reason(hw: Hardware, size: int) -> str:
    """Why an axis of ``size`` on ``hw`` is a ring or a line, in words."""
    rule = hw.wraparound
    if rule == "always":
        return f"{hw.name} wraps around every axis"
    if rule == "multiple_of_4":
        return (f"{hw.name} wraps around an axis that spans full cubes (a multiple of 4); "
                f"{size} {'is' if size % 4 == 0 else 'is not'}")
    if rule == "only_16":
        return f"{hw.name} wraps around only an axis of 16; this one is {size}"
    return f"{hw.name} has no wraparound"
