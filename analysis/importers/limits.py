"""What an imported file may hold: the bounds every importer applies to the numbers it reads,
and the one way a refusal reads.

The runner refuses a config value it cannot use in one line naming the key, the value and what
is allowed (:mod:`runner.config.spec_values`); these are the same rules for a number another
tool wrote. Each bound is far outside what a real run prints and far inside what the readers
after the import (``load_sweep``, the report, the nccl-tests export) hold in memory or on disk,
so a count field alone never decides how much is kept.
"""

from __future__ import annotations

import math

from analysis.importers import ImportFormatError
from analysis.runs.rundir import MAX_TIME_S

# over twice the largest accelerator cluster built (a few hundred thousand GPUs); the report and
# the nccl-tests export work per rank, so a typo'd count must not reach them
MAX_RANKS = 1 << 20
# one device's buffer: the largest accelerators hold under 300 GB; times MAX_RANKS it is
# rundir.MAX_BYTES, the readers' own bound on V (an AllToAll's V is ranks x S)
MAX_SIZE_BYTES = 1 << 40
# each point is a folder that every report reads (about 0.1 s each on 2 cores); 4096 is over a
# hundred whole nccl-tests sweeps (8 B to 16 GiB by factors of 2 is 32 sizes)
MAX_POINTS = 4096
MIN_TIME_S = 1e-9  # a nanosecond, about one clock cycle: no collective returns sooner
# MAX_TIME_S (a week) is the readers': a result whose median is longer reads back as damaged
MAX_BANDWIDTH_Bps = 1e15  # 1 PB/s: hundreds of times any link's (NVLink 5: 1.8 TB/s a GPU)
MAX_NAME_CHARS = 256  # a host name has at most 253 characters, CUDA's device name 256

SIZE_ALLOWED = f"a whole number of bytes from 0 to {MAX_SIZE_BYTES} (1 TiB, more than any device holds)"
COUNT_ALLOWED = f"a whole number of elements from 0 to {MAX_SIZE_BYTES}"
RANKS_ALLOWED = f"at most {MAX_RANKS} ranks (over twice the largest cluster built)"
TIME_US_ALLOWED = f"a time from {MIN_TIME_S * 1e6:g} us to a week ({MAX_TIME_S * 1e6:.0f} us)"
BANDWIDTH_GBPS_ALLOWED = f"a bandwidth from 0 to {MAX_BANDWIDTH_Bps / 1e9:.0f} GB/s (1 PB/s)"
POINTS_ALLOWED = (
    f"at most {MAX_POINTS} points in one import (each is a folder every report reads; that is over a hundred "
    "whole nccl-tests sweeps)"
)
WRONG_ALLOWED = "a whole number of wrong elements from 0, or N/A (not checked)"
MISSING = object()  # a field the file does not have, told apart from one that is null


def as_number(value) -> float | None:
    """``value`` (a JSON number, or a number as a tool prints it) as a finite float; None for
    anything else: NaN, infinities, booleans, lists, words."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        x = float(value)
    except (ValueError, OverflowError):  # "fast"; an int past float's range
        return None
    return x if math.isfinite(x) else None


def as_whole(value) -> int | None:
    """``value`` as a whole number (``1024``, ``1024.0``, ``"1024"``, ``"1e+06"``), or None."""
    x = as_number(value)
    return int(x) if x is not None and x.is_integer() else None


def check(ok: bool, path, line: int | None, field: str, value, allowed: str) -> None:
    """Refuse ``value`` of ``field`` unless ``ok``: ImportFormatError naming the file, the line,
    the field, the value and what is allowed."""
    if not ok:
        said = " is missing" if value is MISSING else f"={shown(value)}"
        raise ImportFormatError(path, line, f"{field}{said}: must be {allowed}")


def checked_name(value, path, line: int | None, field: str) -> str:
    """A name copied into every point (a host, a device kind, a type): refused past
    :data:`MAX_NAME_CHARS`, so one field cannot make every point's file large."""
    text = str(value)
    check(len(text) <= MAX_NAME_CHARS, path, line, field, value, f"a name of at most {MAX_NAME_CHARS} characters")
    return text


def small(d: dict, max_items: int = 64) -> dict:
    """The first ``max_items`` entries of ``d`` whose values are plain (null, a number, a short
    string): what every point copies of a run's header or a line's metrics stays small
    whatever else the file holds."""
    out = {}
    for k, v in d.items():
        if len(out) >= max_items:
            break
        plain = v is None or isinstance(v, (bool, int, float)) or (isinstance(v, str) and len(v) <= MAX_NAME_CHARS)
        if plain and len(str(k)) <= MAX_NAME_CHARS:
            out[str(k)] = v
    return out


def shown(value) -> str:
    """The value as a message quotes it, cut where a file holds a long one."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
