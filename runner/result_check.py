"""The result check: a point's output against its NumPy reference, shard by shard, as
nccl-tests' data check does. Its own file so that the mutation check (``[tool.mutmut]``) can
plant bugs in it without replanting them in the whole measurement."""

from __future__ import annotations

import jax
import numpy as np

from runner import meshes


def check(got, want, dtype: str, tolerance: float | None = None) -> dict:
    """Compare against the reference, as nccl-tests' data check does: every device's
    shard (each copy of a replicated result) against the same slice of the reference.

    Inputs are small integers whose sums the dtype holds exactly, so float32 and integer
    results must match exactly; 16-bit floats get a relative tolerance of 1e-2 (a program
    may set its own, ``tolerance``). A tuple of outputs is checked leaf by leaf against a
    tuple of references. With no reference (a user's program) the check is that it ran and
    every value is finite.
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
    pairs = meshes.shard_pairs(got, want) if hasattr(got, "addressable_shards") else [(None, np.asarray(got), want)]
    worst, wrong, shards, shape = 0.0, [], 0, None
    for device, g, w in pairs:
        shards += 1
        shape = list(g.shape) if shape is None else shape
        err = _rel_error(g, w, tol)
        if err is None or err > tol:
            wrong.append(device)
        worst = None if err is None or worst is None else max(worst, err)
    return {
        "passed": not wrong and shards > 0,
        "max_rel_error": worst,
        "tolerance": tol,
        "shape": shape,
        "shards_checked": shards,
        "wrong_devices": wrong,
    }


def _rel_error(got: np.ndarray, want: np.ndarray, tol: float) -> float | None:
    """Largest relative error (None for a shape mismatch)."""
    if got.shape != want.shape:
        return None
    if tol == 0.0 and np.array_equal(got, want):
        return 0.0
    g, w = got.astype(np.float32), want.astype(np.float32)
    return float(np.max(np.abs(g - w) / np.maximum(np.abs(w), 1.0))) if w.size else 0.0
