"""The numpy pieces the xplane reader (:mod:`.xplane`, :mod:`.event_stats`) shares: a metadata map
turned into arrays to look up many ids at once, object arrays of Python strs, and C++'s integer
division."""

from __future__ import annotations

import numpy as np


class Lookup:
    """A metadata map (id -> name) as arrays, to look up many ids at once: ``code_of`` turns a
    name into the integer the lookup gives (default: the name's position in the map, from
    1), ``missing`` is what an id without an entry gives. Ids are small counters in practice:
    then a table indexed by id, else a binary search."""

    def __init__(self, names: dict[int, str], missing: int, code_of=None):
        keys = np.fromiter(names, np.int64)
        if code_of is None:
            codes = np.arange(1, len(names) + 1)
        else:
            codes = np.fromiter(map(code_of, names.values()), np.int64)
        self.missing = missing
        self.table = None
        # a table only while its size stays within a few times the number of ids: a file may
        # hold an id near 2**63, for which a table would not fit in memory
        if keys.size and 0 <= keys.min() and keys.max() < 4 * keys.size + 4096:
            self.table = np.full(int(keys.max()) + 2, missing)  # the last entry: not a key
            self.table[keys] = codes
        order = np.argsort(keys)
        self.keys, self.codes = keys[order], codes[order]

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        if self.table is not None:  # ids past the table (negative ones too, as uint64) read its last entry
            return self.table[np.minimum(ids.view(np.uint64), np.uint64(self.table.size - 1))]
        if not self.keys.size:
            return np.full(ids.shape, self.missing)
        pos = np.minimum(np.searchsorted(self.keys, ids), self.keys.size - 1)
        return np.where(self.keys[pos] == ids, self.codes[pos], self.missing)


def objects(items: list) -> np.ndarray:
    """``items`` as an object array: a str stays a Python str (``np.array`` of strs would make
    fixed-width numpy text)."""
    out = np.empty(len(items), object)
    out[:] = items
    return out


def trunc_div(v: np.ndarray, d: int) -> np.ndarray:
    """C++ integer division (toward zero) of int64s. Floor division, then one up where a
    negative value left a remainder: ``abs`` first overflowed at the minimum int64."""
    q = v // d
    return q + ((v < 0) & (q * d != v))
