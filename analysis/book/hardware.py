"""Hardware constants: ``conf/hardware/*.yaml`` read and checked into :class:`Hardware`.

Which entry a device JAX reports belongs to is :mod:`analysis.book.device_kinds`.

Rings, lines and multi-node layouts live in :mod:`analysis.book.topology` (re-exported here).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from analysis.book.collectives import OPS
from analysis.book.errors import HardwareError
from analysis.book.folders import project_folder
from analysis.book.nccl_cost import ALGOS, ARCHS, PROTOS, NcclSystem
from analysis.book.ofi_tuner import TUNERS
from analysis.book.rccl_cost import ARCHS as RCCL_ARCHS
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


EXPECTED_LEVELS = ("inside", "across")


@dataclass(frozen=True)
class ExpectedFactor:
    """For one collective at one level (``inside`` a domain, ``across`` domains): the share of
    the roofline's link bandwidth its usual algorithms reach, and its launch/protocol floor."""

    level: str
    op: str
    bw_share: float  # of the roofline's link bandwidth, for large messages (NCCL's Simple protocol)
    floor_s: float  # the smallest time any message takes (launch and protocol)
    setup_s: float | None = None  # start-up of the bulk protocol; None: the floor
    small_bw_share: float | None = None  # the low-latency protocol's share (mid sizes); None: bw_share


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
        for key in _NUMBERS:
            kw[key] = _ranged(raw.get(key), key, where)
        flops = raw.get("flops_per_s") or {}
        if not isinstance(flops, dict):
            raise HardwareError(f"{where}: flops_per_s={flops!r}: must be a mapping of dtype to FLOP/s")
        kw["flops_per_s"] = {str(k): _ranged(v, f"flops_per_s.{k}", where, null=False) for k, v in flops.items()}
        kw["device_kinds"] = tuple(str(k) for k in raw.get("device_kinds") or ())
        kw["device_kind_patterns"] = tuple(str(p) for p in raw.get("device_kind_patterns") or ())
        for pattern in kw["device_kind_patterns"]:
            compile_pattern(pattern, where)
        for key in _COUNTS:
            if raw.get(key) is not None:
                kw[key] = int(_ranged(raw[key], key, where))
        kw["name"], kw["kind"] = str(raw["name"]), str(raw.get("kind", "auto"))
        kw["source"] = str(raw.get("source") or "")
        kw["calibrated"] = _calibrations(raw.get("calibrated") or [], where)
        kw["expected"], kw["expected_source"] = _expected(raw.get("expected") or {}, where)
        kw["nccl"] = _nccl((raw.get("expected") or {}).get("nccl"), where)
        kw["rccl"] = _rccl((raw.get("expected") or {}).get("rccl"), where)
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
                link_bw_bidir_Bps=_ranged(e["link_bw_bidir_Bps"], "link_bw_bidir_Bps", where, null=False),
                hop_latency_s=_ranged(e["hop_latency_s"], "hop_latency_s", where, null=False),
                rel_rms_error=_num(e.get("rel_rms_error"), "rel_rms_error", where),
                n_points=None if e.get("n_points") is None else int(e["n_points"]),
            )
            for e in raw
        )
    except KeyError as err:
        raise HardwareError(f"{where}: a calibrated entry has no {err.args[0]}") from err
    except (TypeError, ValueError, OverflowError) as err:  # OverflowError: an n_axes of .inf
        raise HardwareError(f"{where}: a calibrated entry is malformed ({err})") from err


