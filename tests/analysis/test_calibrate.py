"""``python -m analysis calibrate``: measured W and T_min per collective, written as a hardware
entry that predictions then use (real CPU sweeps from the ``tiny_sweeps`` fixture)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf

from analysis.book.collective_cost import predict_collective
from analysis.book.hardware import Calibration, calibrated_for, hardware_dir, load_hardware
from analysis.cli import main as analysis_main
from analysis.predictions import model_constants, predict_points, unit_terms
from analysis.runs.record import Timing
from analysis.runs.rundir import read_results
from analysis.runs.summary import summary_table
from analysis.statistics.fit import fit_max_model
from analysis.sweep import target_points
from runner.config.schema import HardwareConf

FLAGGED = ("all_gather", 32 << 10)  # the point whose ceiling the fixture lowers: always flagged, never fitted


def flag_above_ceiling(sweep, op: str, size_bytes: int) -> str:
    """Lower one point's measured ceiling to 1 B/s, so its bus bandwidth lies wholly above it and
    the point is flagged (as a noisy ceiling on a busy machine may do to any point); its point name."""
    for result in sweep.glob("*/result.json"):
        r = json.loads(result.read_text())
        if r["spec"]["op"] == op and r["spec"]["size_bytes"] == size_bytes:
            r["ceiling"].update(busbw_Bps=1.0, ci_low_Bps=1.0, ci_high_Bps=1.0, inconsistent=None)
            result.write_text(json.dumps(r))
            return result.parent.name
    raise AssertionError(f"no {op} point of {size_bytes} bytes in {sweep}")


def left_out(sweep, op: str) -> pd.DataFrame:
    """The points of ``op`` the sweep's fit (the report's, which calibrate shares) left out, and why."""
    from analysis.sweep import load_sweep

    gone = load_sweep(sweep).left_out
    return gone[gone["op"] == op] if len(gone) else pd.DataFrame(columns=["op", "point", "reason"])


def _steady(root, op: str, alpha_s: float = 3e-4, W_Bps: float = 1e9) -> None:
    """Rewrite ``op``'s points of the sweep in ``root`` to take alpha + V / W in every sample of
    every round (2% apart): its fit then has a bandwidth regime, whatever this machine's noise
    did to the real run (one 32 KiB AllGather at 2.8x its neighbours left the fit without W)."""
    from runner.worker.estimators import summarise

    for f in root.glob("*/result.json"):
        r = json.loads(f.read_text())
        if r["spec"]["op"] != op:
            continue
        t = alpha_s + r["spec"]["V_bytes"] / W_Bps
        for rnd in r["timing"]["rounds"]:
            rnd["step"]["samples_s"] = [t * (0.98 + 0.01 * k) for k in range(5)]
        r["timing"] = summarise(
            Timing.from_json(r["timing"]), r["config"]["timing"], r["environment"]["backend"]
        ).to_json()
        f.write_text(json.dumps(r))


@pytest.fixture(scope="module")
def calibrated(tiny_sweeps, tmp_path_factory):
    """(the written YAML path, the sweep it was fitted to, what the command printed). The sweep is
    a copy with one point flagged by construction, so every test sees the flagged path whatever
    the machine's load flags besides. Both collectives' points are made steady: 4 sizes of one
    short round on a busy machine can leave a real fit without a bandwidth regime, and calibrate
    then rightly writes no entry for it."""
    out = tmp_path_factory.mktemp("calibrated") / "tiny_cpu.yaml"
    sweep = tmp_path_factory.mktemp("flagged") / "float32"
    shutil.copytree(tiny_sweeps["float32"], sweep)
    for op in ("all_gather", "all_reduce"):
        _steady(sweep, op)
    flag_above_ceiling(sweep, *FLAGGED)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = analysis_main(["calibrate", str(sweep), "--name", "tiny_cpu", "--out", str(out)])
    assert rc == 0
    return out, sweep, buf.getvalue()


def test_cli_writes_the_entry_to_out_and_not_into_conf(calibrated):
    out, sweep, printed = calibrated
    assert out.is_file() and f"wrote {out}" in printed
    assert not (hardware_dir() / "tiny_cpu.yaml").exists()
    raw = yaml.safe_load(out.read_text())
    base = yaml.safe_load((hardware_dir() / "cpu.yaml").read_text())
    assert set(base) <= set(raw)  # every key of the base entry is kept
    assert raw["name"] == "tiny_cpu" and raw["kind"] == "cpu" and raw["interconnect"] == "host"
    assert raw["device_kinds"] == []  # hardware=auto must keep picking cpu
    assert str(sweep.resolve()) in raw["source"]
    assert {(e["op"], e["n_axes"]) for e in raw["calibrated"]} == {("all_gather", 1), ("all_reduce", 1)}
    for e in raw["calibrated"]:
        # 4 sizes, less what the fit left out: at least the flagged point of the AllGather
        gone = left_out(sweep, e["op"])
        assert e["n_points"] == 4 - len(gone) and e["link_bw_bidir_Bps"] > 0 and e["hop_latency_s"] >= 0
        if e["op"] == FLAGGED[0]:
            assert (gone["V_bytes"] == FLAGGED[1]).any() and gone["reason"].str.contains("x its ceiling").any()
        assert 0 <= e["rel_rms_error"] < 2


def test_yaml_round_trips_through_load_hardware_and_the_hydra_schema(calibrated):
    out, _, _ = calibrated
    raw = yaml.safe_load(out.read_text())
    hw = load_hardware(str(out))
    ag = next(c for c in hw.calibrated if c.op == "all_gather")
    assert hw.calibrated == tuple(Calibration(**e) for e in raw["calibrated"])
    # the headline constants are the AllGather fit's (W bidirectional, half of it one way)
    assert hw.link_bw_bidir_Bps == ag.link_bw_bidir_Bps and hw.hop_latency_s == ag.hop_latency_s
    assert hw.link_bw_unidir_Bps == pytest.approx(ag.link_bw_bidir_Bps / 2)
    # python -m runner hardware=NAME composes the file against this schema
    merged = OmegaConf.merge(OmegaConf.structured(HardwareConf), OmegaConf.load(out))
    assert OmegaConf.to_container(merged)["calibrated"] == raw["calibrated"]


def test_predictions_reproduce_the_calibration_sweep_within_the_fits_error(calibrated):
    out, sweep, _ = calibrated
    hw = load_hardware(str(out))
    model_hw, source = model_constants(hw, pd.DataFrame())
    assert "measured" in source
    pts = predict_points(target_points(summary_table(read_results(sweep))), model_hw)
    for entry in hw.calibrated:
        # the residuals are over the points the fit kept
        g = pts[(pts["op"] == entry.op) & ~pts["point"].isin(left_out(sweep, entry.op)["point"])]
        assert len(g) == entry.n_points
        rel = g["model_time_s"] / g["time_s"] - 1
        # the prediction is the fit itself: the same residuals point by point, so the same RMS
        assert math.sqrt(np.mean(rel**2)) == pytest.approx(entry.rel_rms_error, rel=1e-6)
        # and point by point: refitting the same medians gives the same residual for each size
        fam = unit_terms(g.assign(hardware="cpu"))
        refit = fit_max_model(fam["time_s"], fam["latency_unit"], fam["bandwidth_unit"])
        assert rel.to_numpy() == pytest.approx(np.asarray(refit["residuals"]), rel=1e-6, abs=1e-12)


def test_predict_cli_uses_the_entry_for_each_collective(calibrated, capsys):
    out, sweep, _ = calibrated
    hw = load_hardware(str(out))
    s = summary_table(read_results(sweep))
    for op, expr in (("all_gather", "AllGather_X(A[I_X])"), ("all_reduce", "AllReduce_X(A[I]{U_X})")):
        entry = next(c for c in hw.calibrated if c.op == op)
        assert (
            analysis_main(
                [
                    "predict",
                    expr,
                    "--hardware",
                    str(out),
                    "--mesh",
                    "X=8",
                    "--dims",
                    f"I={2**21 // 4}",
                    "--dtype",
                    "float32",
                    "--json",
                ]
            )
            == 0
        )
        pred = json.loads(capsys.readouterr().out)
        W, t_min = entry.link_bw_bidir_Bps, entry.hop_latency_s
        hops, mult = 4, 2 if op == "all_reduce" else 1
        assert pred["time_s"] == pytest.approx(mult * max(t_min * hops, 2**21 / W))
        # and it is the model's prediction for that measured point, as the report computes it
        model = predict_points(target_points(s[(s["op"] == op) & (s["V_bytes"] == 2**21)]), hw)
        assert pred["time_s"] == pytest.approx(float(model["model_time_s"].iloc[0]), rel=1e-9)


def test_calibrated_for_picks_the_matching_entry_else_the_headline():
    base = load_hardware("cpu")
    hw = dataclasses.replace(
        base,
        link_bw_bidir_Bps=1e9,
        link_bw_unidir_Bps=5e8,
        hop_latency_s=1e-4,
        calibrated=(Calibration("all_reduce", 1, 2e9, 5e-5),),
    )
    assert calibrated_for(hw, "all_reduce", 1).link_bw_bidir_Bps == 2e9
    assert calibrated_for(hw, "all_reduce", 2) is hw and calibrated_for(hw, "all_gather", 1) is hw
    V = 2**24
    assert predict_collective("all_reduce", V, [8], hw).time_s == pytest.approx(2 * V / 2e9)
    assert predict_collective("all_reduce", V, [4, 2], hw).time_s == pytest.approx(2 * V / (2 * 1e9))


def test_errors_exit_2_and_leave_existing_files_alone(tiny_sweeps, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert analysis_main(["calibrate", str(empty), "--name", "x", "--out", str(tmp_path / "x.yaml")]) == 2
    assert "no run folders" in capsys.readouterr().err
    published = tmp_path / "cpu.yaml"
    shutil.copy(hardware_dir() / "cpu.yaml", published)
    before = published.read_text()
    assert analysis_main(["calibrate", str(tiny_sweeps["float32"]), "--name", "cpu", "--out", str(published)]) == 2
    err = capsys.readouterr().err
    assert "not written by calibrate" in err and len(err.strip().splitlines()) == 1
    assert published.read_text() == before
    broken = tmp_path / "broken.yaml"  # was a yaml.scanner traceback
    broken.write_text("name: x\nkind: [cpu\n")
    assert analysis_main(["calibrate", str(tiny_sweeps["float32"]), "--name", "x", "--out", str(broken)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {broken}:") and "not valid YAML" in err[0]
    assert broken.read_text() == "name: x\nkind: [cpu\n"


def _cache_family(op, axis_sizes, n_axes, dtype):
    """T = max(10 us x hops, bandwidth term / W): W 4e9 B/s in cache (up to 1 MiB), 1e9 beyond; the
    64 MiB point flagged. As the report's fit leaves out 64 KiB .. 1 MiB, so must calibrate."""
    V = np.array([2.0**k for k in range(10, 27)])
    pts = unit_terms(pd.DataFrame({"hardware": "cpu", "op": op, "V_bytes": V, "axis_sizes": axis_sizes}))
    W = np.where(V <= 2**20, 4e9, 1e9)
    return pts.assign(
        time_s=np.maximum(1e-5 * pts["latency_unit"], pts["bandwidth_unit"] / W),
        point=[f"{op}{i:02d}" for i in range(len(V))],
        flags=[""] * (len(V) - 1) + ["above its ceiling"],
        axes="X" if n_axes == 1 else "XY",
        n_axes=n_axes,
        group_size=8,
        dtype=dtype,
        mesh="auto",
        mesh_axes="X=8" if n_axes == 1 else "X=4,Y=2",
    )


