"""One route for hardware constants: the composed config's ``hardware`` node is what a run
records in ``result.json`` and what the model predicts with, on the runner's side
(``runner.sweep.point.predict``) and the analysis side (``load_sweep`` through
``analysis.predictions.hardware_for``); ``Hardware.from_dict`` is the one reader of YAML and
node alike, and the runner's Hydra schema has exactly its keys.

The what-if of issue 25, ``hardware.link_bw_bidir_Bps=1e10 hardware.link_bw_unidir_Bps=5e9
hardware.hop_latency_s=1e-5 op.size_bytes=1MiB`` on ``hardware=auto`` (the CPU here), was
recorded as ``null`` and predicted nothing; it is run here for real, once per module.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil

import pytest
import yaml
from omegaconf import OmegaConf

from analysis.book.errors import HardwareError
from analysis.book.hardware import YAML_KEYS, Hardware, hardware_dir, hardware_names, load_hardware
from analysis.predictions import hardware_for
from analysis.runs.rundir import RESULT_NAME
from analysis.sweep import load_sweep
from runner import run
from runner.config.schema import HardwareConf, hardware_record
from runner.sweep.point import predict

QUICK = ["timing.min_iters=5", "timing.budget_s=0.3", "timing.rounds=1", "timing.loop=false", "trace.enabled=false"]
WHAT_IF = ["hardware.link_bw_bidir_Bps=1e10", "hardware.link_bw_unidir_Bps=5e9", "hardware.hop_latency_s=1e-5"]
V = 1048576  # op.size_bytes=1MiB: an AllGather's V is its gathered output


@pytest.fixture(scope="module")
def what_if(compose_cfg, tmp_path_factory):
    """The issue's command, run: ``(result, point folder)``."""
    point = tmp_path_factory.mktemp("what_if")
    result = run(compose_cfg([*QUICK, *WHAT_IF, "op.size_bytes=1MiB"]), point)
    assert result["status"] == "ok", result["error"]
    return result, point


# ---------------------------------------------------------------- one reader, one schema
def test_the_hydra_schema_has_exactly_the_keys_the_model_reads():
    assert sorted(f.name for f in dataclasses.fields(HardwareConf)) == sorted(YAML_KEYS)


def test_a_composed_node_reads_as_its_yaml_file_does(compose_cfg):
    # every catalogue entry: Hydra's node (schema defaults filled in) and the file give one Hardware
    names = hardware_names()
    assert len(names) == 26
    for name in names:
        node = OmegaConf.to_container(compose_cfg([f"hardware={name}"]).hardware, resolve=True, enum_to_str=True)
        assert Hardware.from_dict(node) == load_hardware(name), name


def test_a_bad_node_is_refused_naming_the_key_and_the_allowed_values():
    with pytest.raises(HardwareError) as err:
        Hardware.from_dict({"name": "mine", "kind": "cpu", "wraparound": "sometimes"})
    assert str(err.value) == (
        "hardware 'mine': wraparound='sometimes' is not one of ('always', 'never', 'multiple_of_4', 'only_16')"
    )
    with pytest.raises(HardwareError, match=r"^hardware 'mine': hop_latency_s='fast' is not a number$"):
        Hardware.from_dict({"name": "mine", "kind": "cpu", "hop_latency_s": "fast"})
    with pytest.raises(HardwareError, match=r"^hardware: not a hardware entry \(needs at least name and kind\)$"):
        Hardware.from_dict({"kind": "cpu"})


def test_an_auto_node_lays_its_overrides_over_the_entry_the_devices_resolve_to():
    entry = {"name": "cpu", "kind": "cpu", "known": True, "hop_latency_s": None, "flops_per_s": {"float32": 1.0}}
    node = {"name": "auto", "kind": "auto", "hop_latency_s": 1e-5, "flops_per_s": {"bfloat16": 2.0}, "source": ""}
    got = hardware_record(entry, node)
    assert set(got) == {*YAML_KEYS, "known"}
    assert (got["name"], got["kind"], got["hop_latency_s"], got["link_bw_bidir_Bps"]) == ("cpu", "cpu", 1e-5, None)
    assert got["flops_per_s"] == {"float32": 1.0, "bfloat16": 2.0}  # merged, as Hydra merges into a named entry


# ---------------------------------------------------------------- the run records and predicts
def test_the_what_if_is_recorded_and_predicted_with(what_if):
    result, _ = what_if
    hw = result["hardware"]
    assert set(YAML_KEYS) <= set(hw)  # every constant, not only the overridden ones
    assert (hw["name"], hw["link_bw_bidir_Bps"], hw["link_bw_unidir_Bps"], hw["hop_latency_s"]) == (
        "cpu",
        1e10,
        5e9,
        1e-5,
    )
    p = result["prediction"]
    # the CPU's devices are one host ("interconnect: host"): the book's ring, 8 devices, one axis:
    # max(T_min * ceil(8/2), V / (W_bidi * 1))
    assert (p["topology"], p["hops"]) == ("ring", 4)
    assert p["latency_time_s"] == pytest.approx(1e-5 * 4, rel=1e-12)
    assert p["bandwidth_time_s"] == pytest.approx(V / 1e10, rel=1e-12)
    assert p["time_s"] == pytest.approx(1.048576e-4, rel=1e-12) and p["regime"] == "bandwidth"


