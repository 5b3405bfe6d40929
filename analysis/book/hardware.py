"""Hardware constants: ``conf/hardware/*.yaml`` read and checked into :class:`Hardware`.

The ranges its numbers may take are :mod:`analysis.book.hardware_values`; its ``expected:``
block (factors, NCCL's and RCCL's view of the cluster) is read by
:mod:`analysis.book.hardware_expected`. Which entry a device JAX reports belongs to is
:mod:`analysis.book.device_kinds`.

Rings, lines and multi-node layouts live in :mod:`analysis.book.topology` (re-exported here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from analysis.book.errors import HardwareError
from analysis.book.folders import project_folder
from analysis.book.hardware_expected import ExpectedFactor, expected_factors, nccl_system, rccl_system
from analysis.book.hardware_values import (
    COUNT_KEYS,
    MAX_DEVICES,
    NUMBER_KEYS,
    number,
    out_of_range,
    ranged,
)
from analysis.book.nccl_cost import NcclSystem
from analysis.book.rccl_cost import RcclSystem
from analysis.book.topology import parse_topology, wraparound_for, wraparound_reason

__all__ = [
    "Hardware",
    "YAML_KEYS",
    "Calibration",
    "ExpectedFactor",
    "NcclSystem",
    "RcclSystem",
    "calibrated_for",
    "load_hardware",
    "out_of_range",
    "MAX_DEVICES",
    "is_full_record",
    "from_record",
    "hardware_dir",
    "hardware_names",
    "compile_pattern",
    "parse_topology",
    "wraparound_for",
    "wraparound_reason",
]

WRAPAROUND_RULES = ("always", "never", "multiple_of_4", "only_16")
INTERCONNECTS = ("torus", "switch", "host")


def hardware_dir() -> Path:
    """The ``conf/hardware`` folder: the checkout's, or the installed package's copy."""
    return project_folder("conf") / "hardware"


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
    """One chip's constants. W and T_min may be None (``cpu``): the model then says which key
    to set (:meth:`require`). Built from a YAML mapping or a run's recorded hardware node by
    :meth:`from_dict`, the one reader of both."""

    name: str
    kind: str  # auto | cpu | tpu | gpu
    device_kinds: tuple[str, ...] = ()  # as JAX reports them (analysis.book.device_kinds)
    device_count: int | None = None
    interconnect: str | None = None  # torus | switch | host
    wraparound: str | None = None  # always | never | multiple_of_4 | only_16
    link_bw_unidir_Bps: float | None = None
    link_bw_bidir_Bps: float | None = None
    hop_latency_s: float | None = None
    hbm_bw_Bps: float | None = None
    flops_per_s: dict[str, float] = field(default_factory=dict)
    device_kind_patterns: tuple[str, ...] = ()  # anchored regexes, matched ignoring case (compile_pattern)
    memory_bytes: float | None = None  # HBM capacity per JAX device
    domain_size: int | None = None  # devices one fast domain joins: NVLink domain, TPU pod/slice limit
    node_bw_unidir_Bps: float | None = None  # per GPU, to GPUs of its node outside its NVLink domain (PCIe)
    core_bw_unidir_Bps: float | None = None  # one way, between the two devices (cores) of a chip (v3, TPU7x)
    scaleout_network: str | None = None  # beyond a domain: "InfiniBand NDR", "DCN", ...
    scaleout_bw_unidir_Bps: float | None = None  # per device, one direction
    scaleout_latency_s: float | None = None
    source: str = ""
    # W and T_min measured per collective, written by `python -m analysis calibrate`
    calibrated: tuple[Calibration, ...] = ()
    # what measurements show beyond link rates (analysis.book.expected_cost): per level
    # (inside / across) and collective, the share of link bandwidth reached and the floor. In
    # YAML a mapping: {source, inside: {op: {bw_share, floor_s, ...}}, across: {...}, nccl: {...}}
    expected: tuple[ExpectedFactor, ...] = ()
    # derived, not keys of their own (YAML_KEYS leaves them out):
    expected_source: str = ""  # expected.source
    # the cluster as NCCL's cost model sees it (analysis.book.nccl_cost), from expected.nccl: on
    # a GPU entry that has it, the expected time is NCCL's own (analysis.book.expected_cost)
    nccl: NcclSystem | None = None
    # the same for RCCL's model (analysis.book.rccl_cost), from expected.rccl, on AMD GPU entries
    rccl: RcclSystem | None = None

    @classmethod
    def from_dict(cls, raw: Any, where: str | None = None) -> Hardware:
        """The ``Hardware`` of a mapping: a hardware YAML file as read, or the ``hardware``
        node of a composed config (or of a ``result.json``) as a plain dict. Keys it does not
        know (a record's ``known``) are ignored; numbers written as strings are read as
        numbers; a bad rule, pattern, ``calibrated`` or ``expected`` entry is a HardwareError
        naming ``where`` (default: the entry's name)."""
        if not isinstance(raw, dict) or "name" not in raw:
            raise HardwareError(f"{where or 'hardware'}: not a hardware entry (needs at least name and kind)")
        where = where or f"hardware {raw['name']!r}"
        kw: dict[str, Any] = {k: v for k, v in raw.items() if k in YAML_KEYS}
        for key in NUMBER_KEYS:
            kw[key] = ranged(raw.get(key), key, where)
        flops = raw.get("flops_per_s") or {}
        if not isinstance(flops, dict):
            raise HardwareError(f"{where}: flops_per_s={flops!r}: must be a mapping of dtype to FLOP/s")
        kw["flops_per_s"] = {str(k): ranged(v, f"flops_per_s.{k}", where, null=False) for k, v in flops.items()}
        kw["device_kinds"] = tuple(str(k) for k in raw.get("device_kinds") or ())
        kw["device_kind_patterns"] = tuple(str(p) for p in raw.get("device_kind_patterns") or ())
        for pattern in kw["device_kind_patterns"]:
            compile_pattern(pattern, where)
        for key in COUNT_KEYS:
            if raw.get(key) is not None:
                kw[key] = int(ranged(raw[key], key, where))
        kw["name"], kw["kind"] = str(raw["name"]), str(raw.get("kind", "auto"))
        kw["source"] = str(raw.get("source") or "")
        kw["calibrated"] = _calibrations(raw.get("calibrated") or [], where)
        kw["expected"], kw["expected_source"] = expected_factors(raw.get("expected") or {}, where)
        kw["nccl"] = nccl_system((raw.get("expected") or {}).get("nccl"), where)
        kw["rccl"] = rccl_system((raw.get("expected") or {}).get("rccl"), where)
        if kw.get("wraparound") not in (None, *WRAPAROUND_RULES):
            raise HardwareError(f"{where}: wraparound={kw['wraparound']!r} is not one of {WRAPAROUND_RULES}")
        if kw.get("interconnect") not in (None, *INTERCONNECTS):
            raise HardwareError(f"{where}: interconnect={kw['interconnect']!r} is not one of {INTERCONNECTS}")
        return cls(**kw)

    def require(self, attr: str) -> float:
        """A constant the model needs, or a HardwareError naming the key to set (the runner's
        ``hardware.KEY=...`` or the YAML's ``KEY:``), the analysis commands' flag for it, and
        ``calibrate``, which fits W and T_min to a sweep."""
        value = getattr(self, attr)
        if value is None:
            what, flag = _SUPPLY.get(attr, ("", None))
            unit = f" ({what})" if what else ""
            ways = f"set hardware.{attr}=...{unit} on the runner's command line or in the hardware YAML"
            if flag:  # (the flags and calibrate cover W and T_min only)
                ways += (
                    f", {flag} for python -m analysis predict/hlo/profile, or calibrate it: "
                    "python -m analysis calibrate SWEEP --name NAME"
                )
            raise HardwareError(f"hardware {self.name!r} has no {attr}: {ways}")
        return float(value)

    def flops(self, dtype: str, precision: str | None = None) -> float:
        """Peak FLOP/s of a matmul on ``dtype`` at ``precision`` (C in the book): the entry's
        ``flops_per_s.{dtype}_{precision}`` where it has one (float32 at ``default`` on an
        NVIDIA GPU runs as TF32, on a TPU as one bfloat16 pass), else ``flops_per_s.{dtype}``,
        the dtype's own arithmetic (what ``highest`` runs, and ``None``: runs from before
        ``precision`` ran every matmul at highest)."""
        key = f"{dtype}_{precision}" if f"{dtype}_{precision}" in self.flops_per_s else dtype
        if key not in self.flops_per_s:
            known = ", ".join(self.flops_per_s) or "none"
            raise HardwareError(f"hardware {self.name!r} has no flops_per_s for {dtype} (known: {known})")
        return float(self.flops_per_s[key])


# The keys of a hardware YAML entry, in the catalogue's order: every field but what is derived.
# The runner's Hydra schema (runner.config.schema.HardwareConf) is built from these fields.
YAML_KEYS = tuple(f.name for f in fields(Hardware) if f.name not in ("expected_source", "nccl", "rccl"))

# The constants the analysis commands take as flags (analysis.cli.options): what each is, and its flag.
_SUPPLY = {
    "hop_latency_s": ("seconds per hop", "--hop-latency-s"),
    "link_bw_bidir_Bps": ("bytes/s over a link, both directions", "--link-bw-bidir-Bps"),
    "link_bw_unidir_Bps": ("bytes/s over a link, one direction", "--link-bw-unidir-Bps"),
}


def calibrated_for(hw: Hardware, op: str, n_axes: int) -> Hardware:
    """``hw`` with the constants measured for ``op`` over ``n_axes`` mesh axes, where its
    ``calibrated`` list has an entry for them; otherwise ``hw`` unchanged.

    The fit behind an entry took one W for every link, so both W fields get it: the model
    then divides by the measured W whichever one its formula uses (ring, line or switch).
    """
    for entry in hw.calibrated:
        if entry.op == op and entry.n_axes == n_axes:
            return replace(
                hw,
                link_bw_bidir_Bps=entry.link_bw_bidir_Bps,
                link_bw_unidir_Bps=entry.link_bw_bidir_Bps,
                hop_latency_s=entry.hop_latency_s,
            )
    return hw


def _calibrations(raw: Any, where: str) -> tuple[Calibration, ...]:
    if not isinstance(raw, list) or not all(isinstance(e, dict) for e in raw):
        raise HardwareError(f"{where}: calibrated must be a list of {{op, n_axes, link_bw_bidir_Bps, hop_latency_s}}")
    try:
        return tuple(
            Calibration(
                op=str(e["op"]),
                n_axes=int(e["n_axes"]),
                link_bw_bidir_Bps=ranged(e["link_bw_bidir_Bps"], "link_bw_bidir_Bps", where, null=False),
                hop_latency_s=ranged(e["hop_latency_s"], "hop_latency_s", where, null=False),
                rel_rms_error=number(e.get("rel_rms_error"), "rel_rms_error", where),
                n_points=None if e.get("n_points") is None else int(e["n_points"]),
            )
            for e in raw
        )
    except KeyError as err:
        raise HardwareError(f"{where}: a calibrated entry has no {err.args[0]}") from err
    except (TypeError, ValueError, OverflowError) as err:  # OverflowError: an n_axes of .inf
        raise HardwareError(f"{where}: a calibrated entry is malformed ({err})") from err


def compile_pattern(pattern: str, where: str) -> re.Pattern:
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as err:
        raise HardwareError(
            f"{where}: device_kind_patterns entry {pattern!r} is not a regular expression ({err})"
        ) from None


def load_hardware(name_or_path: str) -> Hardware:
    """Load ``conf/hardware/<name>.yaml``, or a YAML file given by path (read, then
    :meth:`Hardware.from_dict`); a HardwareError of one line for a file that is not YAML or
    holds a value out of the runner's range (:func:`~analysis.book.hardware_values.ranged`)."""
    path = Path(name_or_path)
    if not (path.suffix in (".yaml", ".yml") and path.is_file()):
        path = hardware_dir() / f"{name_or_path}.yaml"
    if not path.is_file():
        known = hardware_names()
        raise HardwareError(f"unknown hardware {name_or_path!r} (known: {', '.join(known)}; or a path to a YAML file)")
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict) or "name" not in raw:
        raise HardwareError(f"{path}: not a hardware file (needs at least name and kind)")
    return Hardware.from_dict(raw, str(path))


MAX_FILE_BYTES = 1 << 20  # a hardware entry is a few KiB; more is not one


def read_yaml(path: Path) -> Any:
    """A hardware file's YAML, or a HardwareError of one line: the file, the line and what
    YAML said (a malformed file was a traceback), or why it cannot be read."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise HardwareError(f"{path}: {path.stat().st_size} bytes, too large for a hardware file")
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        said = " ".join(filter(None, (err.context, err.problem)))
        raise HardwareError(f"{path}{line}: not valid YAML ({said})") from None
    except yaml.YAMLError as err:  # a reader error (a control character, say): no line to give
        raise HardwareError(f"{path}: not valid YAML ({' '.join(str(err).split())})") from None
    except UnicodeDecodeError as err:
        raise HardwareError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise HardwareError(f"cannot read {path}: {err.strerror or err}") from None


def is_full_record(node) -> bool:
    """Whether a run's recorded hardware node carries every key (runs record the whole node,
    overrides included; older result files recorded only part of it)."""
    return isinstance(node, dict) and set(YAML_KEYS) <= set(node)


def from_record(node: dict) -> Hardware:
    """The hardware a run ran with: its recorded node when that is whole (a what-if override,
    an entry found on Hydra's search path), else the catalogue entry of its name."""
    return Hardware.from_dict(node) if is_full_record(node) else load_hardware(node["name"])