def test_calibrate_fits_as_the_report_does():
    # The old calibrate made one regime pass where the report made up to three: on this sweep
    # it kept 64 KiB (1.64x the large messages' bandwidth) and read W from it.
    from analysis.calibrate import calibration_table
    from analysis.statistics.fit import fit_table

    pts = pd.concat(
        [_cache_family("all_gather", "8", 1, "float32"), _cache_family("all_reduce", "8", 1, "bfloat16")],
        ignore_index=True,
    )
    table = calibration_table(pts.drop(columns=["latency_unit", "bandwidth_unit"]), "cpu")
    fits, left = fit_table(pts)
    assert list(zip(table["op"], table["n_axes"])) == [("all_gather", 1), ("all_reduce", 1)]
    assert table["W_Bps"].to_numpy() == pytest.approx([1e9, 1e9], rel=1e-9)
    assert table["T_min_s"].to_numpy() == pytest.approx([1e-5, 1e-5], rel=1e-9)
    for r in table.itertuples():
        f = fits[fits["op"] == r.op].iloc[0]
        assert (r.W_Bps, r.T_min_s, r.n_points) == (f["W_Bps"], f["T_min_s"], f["n_points"])
        gone = left[left["op"] == r.op]
        assert r.left_out == "; ".join(f"{j}: {why}" for j, why in zip(gone["point"], gone["reason"]))
        assert r.left_out.count("another bandwidth regime") == 5  # 64 KiB .. 1 MiB
    assert table["W_ci_low_Bps"].isna().all()  # no samples, no intervals claimed


