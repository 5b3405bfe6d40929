"""``python -m analysis compare``: two real sweeps (float32 against bfloat16, from the
``tiny_sweeps`` fixture) and the pure functions behind the report."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from analysis import compare
from analysis.cli import main as analysis_main
from analysis.runs.record import Result


@pytest.fixture(scope="module")
def report(tiny_sweeps, tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    assert analysis_main(["compare", str(tiny_sweeps["float32"]), str(tiny_sweeps["bfloat16"]), "--out", str(out)]) == 0
    return out


def test_writes_markdown_html_csv_and_figures(report):
    for name in (
        "compare.md",
        "index.html",
        "ratios.csv",
        "fits.csv",
        "config_diff.csv",
        "time_vs_size.png",
        "busbw_vs_size.png",
        "ratio_vs_size.png",
    ):
        assert (report / name).is_file(), name
    assert (report / "index.html").read_text().count("data:image/png;base64,") == 3


def test_labels_sweeps_by_the_one_differing_key_and_lists_it(report):
    md = (report / "compare.md").read_text()
    assert md.startswith("# shardlab comparison: dtype=float32 vs dtype=bfloat16")
    assert "| key | dtype=float32 | dtype=bfloat16 |" in md
    assert "| dtype | float32 | bfloat16 |" in md
    diff = pd.read_csv(report / "config_diff.csv")
    assert list(diff["key"]) == ["dtype"]


def test_ratio_table_has_every_collective_and_size_with_a_ci(report):
    r = pd.read_csv(report / "ratios.csv")
    assert len(r) == 2 * 4
    assert set(r["op"]) == {"all_gather", "all_reduce"}
    assert sorted(set(r["size_bytes"])) == [4096, 32768, 262144, 2097152]
    assert (r["sweep"] == "dtype=bfloat16").all() and (r["reference"] == "dtype=float32").all()
    assert r["time_ratio"].to_numpy() == pytest.approx((r["time_s"] / r["time_s_ref"]).to_numpy())
    assert (r["time_ratio_ci_low"] <= r["time_ratio"]).all() and (r["time_ratio"] <= r["time_ratio_ci_high"]).all()
    md = (report / "compare.md").read_text()
    assert "## Time ratios" in md and "## Fitted constants side by side" in md
    assert "W (B/s) [dtype=float32]" in md and "W (B/s) [dtype=bfloat16]" in md


def test_no_shared_points_and_empty_folders_exit_2_with_one_line(tiny_sweeps, tmp_path, capsys):
    # AllGather points of one sweep against AllReduce points of the other: nothing in common.
    for name, dtype, op in (("ag", "float32", "all_gather"), ("ar", "bfloat16", "all_reduce")):
        for point in tiny_sweeps[dtype].glob(f"*op={op}*"):
            shutil.copytree(point, tmp_path / name / point.name)
    assert analysis_main(["compare", str(tmp_path / "ag"), str(tmp_path / "ar"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "share no points" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()
    (tmp_path / "empty").mkdir()
    assert analysis_main(["compare", str(tiny_sweeps["float32"]), str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip()
    assert "no run folders" in err and len(err.splitlines()) == 1


def test_a_column_empty_in_one_sweep_keeps_the_other_sweeps_numbers():
    # A family with no bandwidth regime has no W (None), the other sweep's family has one; a CPU
    # sweep has no device time. pandas 2.2 warns on the plain concat, pandas 3 makes it object.
    cpu = pd.DataFrame({"op": ["all_gather"], "W_Bps": [None], "device_time_s": [None], "sweep": ["cpu"]})
    gpu = pd.DataFrame({"op": ["all_gather"], "W_Bps": [3e9], "device_time_s": [2e-5], "sweep": ["gpu"]})
    empty = pd.DataFrame(columns=["op", "W_Bps", "extra", "sweep"])
    out = compare.stack_sweeps([cpu, gpu, empty])
    assert list(out.columns) == ["op", "W_Bps", "device_time_s", "sweep", "extra"]
    assert out["W_Bps"].dtype == "float64" and out["device_time_s"].dtype == "float64"
    assert out["W_Bps"].isna().tolist() == [True, False] and out.at[1, "W_Bps"] == 3e9
    assert out["sweep"].tolist() == ["cpu", "gpu"] and out["extra"].isna().all()


def test_flatten_config_and_differing_keys():
    flat = compare.flatten_config({"mesh": {"name": "x8", "axes": {"X": 8}}, "op": {"axes": ["X"]}, "dtype": "f32"})
    assert flat == {"mesh.name": "x8", "mesh.axes.X": "8", "op.axes": '["X"]', "dtype": "f32"}
    values = compare.config_values(
        {
            "a": [
                Result.from_json({"config": {"mesh": {"name": "x8", "axes": {"X": 8}}, "op": {"size_bytes": s}}})
                for s in ("1KiB", "2KiB")
            ],
            "b": [
                Result.from_json(
                    {"config": {"mesh": {"name": "xy_4x2", "axes": {"X": 4, "Y": 2}}, "op": {"size_bytes": s}}}
                )
                for s in ("1KiB", "2KiB")
            ],
        }
    )
    diff = compare.differing_keys(values, ["a", "b"])
    assert list(diff["key"]) == ["mesh.axes.X", "mesh.axes.Y", "mesh.name"]  # the swept size is the same
    assert diff.set_index("key").loc["mesh.axes.Y", "a"] == "(absent)"
    assert compare.sweep_labels(["a", "b"], diff) == ["mesh=x8", "mesh=xy_4x2"]
    present, absent = compare.split_absent(diff)
    assert list(absent["key"]) == ["mesh.axes.Y"] and "mesh.axes.Y" not in set(present["key"])
    both = pd.concat([diff, pd.DataFrame([{"key": "dtype", "a": "float32", "b": "bfloat16"}])])
    assert compare.sweep_labels(["a", "b"], both) == ["a", "b"]
    assert compare.sweep_labels(["run", "run"], both) == ["0:run", "1:run"]


def test_match_leaves_out_the_setting_the_sweeps_differ_in_and_combines_cis():
    def pts(sweep, mesh, sizes, t):
        return pd.DataFrame(
            {
                "sweep": sweep,
                "op": "all_gather",
                "size_bytes": sizes,
                "V_bytes": sizes,
                "axes": "X",
                "mesh": mesh,
                "axis_sizes": "8" if mesh == "x8" else "4",
                "dtype": "float32",
                "time_s": t,
                "time_ci_low_s": np.multiply(t, 0.9),
                "time_ci_high_s": np.multiply(t, 1.1),
                "busbw_Bps": np.divide(sizes, t),
            }
        )

    points = pd.concat([pts("x8", "x8", [1024, 2048], [1.0, 2.0]), pts("xy", "xy_4x2", [2048, 4096], [3.0, 4.0])])
    keys, varied = compare.match_keys(points)
    assert varied == ["mesh", "axis_sizes"] and "mesh" not in keys
    r = compare.ratio_table(points, keys, "x8")
    assert list(r["size_bytes"]) == [2048] and r["time_ratio"].iloc[0] == pytest.approx(1.5)
    half = np.hypot(np.log(1.1), np.log(1 / 0.9))  # one side of each interval, in quadrature
    assert r["time_ratio_ci_high"].iloc[0] == pytest.approx(1.5 * np.exp(half))
    assert bool(r["differs"].iloc[0])
