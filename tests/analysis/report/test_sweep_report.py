"""Damaged files in one point folder are listed as skipped, with why; the report still builds."""

from __future__ import annotations

import json
import re

import pandas as pd
from small_sweep import small_sweep

from analysis.report import write_report

SIZES = ("1KiB", "16KiB", "64KiB", "256KiB")


def test_truncated_trace_and_corrupt_hlo_are_skipped_and_the_report_stands(tmp_path, compose_cfg):
    root = small_sweep(tmp_path / "sweep", compose_cfg, sizes=SIZES, extra=["trace.iters=2"])
    points = sorted(p for p in root.iterdir() if p.is_dir())
    files = [json.loads((j / "result.json").read_text())["files"] for j in points]

    xplane = points[1] / files[1]["xplane"]  # a trace cut short, as by a full disk or a killed writer
    xplane.write_bytes(xplane.read_bytes()[: xplane.stat().st_size // 3])
    (points[2] / files[2]["hlo_compiled"]).write_bytes(b"\xff\xfe\x00 not text")  # not HLO at all
    hlo = points[3] / files[3]["hlo_compiled"]  # HLO text that ends before the collective
    text = hlo.read_text()
    hlo.write_text(text[: text.index("all-gather(")].rsplit("\n", 1)[0])

    index = write_report(root)

    summary = pd.read_csv(root / "summary.csv")
    skipped = dict(zip(summary["point"], summary["skipped"]))
    assert pd.isna(skipped[points[0].name])
    assert "not a readable xplane trace" in skipped[points[1].name] and str(xplane) in skipped[points[1].name]
    assert "compiled.hlo.txt" in skipped[points[2].name] and "decode" in skipped[points[2].name]
    assert "no all-gather in the compiled HLO" in skipped[points[3].name]
    # every point's timing still counts: a damaged trace loses its trace columns, a damaged or
    # missing HLO its HLO columns, and each says so
    target = summary[summary["is_target"]]
    assert sorted(target["point"]) == sorted(j.name for j in points)
    assert target.set_index("point")["trace_op_time_s"].isna().to_dict() == {
        points[0].name: False,
        points[1].name: True,
        points[2].name: True,
        points[3].name: True,
    }
    assert "keeps its timing" in skipped[points[2].name] and "keeps its timing" in skipped[points[3].name]

    md = (root / "report" / "report.md").read_text()
    section = md.split("## Failed and skipped", 1)[1].split("\n## ", 1)[0]
    for point in points[1:]:
        assert point.name in section
    assert "| 1 KiB |" in md and "| 16 KiB |" in md  # the intact points are still measured against the model
    # every figure the report names is drawn and embedded; the model's figure is there exactly
    # when the model could be fitted (on cpu it needs 3 AllGather points of one regime, and a
    # noisy run may leave one out as a cache edge)
    pngs = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", md)
    has_model = summary.loc[summary["is_target"], "model_time_s"].notna().any()
    expected = {"time_vs_size.png", "busbw_vs_size.png"} | ({"measured_over_model.png"} if has_model else set())
    assert set(pngs) == expected
    assert all((root / "report" / p).stat().st_size > 0 for p in pngs)
    assert index.read_text().count("data:image/png;base64,") == len(expected)


def test_a_one_device_sweep_ends_with_a_report_that_says_no_communication(tmp_path, compose_cfg, monkeypatch):
    # a lone accelerator, or hardware.device_count=1: the collective has a group of one, which XLA
    # runs as a copy; nothing may be fitted or divided by, and the report must still build.
    # (The suite's XLA_FLAGS ask for 8 CPU devices, and a caller's flags win: drop them here.)
    monkeypatch.setenv("XLA_FLAGS", "")
    root = small_sweep(tmp_path / "sweep", compose_cfg, sizes=("1KiB", "64KiB"), extra=["hardware.device_count=1"])

    index = write_report(root)

    summary = pd.read_csv(root / "summary.csv")
    target = summary[summary["is_target"]]
    assert list(target["group_size"]) == [1, 1]
    assert list(target["flags"]) == ["no communication (group of 1)"] * 2
    assert target["busbw_Bps"].isna().all() and target["model_time_s"].isna().all()
    fit = json.loads((root / "fit.json").read_text())
    (family_fit,) = fit["fits"]  # no fit: every point is left out, and says why
    assert family_fit["n_points"] == 0 and "alpha_s" not in family_fit and "too few points" in family_fit["note"]
    assert [x["reason"] for x in fit["left_out"]] == ["no communication (group of 1)"] * 2
    (family,) = json.loads((root / "headline.json").read_text())["families"]
    assert family["text"].startswith("AllGather over X (1 device, float32): no communication (group of 1)")
    assert family["peak_busbw_Bps"] is None
    md = (root / "report" / "report.md").read_text()
    assert "no communication (group of 1)" in md.split("## Headline", 1)[1].split("\n## ", 1)[0]
    # the time figure only: a group of one has no bus bandwidth to draw on a log axis
    assert re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", md) == ["time_vs_size.png"]
    assert index.read_text().count("data:image/png;base64,") == 1


def test_a_one_gpu_sweep_without_a_collective_in_its_hlo_still_reports(tmp_path, compose_cfg, monkeypatch, repo_root):
    # Issue 37: the default sweep on one H200 measured its points, then its report failed in
    # load_sweep with pandas 2.2 (which `pandas>=2.2` allows): no point's compiled HLO had an
    # all-gather left (a group of 1), so no target row had an hlo_op, and pandas 2.2's join on
    # a MultiIndex whose hlo_op level held only NaN raised "IndexError: cannot do a non-empty
    # take from an empty axes" (pandas 3 joins it). The folder as the H200 wrote it: a real
    # one-device run, its points recorded as on an H200 and each compiled all-gather a copy.
    # CI runs the suite at the declared minimum versions too (.ci/minimum-versions.txt).
    import yaml

    monkeypatch.setenv("XLA_FLAGS", "")  # the suite's 8 CPU devices: a caller's flags win
    root = small_sweep(tmp_path / "sweep", compose_cfg, sizes=("1KiB", "64KiB"), extra=["hardware.device_count=1"])
    h200 = yaml.safe_load((repo_root / "conf" / "hardware" / "h200.yaml").read_text())
    for point in root.iterdir():
        path = point / "result.json"
        r = json.loads(path.read_text())
        r["spec"]["hardware"] = "h200"
        r["hardware"].update(h200)
        r["environment"].update(backend="gpu", device_kind="NVIDIA H200")
        path.write_text(json.dumps(r))
        hlo = point / r["files"]["hlo_compiled"]
        text, n = re.subn(r"all-gather\((%[\w.]+)\)[^\n]*?, sharding=", r"copy(\1), sharding=", hlo.read_text())
        assert n == 1
        hlo.write_text(text)

    index = write_report(root)

    assert index.is_file()
    summary = pd.read_csv(root / "summary.csv")
    target = summary[summary["is_target"]]
    assert list(target["hardware"]) == ["h200", "h200"] and list(target["group_size"]) == [1, 1]
    assert target["hlo_op"].isna().all() and target["model_time_s"].isna().all()
    assert list(target["flags"]) == ["no communication (group of 1)"] * 2
    # why its HLO has no all-gather: the group of 1, not a damaged file
    assert all("(group of 1: XLA runs the collective as a copy)" in s for s in target["skipped"]), target["skipped"]
    assert not target["skipped"].str.contains("truncated").any()
    md = (root / "report" / "report.md").read_text()
    assert "no communication (group of 1)" in md.split("## Headline", 1)[1].split("\n## ", 1)[0]


def test_a_sweep_on_an_unknown_chip_reports_its_measurements_and_how_to_add_an_entry(tmp_path, compose_cfg):
    # the points as a GPU that no conf/hardware entry covers would record them (hardware=auto)
    root = small_sweep(tmp_path / "sweep", compose_cfg, sizes=("1KiB", "16KiB", "256KiB"))
    for point in root.iterdir():
        path = point / "result.json"
        r = json.loads(path.read_text())
        r["spec"]["hardware"] = "unknown_gpu"
        r["environment"].update(device_kind="NVIDIA B300", backend="gpu")
        path.write_text(json.dumps(r))

    write_report(root)

    summary = pd.read_csv(root / "summary.csv")
    target = summary[summary["is_target"]]
    assert len(target) == 3 and target["time_s"].notna().all() and target["model_time_s"].isna().all()
    md = (root / "report" / "report.md").read_text()
    assert (
        "Model constants: no conf/hardware entry covers gpu device kind 'NVIDIA B300', so the model has no "
        "constants for it: add conf/hardware/NAME.yaml with device_kinds: ['NVIDIA B300']" in md
    )
    assert "no successful points" not in md


def test_a_point_is_noisy_only_when_its_interval_is_wider_than_five_times_the_target(tmp_path, compose_cfg):
    from analysis.runs.rundir import read_results
    from analysis.runs.summary import summary_table

    root = small_sweep(tmp_path / "sweep", compose_cfg, sizes=("1KiB", "16KiB", "256KiB"))
    for point, half in zip(sorted(root.iterdir()), (0.15, 0.25, 0.26)):  # the default target: 5%
        path = point / "result.json"
        r = json.loads(path.read_text())
        r["timing"]["summary"]["rel_ci_halfwidth"] = half
        path.write_text(json.dumps(r))
    s = summary_table(read_results(root))
    # +-15% is this machine's usual spread over 5 rounds: not worth a flag; past +-25% it is
    assert s[s["is_target"]].sort_values("V_bytes")["noisy"].tolist() == [False, False, True]
