"""A small real multirun through the CLI ends with summary.csv, fit.json and a report."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from shardlab_cli import analysis, runner

from analysis.runs.summary import COLUMN_ORDER, FIRST_COLUMNS

SIZES = ["1KiB", "64KiB", "1MiB"]
FAST = ["timing.rounds=2", "timing.budget_s=0.2", "timing.min_iters=5", "trace.iters=2"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "collectives"
    runner(
        "+sweep=collectives_sizes",
        f"op.size_bytes={','.join(SIZES)}",
        "op=all_gather,all_reduce",
        f"hydra.sweep.dir={out}",
        *FAST,
        expect=0,
    )
    return out


def test_every_point_has_its_folder_and_result(sweep):
    points = sorted(p for p in sweep.iterdir() if (p / "result.json").exists())
    assert len(points) == 2 * len(SIZES)
    for point in points:
        r = json.loads((point / "result.json").read_text())
        assert r["status"] == "ok", r["error"]
        assert (point / r["files"]["xplane"]).is_file() and (point / "hlo" / "compiled.hlo.txt").is_file()
        assert (point / ".hydra" / "overrides.yaml").is_file()


def test_summary_has_one_row_per_run_and_collective_with_units(sweep):
    s = pd.read_csv(sweep / "summary.csv")
    assert len(s) == 2 * len(SIZES)
    assert set(s["hlo_kind"]) == {"all-gather", "all-reduce"}
    assert {"V_bytes", "time_s", "busbw_Bps", "algbw_Bps", "trace_op_time_s", "trace_over_untraced"} <= set(s)
    # the file's columns as a person reads them: nccl-tests' table and the headline first, and every
    # column in its place (tests/analysis/runs/test_summary.py pins the order)
    assert list(s.columns[: len(FIRST_COLUMNS)]) == list(FIRST_COLUMNS)
    assert list(s.columns) == [c for c in COLUMN_ORDER if c in s]
    assert (s["busbw_Bps"] > 0).all() and (s["trace_op_time_s"] > 0).all()
    ag, ar = s[s["op"] == "all_gather"], s[s["op"] == "all_reduce"]
    # nccl-tests: busbw = algbw * (n-1)/n for AllGather and * 2(n-1)/n for AllReduce, n = 8
    assert (ag["busbw_Bps"] / ag["algbw_Bps"]).to_numpy() == pytest.approx(7 / 8)
    assert (ar["busbw_Bps"] / ar["algbw_Bps"]).to_numpy() == pytest.approx(14 / 8)


def test_fit_and_report_name_every_size_and_show_the_figures(sweep):
    fit = json.loads((sweep / "fit.json").read_text())
    assert {f["op"] for f in fit["fits"]} == {"all_gather", "all_reduce"}
    assert all(f["T_min_s"] > 0 for f in fit["fits"])
    # W only with a bandwidth regime: on a loaded machine 1 MiB may still be latency-bound here
    assert all((f["W_Bps"] > 0) == f["bandwidth_regime"] for f in fit["fits"] if f["W_Bps"] is not None)
    assert all(f["W_Bps"] is None and f["crossover_bytes"] is None for f in fit["fits"] if not f["bandwidth_regime"])
    md = (sweep / "report" / "report.md").read_text()
    for size in ("1 KiB", "64 KiB", "1 MiB"):
        assert f"| {size} |" in md
    html = (sweep / "report" / "index.html").read_text()
    # time, bus bandwidth with the ceiling, and measured / model exactly when the model could be
    # fitted (on cpu from the AllGather points, which need a bandwidth regime: a loaded run may have none)
    s = pd.read_csv(sweep / "summary.csv")
    has_model = s.loc[s["is_target"], "model_time_s"].notna().any()
    assert html.count("data:image/png;base64,") == 2 + int(has_model)
    assert ("measured_over_model.png" in md) == bool(has_model)
    assert md.index("## Headline") < md.index("## Figures") < md.index("## Results as nccl-tests prints them")
    assert "Fitted latency and bandwidth" in md and "**step** estimator" in md


def test_every_point_was_timed_in_two_interleaved_rounds(sweep):
    rounds = {}
    for point in sweep.iterdir():
        if (point / "result.json").exists():
            r = json.loads((point / "result.json").read_text())
            rounds[point.name] = r["timing"]["rounds"]
            assert [x["round"] for x in r["timing"]["rounds"]] == [1, 2]
            assert r["timing"]["summary"]["rounds"] == 2
    # round 2 ran after every point's round 1 (interleaved, not back to back)
    last_first = max(r[0]["started_at"] for r in rounds.values())
    assert all(r[1]["started_at"] >= last_first for r in rounds.values())
    assert (sweep / "sweep.json").is_file() and (sweep / "samples.csv").is_file()


def test_analysis_report_rebuilds_from_disk(sweep):
    (sweep / "report" / "report.md").unlink()
    analysis("report", sweep, timeout=120, expect=0)
    md = (sweep / "report" / "report.md").read_text()
    # the cpu entry has no published measurements to expect from: no expected columns (the model
    # table itself is there only where the sweep's fits gave the model constants)
    assert "measured/expected" not in md and "| expected |" not in md


def test_load_sweep_gives_the_profile_tables_of_the_points_profiled(sweep):
    from analysis.sweep import load_sweep

    assert all(len(t) == 0 for t in load_sweep(sweep).profiles.values())  # none profiled yet
    point = next(p for p in sorted(sweep.iterdir()) if p.name.startswith("002_"))
    analysis("profile", point, timeout=180, expect=0)
    profiles = load_sweep(sweep).profiles
    for name in ("collectives", "steps"):
        on_disk = pd.read_csv(point / "profile_report" / f"{name}.csv")
        got = profiles[name]
        assert set(got["point"]) == {point.name} and len(on_disk) > 0
        pd.testing.assert_frame_equal(got.drop(columns="point"), on_disk)
    # one collective per step of the 1 MiB AllGather's traced steps: the all-gather itself
    assert set(profiles["collectives"]["kind"]) == {"all-gather"}
