"""Range checks of the config's plain values that :mod:`runner.config.spec` runs before anything else.

OmegaConf checks a value's type; these check that it is one the runner can use all the way
through: a seed NumPy and ``random`` accept, a timeout ``subprocess`` and JAX can wait for,
sizes whose byte counts and memory estimates stay far from float overflow, hardware constants
the book can divide by. Each failure is a :class:`ConfigError` of one line naming the key, the
value and what is allowed, raised before JAX starts.
"""

from __future__ import annotations

import math
import re
from typing import Any

from analysis.book.hardware import INTERCONNECTS, WRAPAROUND_RULES
from analysis.book.units import SizeError, parse_size
from runner.errors import ConfigError

MAX_BYTES = 1 << 50  # 1 PiB: far above any device's memory, far below float overflow in the estimates
MAX_DEVICES = 1 << 16  # more devices than any slice or cluster the runner could join
MAX_TIMEOUT_S = 7 * 24 * 3600  # a week: longer "timeouts" overflow the waits of subprocess and JAX
MAX_DIM = 1 << 40  # one dim of op.dims; products are checked against MAX_BYTES by the memory estimate
MAX_SEED = 2**32 - 1  # numpy.random.default_rng and random.Random both accept 0..2**32-1
MAX_SWEEP_SIZES = 64  # sizes.min..sizes.max: more points than a sweep could finish
COORDINATOR = re.compile(r"\[?[A-Za-z0-9_.:-]+\]?:([0-9]{1,5})")  # host:port, [v6]:port


def whole(value: Any) -> bool:
    """A Python int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def finite(value: Any) -> bool:
    """An int or float (not a bool) that is finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _need(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value!r}: must be {allowed}")


def check_size(value: Any, key: str) -> int:
    """Bytes from ``16MiB``/``4096``, at most :data:`MAX_BYTES`; ConfigError naming ``key``."""
    try:
        n = parse_size(value, key)
    except SizeError as exc:
        raise ConfigError(str(exc)) from None
    except (OverflowError, ValueError):  # 1e400 -> inf, "1e999KiB": not a byte count at all
        raise ConfigError(f"{key}={value!r}: expected a byte count such as 4096, 64KiB or 16MiB") from None
    _need(n <= MAX_BYTES, key, value, "at most 1PiB (1125899906842624 bytes)")
    return n


def check_values(c: dict) -> None:
    """Every plain numeric and string value of the resolved config ``c`` is in range (``timeout_s``
    is checked with the timing it must cover, in :mod:`runner.config.spec`)."""
    t = c["timing"]
    seed = t["seed"]
    _need(whole(seed) and 0 <= seed <= MAX_SEED, "timing.seed", seed, f"a whole number from 0 to {MAX_SEED}")
    _check_mesh(c["mesh"])
    _check_sizes(c["sizes"])
    _check_distributed(c["distributed"])
    _check_hardware(c["hardware"])
    dims = c["op"].get("dims")
    if dims is not None:
        _need(isinstance(dims, dict), "op.dims", dims, "a mapping of dim names to sizes, e.g. {B: 64, D: 512}")
        for name, size in dims.items():
            _need(whole(size) and 1 <= size <= MAX_DIM, f"op.dims.{name}", size, f"a whole number from 1 to {MAX_DIM}")


def _check_mesh(mesh: dict) -> None:
    axes = mesh.get("axes") or {}
    for name, size in axes.items():
        _need(
            size == -1 or 1 <= size <= MAX_DEVICES,
            f"mesh.axes.{name}",
            size,
            f"from 1 to {MAX_DEVICES}, or -1 for all the devices left",
        )
    known = math.prod(s for s in axes.values() if s != -1)
    _need(known <= MAX_DEVICES, "mesh.axes", axes, f"sizes whose product is at most {MAX_DEVICES} devices")
    shape = mesh.get("shape")
    if shape is not None:
        sizes = str(shape).lower().split("x")
        ok = all(re.fullmatch(r"-1|[1-9][0-9]{0,5}", s) for s in sizes)
        _need(
            ok and math.prod(max(int(s), 1) for s in sizes) <= MAX_DEVICES,
            "mesh.shape",
            shape,
            f"sizes joined by x, e.g. 8 or 4x2, at most {MAX_DEVICES} devices (-1: the devices left)",
        )


