"""Reading a hardware entry, exactly (issue 30's mutation check): every key ``from_dict`` reads,
its defaults, every error with the key and the entry it names, ``expected`` and ``calibrated``
on both sides of each bound, loading by path, the unknown record, and the catalogue check on
catalogues built to make one plausible-wrong rule differ."""

from __future__ import annotations

import pytest

import analysis.book.device_kinds as kindsmod
import analysis.book.hardware as hwmod
from analysis.book.device_kinds import catalogue_problems, normalize_platform, resolve
from analysis.book.hardware import (
    Calibration,
    ExpectedFactor,
    Hardware,
    HardwareError,
    from_record,
    hardware_names,
    is_full_record,
    load_hardware,
)

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