def test_calibrate_prints_the_intervals_and_agrees_with_the_report(calibrated):
    from analysis.sweep import load_sweep

    out, sweep, printed = calibrated
    fits = load_sweep(sweep).fits
    for e in yaml.safe_load(out.read_text())["calibrated"]:
        f = fits[fits["op"] == e["op"]].iloc[0]
        assert (e["link_bw_bidir_Bps"], e["hop_latency_s"]) == (f["W_Bps"], f["T_min_s"])
        # an upper end is NaN where some replicates had no bandwidth regime (W unbounded: the
        # printed interval says "or more"); how often depends on this machine's noise
        assert f["W_ci_low_Bps"] <= f["W_Bps"] and not f["W_ci_high_Bps"] < f["W_Bps"]
    assert "W (95% interval)" in printed and "1000 bootstrap replicates over rounds and samples, seed 0" in printed


def test_measured_over_model_says_self_fit_and_adds_an_out_of_sample_ratio(tiny_sweeps, tmp_path):
    # On cpu the model's W and T_min are the AllGather fit's: its points agree with the model by
    # construction, so they are marked and each is held against a fit without its size; the
    # AllReduce points were not fitted (their model is the AllGather's constants) and keep theirs.
    from analysis.report.sweep_report import write_report
    from analysis.sweep import load_sweep

    root = tmp_path / "s"
    shutil.copytree(tiny_sweeps["float32"], root)
    _steady(root, "all_gather")
    s = load_sweep(root)
    pts = s.points.set_index("op")
    assert pts.loc["all_gather", "model_self_fit"].all() and not pts.loc["all_reduce", "model_self_fit"].any()
    ag, ar = pts.loc["all_gather"], pts.loc["all_reduce"]
    assert ag["measured_over_model_cv"].to_numpy() == pytest.approx((ag["time_s"] / ag["cv_model_time_s"]).to_numpy())
    assert ar["measured_over_model_cv"].to_numpy() == pytest.approx(ar["measured_over_model"].to_numpy())
    write_report(root)
    fit = json.loads((root / "fit.json").read_text())
    assert fit["bootstrap"]["seed"] == 0 and fit["bootstrap"]["replicates"] == 1000
    fits = {f["op"]: f for f in fit["fits"]}
    ag_fit = fits["all_gather"]  # the steady points: alpha + V / W, so a bandwidth regime and its interval
    assert ag_fit["W_Bps"] is not None and ag_fit["W_ci_low_Bps"] <= ag_fit["W_Bps"] <= ag_fit["W_ci_high_Bps"]
    # the AllReduce points are this machine's real run: a busy machine can leave them without a
    # bandwidth regime (W and its interval null, none claimed); where there is one, W is inside it
    ar_fit = fits["all_reduce"]
    if ar_fit["W_Bps"] is None:
        assert ar_fit["W_ci_low_Bps"] is None and ar_fit["W_ci_high_Bps"] is None
    else:  # an upper end is null where some replicates had no bandwidth regime (W unbounded)
        assert ar_fit["W_ci_low_Bps"] <= ar_fit["W_Bps"]
        assert ar_fit["W_ci_high_Bps"] is None or ar_fit["W_Bps"] <= ar_fit["W_ci_high_Bps"]
    families = json.loads((root / "headline.json").read_text())["families"]
    text = {f["op"]: f["text"] for f in families}
    assert " (self-fit; out of sample: latency-bound " in text["all_gather"]
    assert "self-fit" not in text["all_reduce"] and "out of sample" not in text["all_reduce"]
    md = (root / "report" / "report.md").read_text()
    assert "(self-fit)" in md and "out of sample" in md
