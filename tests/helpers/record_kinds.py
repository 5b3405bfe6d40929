"""Real points of every kind the runner writes a record for, for the record's round-trip test
(tests/analysis/runs/test_record.py): each a result.json as the runner wrote it."""

from __future__ import annotations

from pathlib import Path

from runner import run

FAST = ["timing.budget_s=0.2", "timing.min_iters=5", "timing.warmup_max_s=0.5", "trace.iters=2"]
USER_STEP = str(Path(__file__).with_name("user_step.py"))
FAILING_STEP = "def fails(x):\n    raise ValueError('the user step fails')\n"

# name -> the overrides of a point; "rounds" runs 2 rounds (the later one through the rounds'
# journal), "fails_*" are points that fail (before the worker, and in it part-way)
KINDS = {
    "collective_rounds": ["op=all_reduce", "op.size_bytes=16KiB", "timing.rounds=2"],
    "collective_quick": ["op=all_gather", "op.size_bytes=4KiB", "timing=quick"],
    "untraced": ["op=reduce_scatter", "op.size_bytes=8KiB", "timing.rounds=1", "trace.enabled=false"],
    "matmul": ["op=matmul", "op.dims={I: 128, J: 128, K: 128}", "timing.rounds=1"],
    "transformer_block": ["op=transformer_block", "op.dims={B: 8, S: 16, D: 32, F: 64, H: 2}", "timing.rounds=1"],
    "program": [
        "op=program",
        f"op.target={USER_STEP}:train_step",
        "op.inputs=['x[B_X, D]', 'w1[D, F]', 'w2[F, D]']",
        "op.dims={B: 16, D: 8, F: 16}",
        "timing.rounds=1",
    ],
    "fails_config": ["op=all_gather", "op.size_bytes=4KiB", "mesh.shape=3x5", "timing.rounds=1"],
    "fails_in_worker": ["op=program", "op.inputs=['x[B_X, D]']", "op.dims={B: 16, D: 8}", "timing.rounds=1"],
    "distributed": [
        "distributed=local",
        "mesh=xy_4x2",
        "distributed.cross_process_axis=Y",
        "op=all_gather",
        "op.axes=[Y]",
        "op.size_bytes=16KiB",
        "timing.rounds=1",
    ],
}


def real_records(root: Path, compose_cfg, kinds=tuple(KINDS)) -> dict[str, Path]:
    """Run each of ``kinds`` (names of :data:`KINDS`) into ``root/<name>``; their folders by name."""
    root.mkdir(parents=True, exist_ok=True)
    failing = root / "failing_step.py"
    failing.write_text(FAILING_STEP)
    out = {}
    for name in kinds:
        extra = [f"op.target={failing}:fails"] if name == "fails_in_worker" else []
        out[name] = root / name
        run(compose_cfg([*FAST, *KINDS[name], *extra]), out[name])
    return out