def test_the_report_models_the_what_if_with_the_recorded_constants(what_if):
    _, point = what_if
    s = load_sweep(point)
    assert (s.model_hw.link_bw_bidir_Bps, s.model_hw.hop_latency_s) == (1e10, 1e-5)
    assert s.points["model_time_s"].tolist() == [pytest.approx(1.048576e-4, rel=1e-12)]
    assert s.model_source.startswith(
        "constants of `cpu` as its runs set them (hardware.link_bw_bidir_Bps=1e+10, "
        "hardware.link_bw_unidir_Bps=5e+09, hardware.hop_latency_s=1e-05; the entry: No published constants"
    )


def test_a_missing_constant_names_the_config_key_to_set(what_if):
    result = copy.deepcopy(what_if[0])
    result["hardware"]["hop_latency_s"] = None
    assert predict(result) == {
        "time_s": None,
        "note": "hardware 'cpu' has no hop_latency_s: set hardware.hop_latency_s=... (seconds per hop) on the "
        "runner's command line or in the hardware YAML, --hop-latency-s for python -m analysis "
        "predict/hlo/profile, or calibrate it: python -m analysis calibrate SWEEP --name NAME",
    }
    # a constant the analysis commands take no flag for names the key alone
    tpu = dataclasses.replace(load_hardware("tpu_v3"), core_bw_unidir_Bps=None)
    with pytest.raises(HardwareError) as err:
        tpu.require("core_bw_unidir_Bps")
    assert str(err.value) == (
        "hardware 'tpu_v3' has no core_bw_unidir_Bps: set hardware.core_bw_unidir_Bps=... on the runner's "
        "command line or in the hardware YAML"
    )


def test_an_entry_found_on_hydras_search_path_gets_a_prediction(compose_cfg, tmp_path):
    (tmp_path / "conf" / "hardware").mkdir(parents=True)
    entry = {
        "name": "mychip",
        "kind": "cpu",
        "interconnect": "host",
        "wraparound": "never",
        "link_bw_unidir_Bps": 1.0e9,
        "link_bw_bidir_Bps": 2.0e9,
        "hop_latency_s": 2.0e-6,
        "source": "a test entry outside conf/hardware",
    }
    (tmp_path / "conf" / "hardware" / "mychip.yaml").write_text(yaml.safe_dump(entry))
    assert "mychip" not in hardware_names()
    search = f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    cfg = compose_cfg([*QUICK, "hardware=mychip", search, "op.size_bytes=1MiB"])
    result = run(cfg, tmp_path / "point")
    assert result["status"] == "ok", result["error"]
    # ring of 8: max(2e-6 s * 4, V / 2e9 B/s)
    assert result["prediction"]["time_s"] == pytest.approx(V / 2e9, rel=1e-12)
    assert result["prediction"]["latency_time_s"] == pytest.approx(2e-6 * 4, rel=1e-12)
    s = load_sweep(tmp_path / "point")
    assert s.model_hw.name == "mychip" and s.model_source.startswith("published constants of `mychip`")
    assert s.points["model_time_s"].tolist() == [pytest.approx(V / 2e9, rel=1e-12)]


# ---------------------------------------------------------------- old result files
def test_an_old_result_without_the_full_node_is_modelled_by_name(what_if, tmp_path):
    # format 1 with hardware=auto recorded the YAML entry as written (no schema defaults), here
    # with an older catalogue's T_min: the analysis side reads today's entry by name, as it did then
    _, point = what_if
    old = tmp_path / "old"
    shutil.copytree(point, old)
    r = json.loads((old / RESULT_NAME).read_text())
    then = {**yaml.safe_load((hardware_dir() / "h100.yaml").read_text()), "hop_latency_s": 9e-6}
    r["hardware"] = {**then, "known": True}
    r["experiment"] = {**r.pop("spec"), "hardware": "h100"}  # format 1's name for the spec
    r["format_version"] = 1
    (old / RESULT_NAME).write_text(json.dumps(r))
    assert not set(YAML_KEYS) <= set(r["hardware"])
    s = load_sweep(old)
    assert s.model_hw == load_hardware("h100")
    # behind a switch, 8 GPUs: max(T_min * (N-1), V (N-1) / (N W)) = max(1e-6 s * 7, 2.04e-6 s)
    assert s.points["model_time_s"].tolist() == [pytest.approx(7e-6, rel=1e-12)]


def test_hardware_for_prefers_the_recorded_node_and_falls_back_to_the_name():
    node = {**{k: None for k in YAML_KEYS}, "name": "cpu", "kind": "cpu", "interconnect": "host", "hop_latency_s": 3e-6}
    ok = {"status": "ok", "hardware": node}
    assert hardware_for("cpu", [ok]).hop_latency_s == 3e-6
    assert hardware_for("cpu", [{**ok, "status": "failed"}]) == load_hardware("cpu")  # a failed point ran nothing
    assert hardware_for("cpu", [{"status": "ok", "hardware": {"name": "cpu", "kind": "cpu"}}]) == load_hardware("cpu")
    assert hardware_for("cpu") == load_hardware("cpu")
    assert hardware_for("mychip", [ok]) is None  # no node for it, and no entry of that name
