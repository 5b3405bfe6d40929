"""The result check: a point's output against its NumPy reference, shard by shard, as
nccl-tests' data check does. Its own file so that the mutation check (``[tool.mutmut]``) can
plant bugs in it without replanting them in the whole measurement.

Every shard is compared, and every copy of a replicated result, but the expected values of a
slice are computed once however many devices hold it: a replicated 64 MiB AllGather result is
8 copies of one slice, and evaluating the reference for each copy was most of the check's cost
(the reference is a :class:`~runner.worker.programs.base.LazyArray`, built element by element).
"""

from __future__ import annotations

import math

import jax
import numpy as np


def check(got, want, dtype: str, tolerance: float | None = None) -> dict:
    """Compare against the reference, as nccl-tests' data check does: every device's
    shard (each copy of a replicated result) against the same slice of the reference.

    Inputs are small integers whose sums the dtype holds exactly, so float32 and integer
    results must match exactly (an int8 sum that wrapped around differs); 16-bit floats get a
    relative tolerance of 1e-2 (a program may set its own, ``tolerance``). A tuple of outputs
    is checked leaf by leaf against a tuple of references. With no reference (a user's
    program) the check is that it ran and every value is finite.
    """
    if want is None:
        leaves = jax.tree.leaves(got)
        finite = all(bool(np.isfinite(np.asarray(x, dtype=np.float64)).all()) for x in leaves)
        return {"passed": finite, "kind": "finite", "outputs": len(leaves), "max_rel_error": None, "tolerance": None}
    if isinstance(got, (tuple, list)):
        parts = [check(g, w, dtype, tolerance) for g, w in zip(got, want)]
        errs = [p["max_rel_error"] for p in parts]
        return {
            "passed": len(parts) == len(want) and all(p["passed"] for p in parts),
            "max_rel_error": None if None in errs else max(errs, default=0.0),
            "tolerance": parts[0]["tolerance"] if parts else tolerance,
            "outputs": len(parts),
            "shards_checked": sum(p["shards_checked"] for p in parts),
            "wrong_devices": sorted({d for p in parts for d in p["wrong_devices"] if d is not None}),
        }
    tol = tolerance if tolerance is not None else (1e-2 if dtype in ("bfloat16", "float16") else 0.0)
    worst, wrong, shards, shape = 0.0, [], 0, None
    groups = _slices(got)  # the copies of each slice together: its reference is built once, then dropped
    for index, copies in groups.values():
        expected = _Expected(np.asarray(want if index is None else want[index]))
        for device, data in copies:
            g = np.asarray(data)
            shards += 1
            shape = list(g.shape) if shape is None else shape
            err = expected.rel_error(g, tol)
            if err is None or not err <= tol:  # a NaN is wrong too
                wrong.append(device)
            worst = None if err is None or worst is None else max(worst, err)
    return {
        "passed": not wrong and shards > 0,
        "max_rel_error": worst,
        "tolerance": tol,
        "shape": shape,
        "shards_checked": shards,
        "slices": len(groups),
        "wrong_devices": wrong,
    }


def _slices(got) -> dict:
    """``{key: (index, [(device id, shard data), ...])}``: the shards this process holds, grouped
    by the slice of the global array they hold (each copy of a replicated result is a shard of
    its own, with the same slice); a host array is one slice with no device. Nothing is copied
    to the host here. With several processes each compares the shards on its own devices."""
    if not hasattr(got, "addressable_shards"):
        return {None: (None, [(None, got)])}
    groups: dict = {}
    for s in got.addressable_shards:
        key = tuple((i.start, i.stop, i.step) if isinstance(i, slice) else i for i in s.index)
        groups.setdefault(key, (s.index, []))[1].append((s.device.id, s.data))
    return groups


class _Expected:
    """One slice of the reference, with what each comparison against it needs computed once."""

    def __init__(self, want: np.ndarray):
        self.want = want
        self._w32: np.ndarray | None = None
        self._scale: np.ndarray | None = None

    def rel_error(self, got: np.ndarray, tol: float) -> float | None:
        """Largest relative error of ``got`` against this slice (None for a shape mismatch):
        |got - want| / max(|want|, 1), elementwise."""
        w = self.want
        if got.shape != w.shape:
            return None
        if not w.size:
            return 0.0
        if tol == 0.0 and np.array_equal(got, w):  # the usual case: bit for bit, one pass
            return 0.0
        if self._w32 is None:
            self._w32 = w.astype(np.float32)
            self._scale = 1.0 / np.maximum(np.abs(self._w32), np.float32(1.0))
        err = float(np.max(np.abs(got.astype(np.float32) - self._w32) * self._scale))
        return err if err == err else math.inf  # a NaN anywhere: as wrong as can be
