"""The values a hardware entry's numbers may take: what the runner allows for each field, and
the readers that turn a YAML value into a number or a one-line HardwareError naming it
(:mod:`analysis.book.hardware` and the ``expected:`` block's readers,
:mod:`analysis.book.hardware_expected`, both apply them)."""

from __future__ import annotations

import math
from typing import Any

from analysis.book.errors import HardwareError


def number(value: Any, key: str, where: str) -> float | None:
    """``value`` as a float (None stays None), or a HardwareError naming ``where`` and ``key``."""
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


NUMBER_KEYS = (
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
LATENCY_KEYS = ("hop_latency_s", "scaleout_latency_s")  # in seconds; the others are rates or byte counts
COUNT_KEYS = ("domain_size", "device_count")


def out_of_range(key: str, value: float) -> str | None:
    """What the runner allows for the hardware field ``key`` (``flops_per_s.DTYPE`` too) when
    ``value`` lies outside it (``"a finite number > 0"``), else None."""
    ok, allowed = _COUNT if key in COUNT_KEYS else _SECONDS if key in LATENCY_KEYS else _RATE
    return None if ok(value) else allowed


def ranged(value: Any, key: str, where: str, null: bool = True) -> float | None:
    """``value`` as a number (None stays None where ``null``) when the rule for ``key`` allows
    it, else a HardwareError of one line naming ``where``, ``key``, the value and the range."""
    x = number(value, key, where)
    if x is None and null:
        return None
    allowed = out_of_range(key, math.nan if x is None else x)  # NaN fails every rule
    if allowed:
        raise HardwareError(f"{where}: {key}={value!r}: must be {'null or ' if null else ''}{allowed}")
    return x
