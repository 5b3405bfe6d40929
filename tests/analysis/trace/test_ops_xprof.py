"""shardlab's device-op table against XProf's own ``hlo_stats`` tool, on the real XLA traces of
``../shared/traces/`` (TPU v6e, MI300X, MI355X; the TensorFlow V100 trace is not XLA's).

XProf is a required dependency (``tensorboard-plugin-profile``): its converter runs on a copy of
each trace, in a folder of its own (it writes a cache file beside the trace it reads). For every
HLO op, the number of executions and the total device time must be XProf's: the first time XProf
was held against shardlab (2026-11-28) every op agreed within 0.001% except a host offload's
``copy-start``/``copy-done``, which shardlab had joined into one span.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis.trace import device_ops, read_xplane

TRACES = Path(__file__).resolve().parents[4] / "shared" / "traces"
XLA_TRACES = ["tpu_v6e1_pallas_matmul", "gpu_mi300x8_conv3d", "gpu_mi355x_te_fused_attn"]


def _xprof_hlo_stats(path: Path) -> pd.DataFrame:
    """XProf's hlo_stats table of one trace: per HLO op, occurrences and total time (us)."""
    convert = pytest.importorskip("xprof.convert.raw_to_tool_data")
    data, _ = convert.xspace_to_tool_data([str(path)], "hlo_stats", {})
    table = json.loads(data)
    cols = [c["id"] for c in table["cols"]]
    rows = pd.DataFrame([[cell.get("v") for cell in row["c"]] for row in table["rows"]], columns=cols)
    return rows.groupby("hlo_op_name").agg(occurrences=("occurrences", "sum"), total_us=("total_time", "sum"))


@pytest.mark.parametrize("name", XLA_TRACES)
def test_every_op_has_xprofs_executions_and_total_time(name, tmp_path):
    source = TRACES / f"{name}.xplane.pb"
    if not source.is_file():
        pytest.skip(f"no real traces at {TRACES}")
    path = tmp_path / source.name  # XProf writes its cache beside the file: never in shared/
    shutil.copy(source, path)
    xprof = _xprof_hlo_stats(path)
    ops = device_ops(read_xplane(path))
    ours = ops.groupby("hlo_op").agg(occurrences=("duration_ns", "size"), total_us=("duration_ns", "sum"))
    ours["total_us"] = ours["total_us"] / 1e3
    assert len(xprof) > 0
    assert sorted(ours.index) == sorted(xprof.index)  # the same ops, no more, no fewer
    both = xprof.merge(ours, left_index=True, right_index=True, suffixes=("", "_shardlab"))
    assert (both["occurrences"] == both["occurrences_shardlab"]).all(), both
    rel = (both["total_us_shardlab"] / both["total_us"] - 1).abs()
    assert rel.max() < 1e-5, both[rel >= 1e-5]
