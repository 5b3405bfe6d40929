"""Sizes and times, parsed from what people write and printed for people to read.

Sizes follow nccl-tests where it has a convention: a bare ``K``, ``M`` or ``G`` is binary
(``128M`` = 128 x 2^20 bytes, as nccl-tests' ``-b``/``-e`` read it), as are ``KiB``, ``MiB``,
``GiB`` in any case (``16mib``); ``KB``, ``MB``, ``GB`` are decimal (10^3, 10^6, 10^9). ``T``
and ``P`` follow the same rules, up to ``1PiB``, the runner's largest size, which is written so.
Printed sizes say which: ``MiB`` is binary, ``MB`` decimal. Bandwidths are printed in
decimal ``GB/s`` (10^9 bytes per second), as nccl-tests prints them.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from analysis.book.errors import BookError

# P is here because the runner's bound is 1PiB (runner.config.spec_values.MAX_BYTES): its
# message "at most 1PiB" must name a size this parser reads.
BINARY = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:([kmgtp])(i?b?))?\s*(b?)\s*$", re.IGNORECASE)
# Exact spellings, largest unit first, for format_size.
_EXACT = sorted(
    [(f"{u.upper()}iB", s) for u, s in BINARY.items()] + [(f"{u.upper()}B", s) for u, s in DECIMAL.items()],
    key=lambda us: -us[1],
)
SIZE_EXAMPLES = "4096, 64KiB, 16MiB, 128M (binary, as nccl-tests), 1GB (decimal)"


class SizeError(BookError):
    """A size that cannot be read; the message names the key and shows the accepted forms."""


def parse_size(value: Any, key: str = "size") -> int:
    """Bytes from ``4096``, ``16MiB``, ``16mib``, ``128M``, ``4G`` (binary) or ``1KB``, ``1GB``
    (decimal). Raises :class:`SizeError` naming ``key``."""
    if isinstance(value, bool):
        raise SizeError(f"{key}={value!r}: expected a byte count such as {SIZE_EXAMPLES}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, float) and value.is_integer():
        n = int(value)
    else:
        m = _SIZE_RE.match(str(value))
        if not m:
            raise SizeError(f"{key}={value!r}: expected a byte count such as {SIZE_EXAMPLES}")
        number, prefix, rest, plain_b = m.group(1), (m.group(2) or "").lower(), (m.group(3) or "").lower(), m.group(4)
        if plain_b and prefix:
            raise SizeError(f"{key}={value!r}: expected a byte count such as {SIZE_EXAMPLES}")
        decimal = prefix and rest == "b"  # KB, MB, GB: decimal; K, KiB, Ki: binary
        scale = (DECIMAL if decimal else BINARY)[prefix] if prefix else 1
        # exact arithmetic: through a float, 1.00000000000000001PiB rounded to 1PiB and passed the bound
        try:
            exact = Fraction(number) * scale
        except ValueError:  # more digits than Python converts (4300)
            raise SizeError(f"{key}={_cut(value)}: expected a byte count such as {SIZE_EXAMPLES}") from None
        if exact.denominator != 1:
            raise SizeError(f"{key}={value!r} is not a whole number of bytes")
        n = int(exact)
    if n <= 0:
        raise SizeError(f"{key}={value!r}: must be a positive number of bytes")
    return n


def _cut(value: Any) -> str:
    """``value`` quoted, at most 40 characters of it: a size of 5000 digits is one line still."""
    text = str(value)
    return repr(text if len(text) <= 40 else text[:37] + "...")


def format_size(n: int) -> str:
    """An exact, re-parsable spelling: 4096 -> ``4KiB``, 16000000 -> ``16MB``, 7 -> ``7B``.

    The largest unit (binary or decimal) that divides ``n`` wins, so a decimal size is never
    written as thousands of KiB.
    """
    n = int(n)
    for unit, scale in _EXACT:
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"


def fmt_bytes(n: Any) -> str:
    """Bytes for people, binary units stated: 8388608 -> ``8 MiB``, 16e6 -> ``15.3 MiB``."""
    if n is None or (isinstance(n, float) and not math.isfinite(n)):
        return "" if n is None or math.isnan(n) else "inf"
    n = float(n)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.3g} B"


def fmt_time(t: float | None, digits: int = 2) -> str:
    """Seconds in a readable unit with ``digits`` decimals: 2.33e-05 -> ``23.30 us``."""
    if t is None or (isinstance(t, float) and math.isnan(t)):
        return "n/a"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(t) >= scale:
            return f"{t / scale:.{digits}f} {unit}"
    return f"{t * 1e9:.{digits}f} ns"


def fmt_duration(t: float | None) -> str:
    """Seconds for tables and headlines, 3 significant digits: 1.55e-4 -> ``155 us``."""
    if t is None or (isinstance(t, float) and not math.isfinite(t)):
        return ""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(t) >= scale:
            return f"{t / scale:.3g} {unit}"
    return f"{t * 1e9:.3g} ns"


def fmt_bandwidth(bps: float | None) -> str:
    """Bytes per second in decimal GB/s (as nccl-tests): 1.35e9 -> ``1.35 GB/s``."""
    if bps is None or (isinstance(bps, float) and not math.isfinite(bps)):
        return ""
    return f"{bps / 1e9:.3g} GB/s"


def fmt_pct(share: Any, digits: int = 0) -> str:
    """A share as a percentage (``0.123`` -> ``12%``, ``12.3%`` with ``digits=1``); "" when
    it is missing (None, NaN, pandas' NA)."""
    try:
        if share is None or math.isnan(share):
            return ""
    except TypeError:
        return ""
    return f"{share:.{digits}%}"


def fmt_num(x: float) -> str:
    """A number in a formula, to 4 significant digits."""
    return f"{x:.4g}"