def _expected(raw: Any, where: str) -> tuple[tuple[ExpectedFactor, ...], str]:
    """``expected: {source, inside: {op: {bw_share, floor_s}}, across: {...}}`` as factors."""
    if not isinstance(raw, dict):
        raise HardwareError(f"{where}: expected must be a mapping with source, inside and across")
    out = []
    for level, per_op in raw.items():
        if level in ("source", "nccl", "rccl"):  # read by _nccl, _rccl
            continue
        if level not in EXPECTED_LEVELS or not isinstance(per_op, dict):
            raise HardwareError(f"{where}: expected.{level}: the levels are {', '.join(EXPECTED_LEVELS)} (and source)")
        for op, f in per_op.items():
            keys = {"bw_share", "floor_s", "setup_s", "small_bw_share"}
            if op not in OPS or not isinstance(f, dict) or not {"bw_share", "floor_s"} <= set(f) <= keys:
                raise HardwareError(
                    f"{where}: expected.{level}.{op}: a collective ({', '.join(OPS)}) with bw_share and floor_s "
                    "(and optionally setup_s, small_bw_share)"
                )
            share, floor = _num(f["bw_share"], "bw_share", where), _num(f["floor_s"], "floor_s", where)
            setup, small = (
                _num(f.get("setup_s"), "setup_s", where),
                _num(f.get("small_bw_share"), "small_bw_share", where),
            )
            given = [x for x in (share, floor, setup, small) if x is not None]
            if (
                not (share and share > 0 and floor is not None and floor >= 0)
                or (small is not None and small <= 0)
                or (setup is not None and setup < 0)
                or not all(map(math.isfinite, given))  # an infinite share prices any size at 0 s
            ):
                raise HardwareError(
                    f"{where}: expected.{level}.{op}: shares > 0 and floor_s >= 0 (setup_s too), all finite; got {f!r}"
                )
            out.append(ExpectedFactor(level, op, share, floor, setup, small))
    return tuple(out), str(raw.get("source") or "")


_NCCL_KEYS = {
    "source", "arch", "intra", "nvlinks", "nics_per_node", "nvls", "cpu", "net_latency_s", "net_algorithms",
    "net_protocols", "tuner",
}  # fmt: skip
_NCCL_OPTIONAL = {"source", "net_latency_s", "net_algorithms", "net_protocols", "tuner"}


def _nccl(raw: Any, where: str) -> NcclSystem | None:
    """``expected.nccl: {source, arch, intra, nvlinks, nics_per_node, nvls, cpu, net_latency_s,
    net_algorithms, net_protocols}`` as the system NCCL's model prices; each NIC's bandwidth is the
    entry's scale-out bandwidth per GPU times ``domain_size`` over ``nics_per_node`` (read at pricing
    time, so overrides reach it).
    Optional ``net_algorithms`` and ``net_protocols``: the NCCL_ALGO and NCCL_PROTO the platform's
    network plugin needs across nodes (lists of :data:`~analysis.book.nccl_cost.ALGOS` and ``PROTOS``);
    ``tuner``: the tuner plugin whose regions pick the pair (one of
    :data:`~analysis.book.ofi_tuner.TUNERS`)."""
    if raw is None:
        return None
    need = _NCCL_KEYS - _NCCL_OPTIONAL
    if not isinstance(raw, dict) or not need <= set(raw) <= _NCCL_KEYS:
        raise HardwareError(f"{where}: expected.nccl needs {', '.join(sorted(need))} (and source); got {raw!r}")
    arch, intra, cpu = str(raw["arch"]), str(raw["intra"]), str(raw["cpu"])
    try:
        nvlinks, nics = int(raw["nvlinks"]), int(raw["nics_per_node"])
    except (TypeError, ValueError) as err:
        raise HardwareError(f"{where}: expected.nccl.nvlinks and nics_per_node are whole numbers ({err})") from None
    if arch not in ARCHS or intra not in ("nvlink", "pci") or cpu not in ("intel", "amd", "arm"):
        raise HardwareError(
            f"{where}: expected.nccl: arch one of {', '.join(ARCHS)}, intra nvlink or pci, cpu intel, amd or arm"
        )
    if nvlinks < 0 or nics < 1 or not isinstance(raw["nvls"], bool):
        raise HardwareError(f"{where}: expected.nccl: nvlinks >= 0, nics_per_node >= 1, nvls true or false")
    latency = _ranged(raw.get("net_latency_s", 0.0), "scaleout_latency_s", f"{where}: expected.nccl.net_latency_s")
    chosen = {}
    for key, allowed in (("net_algorithms", ALGOS), ("net_protocols", PROTOS)):
        given = raw.get(key) or []
        if not isinstance(given, list) or not set(map(str, given)) <= set(allowed):
            raise HardwareError(f"{where}: expected.nccl.{key} is a list of {', '.join(allowed)}; got {given!r}")
        chosen[key] = tuple(str(x) for x in given)
    tuner = raw.get("tuner") or ""
    if tuner not in ("", *TUNERS):
        raise HardwareError(f"{where}: expected.nccl.tuner is one of {', '.join(TUNERS)} (or absent); got {tuner!r}")
    return NcclSystem(arch, intra, nvlinks, nics, 0.0, raw["nvls"], cpu, float(latency or 0.0), **chosen, tuner=tuner)


