"""One point as an importer reads it from another tool's log (an nccl-tests all_reduce row on
two H100 nodes), for the tests of the importers' sweep writer and of the record."""

from __future__ import annotations

from analysis.importers.sweep_writer import ImportedPoint


def imported_point(**over) -> ImportedPoint:
    """An all_reduce of 1 KiB over 16 ranks on 2 nodes in 10 us, with ``over`` changed."""
    kw = dict(
        op="all_reduce",
        dtype="float32",
        V_bytes=1024.0,
        S_bytes=1024.0,
        time_s=1e-5,
        ranks=16,
        nodes=2,
        hosts=["a", "b"],
        device_kind="NVIDIA H100 80GB HBM3",
        backend="gpu",
        tool="nccl-tests",
        origin={"file": "f.txt", "run": 0, "line": 3},
        wrong=0,
    )
    kw.update(over)
    return ImportedPoint(**kw)
