"""Reading a hardware entry, exactly (issue 30's mutation check): every key ``from_dict`` reads,
its defaults, every error with the key and the entry it names, ``expected`` and ``calibrated``
on both sides of each bound, loading by path, the unknown record, and the catalogue check on
catalogues built to make one plausible-wrong rule differ.

One route for hardware constants: the composed config's ``hardware`` node is what a run
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
from omegaconf.errors import ValidationError

import analysis.book.device_kinds as kindsmod
import analysis.book.hardware as hwmod
from analysis.book.device_kinds import catalogue_problems, normalize_platform, resolve
from analysis.book.errors import HardwareError
from analysis.book.hardware import (
    YAML_KEYS,
    Calibration,
    ExpectedFactor,
    Hardware,
    from_record,
    hardware_dir,
    hardware_names,
    is_full_record,
    load_hardware,
)
from analysis.predictions import hardware_for
from analysis.runs.record import Result
from analysis.runs.rundir import RESULT_NAME
from analysis.sweep import load_sweep
from runner import run
from runner.config.schema import HardwareConf, hardware_record
from runner.sweep.point import predict

OPS_LINE = "all_gather, reduce_scatter, all_reduce, all_to_all"


def hw(**kw) -> Hardware:
    return Hardware.from_dict({"name": "h", "kind": "gpu", **kw})


def raises(message: str, **kw) -> None:
    with pytest.raises(HardwareError) as err:
        hw(**kw)
    assert str(err.value) == message


def test_every_key_is_read_with_its_type_and_defaults():
    got = hw(
        device_kinds=["NV X", 100],
        device_kind_patterns=["NV X.*"],
        domain_size="8",
        device_count=4.0,
        hop_latency_s="1e-6",
        flops_per_s={"bf16": "2e15"},
    )
    assert got.device_kinds == ("NV X", "100")
    assert got.device_kind_patterns == ("NV X.*",)
    assert (got.domain_size, got.device_count) == (8, 4)
    assert type(got.domain_size) is int and type(got.device_count) is int
    assert got.hop_latency_s == 1e-6 and got.flops_per_s == {"bf16": 2e15}
    bare = Hardware.from_dict({"name": "bare"})
    assert (bare.kind, bare.source, bare.calibrated, bare.expected, bare.expected_source) == ("auto", "", (), (), "")


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"hop_latency_s": "abc"}, "hardware 'h': hop_latency_s='abc' is not a number"),
        ({"flops_per_s": {"bf16": "x"}}, "hardware 'h': flops_per_s.bf16='x' is not a number"),
        ({"domain_size": "x"}, "hardware 'h': domain_size='x' is not a number"),
        ({"device_count": "x"}, "hardware 'h': device_count='x' is not a number"),
        (
            {"wraparound": "sometimes"},
            "hardware 'h': wraparound='sometimes' is not one of ('always', 'never', 'multiple_of_4', 'only_16')",
        ),
        ({"interconnect": "bus"}, "hardware 'h': interconnect='bus' is not one of ('torus', 'switch', 'host')"),
        (
            {"calibrated": [1]},
            "hardware 'h': calibrated must be a list of {op, n_axes, link_bw_bidir_Bps, hop_latency_s}",
        ),
        ({"expected": [1]}, "hardware 'h': expected must be a mapping with source, inside and across"),
    ],
)
def test_errors_name_the_entry_and_the_key(kw, message):
    raises(message, **kw)


def test_a_bad_pattern_and_a_nameless_mapping_are_errors():
    with pytest.raises(HardwareError, match=r"^hardware 'h': device_kind_patterns entry '\(' is not a regular"):
        hw(device_kind_patterns=["("])
    with pytest.raises(HardwareError) as err:
        Hardware.from_dict({"kind": "gpu"})
    assert str(err.value) == "hardware: not a hardware entry (needs at least name and kind)"
    with pytest.raises(HardwareError) as err:
        Hardware.from_dict({"kind": "gpu"}, "x.yaml")
    assert str(err.value) == "x.yaml: not a hardware entry (needs at least name and kind)"


def test_calibrated_entries_are_read():
    got = hw(
        calibrated=[
            {"op": "all_gather", "n_axes": "2", "link_bw_bidir_Bps": "4e10", "hop_latency_s": 1e-6},
            {
                "op": "all_reduce",
                "n_axes": 1,
                "link_bw_bidir_Bps": 5e10,
                "hop_latency_s": "2e-6",
                "rel_rms_error": "0.05",
                "n_points": "7",
            },
        ]
    )
    assert got.calibrated == (
        Calibration("all_gather", 2, 4e10, 1e-6, None, None),
        Calibration("all_reduce", 1, 5e10, 2e-6, 0.05, 7),
    )
    assert type(got.calibrated[1].n_points) is int


CAL = {"op": "all_gather", "n_axes": 1, "link_bw_bidir_Bps": 1e9, "hop_latency_s": 1e-6}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"link_bw_bidir_Bps": "x"}, "hardware 'h': link_bw_bidir_Bps='x' is not a number"),
        ({"hop_latency_s": "x"}, "hardware 'h': hop_latency_s='x' is not a number"),
        ({"rel_rms_error": "x"}, "hardware 'h': rel_rms_error='x' is not a number"),
        ({"n_points": "x"}, "invalid literal for int() with base 10: 'x'"),
    ],
)
def test_a_bad_calibrated_entry_names_its_key(change, message):
    with pytest.raises(HardwareError) as err:
        hw(calibrated=[CAL | change])
    assert str(err.value) == f"hardware 'h': a calibrated entry is malformed ({message})"
    missing = {k: v for k, v in CAL.items() if k != "n_axes"}
    with pytest.raises(HardwareError) as err:
        hw(calibrated=[missing])
    assert str(err.value) == "hardware 'h': a calibrated entry has no n_axes"


def test_expected_factors_are_read_whole_after_a_leading_source():
    got = hw(
        expected={
            "source": "nccl-tests",
            "inside": {"all_gather": {"bw_share": "0.8", "floor_s": 0}},  # exactly the two keys, floor 0
            "across": {"all_reduce": {"bw_share": 0.5, "floor_s": 2e-6, "setup_s": "3e-6", "small_bw_share": 0.25}},
        }
    )
    assert got.expected == (
        ExpectedFactor("inside", "all_gather", 0.8, 0.0, None, None),
        ExpectedFactor("across", "all_reduce", 0.5, 2e-6, 3e-6, 0.25),
    )
    assert got.expected_source == "nccl-tests"


@pytest.mark.parametrize(
    "level, op, factor, message",
    [
        (
            "between",
            "all_gather",
            {"bw_share": 1, "floor_s": 0},
            "expected.between: the levels are inside, across (and source)",
        ),
        ("inside", "bogus", {"bw_share": 1, "floor_s": 0}, f"expected.inside.bogus: a collective ({OPS_LINE}) with"),
        ("inside", "all_gather", {"bw_share": 1}, f"expected.inside.all_gather: a collective ({OPS_LINE}) with"),
        (
            "inside",
            "all_gather",
            {"bw_share": 0, "floor_s": 0},
            "expected.inside.all_gather: shares > 0 and floor_s >= 0",
        ),
        ("inside", "all_gather", {"bw_share": -0.5, "floor_s": 0}, "expected.inside.all_gather: shares > 0"),
        ("inside", "all_gather", {"bw_share": 1, "floor_s": -1e-9}, "expected.inside.all_gather: shares > 0"),
        ("inside", "all_gather", {"bw_share": 1, "floor_s": None}, "expected.inside.all_gather: shares > 0"),
        (
            "inside",
            "all_gather",
            {"bw_share": 1, "floor_s": 0, "small_bw_share": 0},
            "expected.inside.all_gather: shares",
        ),
        ("inside", "all_gather", {"bw_share": "x", "floor_s": 0}, "bw_share='x' is not a number"),
        ("inside", "all_gather", {"bw_share": 1, "floor_s": "x"}, "floor_s='x' is not a number"),
        ("inside", "all_gather", {"bw_share": 1, "floor_s": 0, "setup_s": "x"}, "setup_s='x' is not a number"),
        (
            "inside",
            "all_gather",
            {"bw_share": 1, "floor_s": 0, "small_bw_share": "x"},
            "small_bw_share='x' is not a number",
        ),
    ],
)
def test_each_bad_expected_factor_is_an_error_naming_it(level, op, factor, message):
    with pytest.raises(HardwareError) as err:
        hw(expected={level: {op: factor}})
    assert str(err.value).startswith(f"hardware 'h': {message}")


def test_load_by_path_reads_yaml_and_yml_only(tmp_path):
    for suffix in (".yaml", ".yml"):
        path = tmp_path / f"mine{suffix}"
        path.write_text("name: mine\nkind: gpu\nhop_latency_s: 2e-6\n")
        assert (load_hardware(str(path)).name, load_hardware(str(path)).hop_latency_s) == ("mine", 2e-6)
    txt = tmp_path / "mine.txt"
    txt.write_text("name: mine\nkind: gpu\n")
    with pytest.raises(HardwareError, match=r"^unknown hardware '.*mine\.txt' \(known: a100, "):
        load_hardware(str(txt))
    bad, nameless = tmp_path / "bad.yaml", tmp_path / "nameless.yaml"
    bad.write_text("name: bad\nkind: gpu\nhop_latency_s: x\n")
    nameless.write_text("kind: gpu\n")
    with pytest.raises(HardwareError) as err:
        load_hardware(str(bad))
    assert str(err.value) == f"{bad}: hop_latency_s='x' is not a number"
    with pytest.raises(HardwareError) as err:
        load_hardware(str(nameless))
    assert str(err.value) == f"{nameless}: not a hardware file (needs at least name and kind)"


def test_a_whole_record_is_read_as_recorded_and_a_partial_one_by_name():
    node = {f: None for f in hwmod.YAML_KEYS} | {"name": "h100", "kind": "gpu", "hop_latency_s": 7e-6}
    assert is_full_record(node) and from_record(node).hop_latency_s == 7e-6
    partial = {"name": "h100", "kind": "gpu", "hop_latency_s": 7e-6}
    assert not is_full_record(partial) and from_record(partial).hop_latency_s == load_hardware("h100").hop_latency_s
    assert "auto" not in hardware_names() and hardware_names()[:2] == ["a100", "a100_40gb"]


def test_platform_names_pass_through_lowercased():
    assert (normalize_platform(" ROCm"), normalize_platform("METAL ")) == ("gpu", "metal")


def test_unknown_kinds_guess_their_platform_and_say_so(monkeypatch):
    monkeypatch.setattr(kindsmod, "entries", lambda: ())
    assert [resolve(k).platform for k in ("CPU", "tpu v9", "Weird")] == ["cpu", "tpu", "gpu"]
    r = resolve(" Weird ")
    assert (r.device_kind, r.platform, r.entry["name"], r.matched_by) == ("Weird", "gpu", "unknown_gpu", "unknown")
    assert r.reason == (
        "no conf/hardware entry covers gpu device kind 'Weird', so the model has no constants for it: "
        "add conf/hardware/NAME.yaml with device_kinds: ['Weird'] and its constants, or fit them "
        "with `python -m analysis calibrate`"
    )
    assert resolve("anything", "cpu").device_kind == "cpu"  # the host, whatever its kind string


def test_patterns_ignore_case_and_the_reason_names_the_longest(monkeypatch):
    e = {"name": "e", "kind": "gpu", "device_kind_patterns": ["NV.*", "NV H100 SXM.*"]}
    monkeypatch.setattr(kindsmod, "entries", lambda: (e,))
    r = resolve("nv h100 sxm5", "gpu")
    assert (r.device_kind, r.entry["name"]) == ("nv h100 sxm5", "e")
    # "NV.*" sorts after "NV H100 SXM.*" as text: the reason names the longer one
    assert r.reason == "'nv h100 sxm5' matches e's pattern 'NV H100 SXM.*' (the longest that matches)"
    bad = {"name": "bad", "kind": "gpu", "device_kind_patterns": ["("]}
    monkeypatch.setattr(kindsmod, "entries", lambda: (bad,))
    with pytest.raises(HardwareError, match=r"^bad: device_kind_patterns entry '\('"):
        resolve("x", "gpu")


def test_the_catalogue_check_on_planted_catalogues(monkeypatch):
    def problems(*entries):
        monkeypatch.setattr(kindsmod, "entries", lambda: entries)
        return catalogue_problems()

    # one kind and one pattern on two platforms: no problem
    assert (
        problems(
            {"name": "g", "kind": "gpu", "device_kinds": ["X1"], "device_kind_patterns": ["Y.*"]},
            {"name": "t", "kind": "tpu", "device_kinds": ["x1"], "device_kind_patterns": ["Y.*"]},
        )
        == []
    )
    # a cpu entry's kinds all resolve to the host entry: not a problem
    assert (
        problems(
            {"name": "cpu", "kind": "cpu", "device_kinds": ["cpu"]},
            {"name": "c2", "kind": "cpu", "device_kinds": ["odd"]},
        )
        == []
    )
    # a kind and a pattern in two entries of a platform (in another case): both named, and
    # the kind resolves to neither
    assert problems(
        {"name": "a", "kind": "gpu", "device_kinds": ["X1"], "device_kind_patterns": ["Y.*"]},
        {"name": "b", "kind": "gpu", "device_kinds": ["x1"], "device_kind_patterns": ["y.*"]},
    ) == [
        "'x1' is listed by a and b",
        "pattern 'y.*' is in a and b",
        "'x1' resolves to device kind 'x1' is listed by several entries: a, b; fix conf/hardware, not b",
    ]
    bad = problems({"name": "bad", "kind": "gpu", "device_kind_patterns": ["("]})
    assert len(bad) == 1 and bad[0].startswith("bad: device_kind_patterns entry '('")


# ---------------------------------------------------------------- the rate a precision runs at
def test_a_rate_at_a_precision_is_its_own_key_else_the_dtypes():
    h = hw(flops_per_s={"bfloat16": 8e14, "float32": 5e13, "float32_default": 4e14})
    assert [h.flops("float32", p) for p in ("default", "high", "highest", None)] == [4e14, 5e13, 5e13, 5e13]
    assert [h.flops("bfloat16", p) for p in ("default", "highest", None)] == [8e14] * 3  # one pass at every precision
    with pytest.raises(HardwareError) as err:
        hw(flops_per_s={"float32_default": 4e14}).flops("float32", "highest")
    assert str(err.value) == "hardware 'h' has no flops_per_s for float32 (known: float32_default)"


# (float32 at highest: CUDA cores; at default and high: TF32 tensor cores, dense) per NVIDIA's sheets
NVIDIA = {
    "h100": (6.7e13, 4.947e14),
    "h200": (6.7e13, 4.947e14),
    "h100_pcie": (5.1e13, 3.78e14),
    "h100_nvl": (6.0e13, 4.175e14),
    "h200_nvl": (6.0e13, 4.175e14),
    "gh200": (6.7e13, 4.94e14),
    "gh200_144g": (6.7e13, 4.94e14),
    "a100": (1.95e13, 1.56e14),
    "a100_40gb": (1.95e13, 1.56e14),
    "a100_pcie": (1.95e13, 1.56e14),
    "a100_pcie_40gb": (1.95e13, 1.56e14),
    "b200": (7.5e13, 1.1e15),
    "gb200": (8.0e13, 1.25e15),
    "aws_p4de": (1.95e13, 1.56e14),
    "aws_p5": (6.7e13, 4.947e14),
    "dgx_h100_ndr": (6.7e13, 4.947e14),
    "gcp_a3_high": (6.7e13, 4.947e14),
    "gcp_a3_mega": (6.7e13, 4.947e14),
}


def test_every_accelerator_entry_has_float32_at_each_precision():
    gpus_and_tpus = [n for n in hardware_names() if load_hardware(n).kind in ("gpu", "tpu")]
    assert sorted(gpus_and_tpus) == sorted(
        [*NVIDIA, "mi300x", "tpu_v3", "tpu_v4p", "tpu_v5e", "tpu_v5p", "tpu_v6e", "tpu_v7x"]
    )
    for name, (fp32, tf32) in NVIDIA.items():
        h = load_hardware(name)
        rates = [h.flops("float32", p) for p in ("default", "high", "highest")]
        assert rates == [tf32, tf32, fp32], name
        assert "float32" in h.source and "TF32" in h.source, name  # a cloud node's: "as the h100 entry"
    # ROCm: XLA computes float32 GEMMs in FP32 at every precision
    mi300x = load_hardware("mi300x")
    assert [mi300x.flops("float32", p) for p in ("default", "high", "highest")] == [1.634e14] * 3


@pytest.mark.parametrize("name", ["tpu_v3", "tpu_v4p", "tpu_v5e", "tpu_v5p", "tpu_v6e", "tpu_v7x"])
def test_a_tpu_runs_float32_as_one_three_or_six_bfloat16_passes(name):
    h = load_hardware(name)
    bf16 = h.flops("bfloat16")
    got = [h.flops("float32", p) / bf16 for p in ("default", "high", "highest")]
    assert got == pytest.approx([1, 1 / 3, 1 / 6], rel=1e-3)
    assert "derived from bf16" in h.source and "not published" in h.source


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
# One value of every key, as a hardware YAML writes it: a key Hardware gains needs one here.
A_VALUE = {
    "name": "mine",
    "kind": "gpu",
    "device_kinds": ["NVIDIA H100 80GB HBM3"],
    "device_count": 8,
    "interconnect": "switch",
    "wraparound": "never",
    "link_bw_unidir_Bps": 4.5e11,
    "link_bw_bidir_Bps": 9e11,
    "hop_latency_s": 1e-6,
    "hbm_bw_Bps": 3.4e12,
    "flops_per_s": {"bfloat16": 9.9e14},
    "device_kind_patterns": ["NVIDIA H100.*"],
    "memory_bytes": 8e10,
    "domain_size": 8,
    "node_bw_unidir_Bps": 3e10,
    "core_bw_unidir_Bps": 1e11,
    "scaleout_network": "InfiniBand NDR",
    "scaleout_bw_unidir_Bps": 5e10,
    "scaleout_latency_s": 5e-6,
    "source": "a datasheet",
    "calibrated": [{"op": "all_gather", "n_axes": 1, "link_bw_bidir_Bps": 8e11, "hop_latency_s": 2e-6}],
    "expected": {"source": "measured", "inside": {"all_reduce": {"bw_share": 0.8, "floor_s": 1e-5}}},
}


def test_the_hydra_schema_takes_every_key_the_model_reads_as_the_model_reads_it():
    # in the model's order: the composed config, result.json and an unknown key's message list them so
    schema = OmegaConf.structured(HardwareConf)
    assert list(schema) == list(YAML_KEYS) == list(A_VALUE)
    node = OmegaConf.to_container(OmegaConf.merge(schema, A_VALUE), enum_to_str=True)
    got, bare = Hardware.from_dict(node), Hardware(name="", kind="")
    assert got == Hardware.from_dict(A_VALUE)
    assert [k for k in YAML_KEYS if getattr(got, k) == getattr(bare, k)] == []  # every value reached it
    # a node of the schema's defaults reads as a bare entry
    defaults = OmegaConf.to_container(OmegaConf.merge(schema, {"name": "", "kind": "auto"}), enum_to_str=True)
    assert Hardware.from_dict(defaults) == Hardware(name="", kind="auto")


@pytest.mark.parametrize(
    ("key", "value"),
    [(k, "abc") for k, v in A_VALUE.items() if isinstance(v, (int, float))]
    + [("kind", "tpux"), ("device_kinds", "x"), ("device_kind_patterns", "x"), ("flops_per_s", 3)]
    + [("flops_per_s", {"bfloat16": "fast"}), ("calibrated", "x"), ("expected", "x"), ("source", None)],
)
def test_a_badly_typed_value_is_refused_by_the_hydra_schema_naming_its_key(key, value):
    # while Hydra composes the config (hardware.KEY=... on the command line), before anything runs
    with pytest.raises(ValidationError, match=rf"full_key: {key}\b"):
        OmegaConf.merge(OmegaConf.structured(HardwareConf), {key: value})


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
    ok = Result.from_json({"status": "ok", "hardware": node})
    assert hardware_for("cpu", [ok]).hop_latency_s == 3e-6
    failed = Result.from_json({"status": "failed", "hardware": node})
    assert hardware_for("cpu", [failed]) == load_hardware("cpu")  # a failed point ran nothing
    partial = Result.from_json({"status": "ok", "hardware": {"name": "cpu", "kind": "cpu"}})
    assert hardware_for("cpu", [partial]) == load_hardware("cpu")
    assert hardware_for("cpu") == load_hardware("cpu")
    assert hardware_for("mychip", [ok]) is None  # no node for it, and no entry of that name
