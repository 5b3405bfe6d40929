"""A small real sweep folder, laid out as Hydra's multirun lays it out, for report tests."""

from __future__ import annotations

from pathlib import Path

from runner import run

FAST = ["timing.rounds=1", "timing.budget_s=0.2", "timing.min_iters=5"]


def small_sweep(root: Path, compose_cfg, sizes=("1KiB", "16KiB", "256KiB"), extra=()) -> Path:
    """Run an AllGather at each size into ``root/<n>_op.size_bytes=<size>``; return ``root``."""
    for n, size in enumerate(sizes):
        result = run(compose_cfg([f"op.size_bytes={size}", *FAST, *extra]), root / f"{n}_op.size_bytes={size}")
        assert result["status"] == "ok", result["error"]
    return root