_RCCL_KEYS = {"source", "arch", "xgmi_links", "nics_per_node", "cpu", "ll128", "net_latency_s"}


def _rccl(raw: Any, where: str) -> RcclSystem | None:
    """``expected.rccl: {source, arch, xgmi_links, nics_per_node, cpu, ll128, net_latency_s}`` as the
    system RCCL's model prices (each NIC's bandwidth as for ``expected.nccl``, at pricing time)."""
    if raw is None:
        return None
    need = _RCCL_KEYS - {"source", "net_latency_s"}
    if not isinstance(raw, dict) or not need <= set(raw) <= _RCCL_KEYS:
        raise HardwareError(f"{where}: expected.rccl needs {', '.join(sorted(need))} (and source); got {raw!r}")
    try:
        links, nics = int(raw["xgmi_links"]), int(raw["nics_per_node"])
    except (TypeError, ValueError) as err:
        raise HardwareError(f"{where}: expected.rccl.xgmi_links and nics_per_node are whole numbers ({err})") from None
    arch, cpu = str(raw["arch"]), str(raw["cpu"])
    if arch not in RCCL_ARCHS or cpu not in ("intel", "amd") or links < 1 or nics < 1:
        raise HardwareError(
            f"{where}: expected.rccl: arch one of {', '.join(RCCL_ARCHS)}, cpu intel or amd, "
            "xgmi_links and nics_per_node >= 1"
        )
    if not isinstance(raw["ll128"], bool):
        raise HardwareError(f"{where}: expected.rccl.ll128 is true or false")
    latency = _ranged(raw.get("net_latency_s", 0.0), "scaleout_latency_s", f"{where}: expected.rccl.net_latency_s")
    return RcclSystem(arch, links, nics, 0.0, cpu, raw["ll128"], float(latency or 0.0))


def _num(value: Any, key: str, where: str) -> float | None:
    # PyYAML reads `4.5e10` (no sign in the exponent) as a string, so coerce explicitly.
    if value is None:
        return None
    if isinstance(value, bool):  # float(True) is 1.0: a YAML `yes` is no bandwidth
        raise HardwareError(f"{where}: {key}={value!r} is not a number")
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError) as err:
        raise HardwareError(f"{where}: {key}={value!r} is not a number") from err


# The runner's rules for these values (runner.config.spec_values._check_hardware, which cannot
# be imported from here), applied to every entry read here too: a constant the runner refuses
# must not price a prediction either (a negative W gave "max(7.00 us, -130.49 us)").
MAX_DEVICES = 1 << 16  # runner.config.spec_values.MAX_DEVICES
_RATE = (lambda x: math.isfinite(x) and x > 0, "a finite number > 0")
_SECONDS = (lambda x: 0 <= x <= 1, "seconds from 0 to 1")  # NaN fails both comparisons
_COUNT = (lambda x: x.is_integer() and 1 <= x <= MAX_DEVICES, f"a whole number from 1 to {MAX_DEVICES}")


def out_of_range(key: str, value: float) -> str | None:
    """What the runner allows for the hardware field ``key`` (``flops_per_s.DTYPE`` too) when
    ``value`` lies outside it (``"a finite number > 0"``), else None."""
    ok, allowed = _COUNT if key in _COUNTS else _SECONDS if key in _LATENCIES else _RATE
    return None if ok(value) else allowed


def _ranged(value: Any, key: str, where: str, null: bool = True) -> float | None:
    """``value`` as a number (None stays None where ``null``) when the rule for ``key`` allows
    it, else a HardwareError of one line naming ``where``, ``key``, the value and the range."""
    number = _num(value, key, where)
    if number is None and null:
        return None
    allowed = out_of_range(key, math.nan if number is None else number)  # NaN fails every rule
    if allowed:
        raise HardwareError(f"{where}: {key}={value!r}: must be {'null or ' if null else ''}{allowed}")
    return number


_NUMBERS = (
    "link_bw_unidir_Bps",
    "link_bw_bidir_Bps",
    "hop_latency_s",
    "hbm_bw_Bps",
    "memory_bytes",
    "node_bw_unidir_Bps",
    "core_bw_unidir_Bps",
    "scaleout_bw_unidir_Bps",
    "scaleout_latency_s",
)
_LATENCIES = ("hop_latency_s", "scaleout_latency_s")  # in seconds; the others are rates or byte counts
_COUNTS = ("domain_size", "device_count")


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
    holds a value out of the runner's range (:func:`_ranged`)."""
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