def _check_sizes(sizes: dict) -> None:
    lo, hi = check_size(sizes["min"], "sizes.min"), check_size(sizes["max"], "sizes.max")
    factor = sizes["factor"]
    _need(whole(factor) and 2 <= factor <= 1024, "sizes.factor", factor, "a whole number from 2 to 1024")
    _need(hi >= lo, "sizes.max", sizes["max"], f"at least sizes.min={sizes['min']!r}")
    points = int(math.log(hi // lo, factor)) + 1 if hi // lo >= 1 else 1
    _need(
        points <= MAX_SWEEP_SIZES,
        "sizes.max",
        sizes["max"],
        f"within {MAX_SWEEP_SIZES} sizes of sizes.min (factor {factor}): {points} sizes asked for",
    )


def _check_distributed(d: dict) -> None:
    _need(
        finite(d["timeout_s"]) and 0 < d["timeout_s"] <= 86400,
        "distributed.timeout_s",
        d["timeout_s"],
        "a finite number of seconds > 0, at most 86400 (a day)",
    )
    for key, top in (("num_processes", 4096), ("devices_per_process", 1024)):
        v = d.get(key)
        ok = v is None or (whole(v) and 1 <= v <= top)
        _need(ok, f"distributed.{key}", v, f"null or a whole number from 1 to {top}")
    pid, n = d.get("process_id"), d.get("num_processes")
    _need(
        pid is None or (whole(pid) and 0 <= pid < (n or 4096)),
        "distributed.process_id",
        pid,
        f"null or a whole number from 0 to {(n or 4096) - 1} (below distributed.num_processes)",
    )
    addr = d.get("coordinator_address")
    if addr is not None:
        m = COORDINATOR.fullmatch(str(addr))
        _need(
            bool(m) and 1 <= int(m.group(1)) <= 65535,
            "distributed.coordinator_address",
            addr,
            "null or host:port with a port from 1 to 65535, e.g. 10.0.0.1:1234",
        )


_POSITIVE = (
    "link_bw_unidir_Bps",
    "link_bw_bidir_Bps",
    "hbm_bw_Bps",
    "memory_bytes",
    "node_bw_unidir_Bps",
    "core_bw_unidir_Bps",
    "scaleout_bw_unidir_Bps",
)
_NONNEGATIVE = ("hop_latency_s", "scaleout_latency_s")


def _check_hardware(hw: dict) -> None:
    for key in _POSITIVE:
        v = hw.get(key)
        _need(v is None or (finite(v) and v > 0), f"hardware.{key}", v, "null or a finite number > 0")
    for key in _NONNEGATIVE:
        v = hw.get(key)
        _need(v is None or (finite(v) and 0 <= v <= 1), f"hardware.{key}", v, "null or seconds from 0 to 1")
    for key in ("device_count", "domain_size"):
        v = hw.get(key)
        _need(
            v is None or (whole(v) and 1 <= v <= MAX_DEVICES),
            f"hardware.{key}",
            v,
            f"null or a whole number from 1 to {MAX_DEVICES}",
        )
    for dtype, rate in (hw.get("flops_per_s") or {}).items():
        _need(finite(rate) and rate > 0, f"hardware.flops_per_s.{dtype}", rate, "a finite number > 0")
    for key, allowed in (("interconnect", INTERCONNECTS), ("wraparound", WRAPAROUND_RULES)):
        v = hw.get(key)
        _need(v is None or v in allowed, f"hardware.{key}", v, f"null or one of {', '.join(allowed)}")
    for pattern in hw.get("device_kind_patterns") or []:
        try:
            re.compile(str(pattern))
        except re.error as exc:
            raise ConfigError(f"hardware.device_kind_patterns: {pattern!r} is not a regex ({exc})") from None
