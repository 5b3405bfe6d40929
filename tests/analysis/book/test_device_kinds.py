"""Which conf/hardware entry a device kind resolves to (exact rules, never file order), the
catalogue's soundness, and ``python -m analysis hardware``.

Hardware resolution pinned on a catalogue where a plausible-wrong rule differs (issue 30):
patterns of different lengths in different entries and within one entry, the shorter listed
first, exact names in another case, and a platform that rules an entry out.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import analysis.book.device_kinds as kindsmod
from analysis.book.device_kinds import catalogue_problems, resolve, resolve_auto
from analysis.book.errors import HardwareError
from analysis.book.hardware import hardware_names, load_hardware
from analysis.cli import main
from runner.config.schema import HardwareConf

REPO_ROOT = Path(__file__).resolve().parents[3]  # the checkout

# Device kinds as JAX reports them (devices()[0].device_kind), with the platform JAX names.
KNOWN = [
    ("tpu", "TPU v3", "tpu_v3"),
    ("tpu", "TPU v4", "tpu_v4p"),
    ("tpu", "TPU v5 lite", "tpu_v5e"),
    ("tpu", "TPU v5", "tpu_v5p"),
    ("tpu", "TPU v6 lite", "tpu_v6e"),
    ("tpu", "TPU7x", "tpu_v7x"),
    ("gpu", "NVIDIA H100 80GB HBM3", "h100"),
    ("gpu", "NVIDIA H100 PCIe", "h100_pcie"),
    ("gpu", "NVIDIA H100 NVL", "h100_nvl"),
    ("gpu", "NVIDIA H200", "h200"),
    ("gpu", "NVIDIA H200 NVL", "h200_nvl"),
    ("gpu", "NVIDIA GH200 480GB", "gh200"),
    ("gpu", "NVIDIA GH200 144G HBM3e", "gh200_144g"),
    ("gpu", "NVIDIA B200", "b200"),
    ("gpu", "NVIDIA GB200", "gb200"),
    ("gpu", "NVIDIA A100-SXM4-80GB", "a100"),
    ("gpu", "NVIDIA A100-SXM4-40GB", "a100_40gb"),
    ("gpu", "NVIDIA A100 80GB PCIe", "a100_pcie"),
    ("gpu", "NVIDIA A100-PCIE-40GB", "a100_pcie_40gb"),
    ("gpu", "AMD Instinct MI300X", "mi300x"),
    ("cpu", "cpu", "cpu"),
]
UNKNOWN = [("tpu", "TPU v4 lite"), ("gpu", "NVIDIA B300"), ("gpu", "NVIDIA H20"), ("gpu", "AMD Instinct MI250X")]


@pytest.mark.parametrize("platform, kind, name", KNOWN)
def test_every_real_device_kind_resolves_to_its_entry(platform, kind, name):
    rec = resolve_auto(platform, kind)
    assert (rec["name"], rec["known"]) == (name, True)
    assert resolve(kind.upper(), platform).entry["name"] == name  # compared case-insensitively


@pytest.mark.parametrize("platform, kind", UNKNOWN)
def test_unknown_kinds_resolve_to_a_clear_record(platform, kind):
    rec = resolve_auto(platform, kind)
    # the shape the runner records, and reports build on (measurements, no model column)
    assert set(rec) == {"name", "kind", "known", "device_kinds", "source"}
    assert (rec["name"], rec["kind"], rec["known"], rec["device_kinds"]) == (
        f"unknown_{platform}",
        platform,
        False,
        [kind],
    )
    assert repr(kind) in rec["source"] and "conf/hardware/NAME.yaml" in rec["source"]
    assert f"device_kinds: [{kind!r}]" in rec["source"] and "python -m analysis calibrate" in rec["source"]
    assert "\n" not in rec["source"]


def test_v4_lite_is_not_v4p_and_h100_variants_are_not_sxm():
    # The old substring rule gave "TPU v4 lite" v4p's constants and PCIe/NVL cards the SXM NVSwitch.
    assert "tpu_v4p covers exactly 'TPU v4'" in resolve_auto("tpu", "TPU v4 lite")["source"]
    assert {resolve_auto("cuda", k)["name"] for k in ("NVIDIA H100 PCIe", "NVIDIA H100 NVL")} == {
        "h100_pcie",
        "h100_nvl",
    }


def test_patterns_match_variants_and_exact_wins():
    r = resolve("AMD Instinct MI300X VF", "rocm")
    assert (r.entry["name"], r.matched_by) == ("mi300x", "pattern")
    assert resolve("TPU v5 litepod", "tpu").entry["name"] == "tpu_v5e"
    assert resolve("TPU v7x", "tpu").matched_by == "exact"
    assert resolve("TPU 7x", "tpu").matched_by == "pattern"
    assert resolve("TPU v7 lite", "tpu").matched_by == "unknown"  # patterns are anchored: fullmatch


@pytest.mark.parametrize("platform", ["cuda", "rocm", "gpu", "CUDA"])
def test_cuda_and_rocm_mean_gpu(platform):
    assert resolve_auto(platform, "NVIDIA H100 80GB HBM3")["name"] == "h100"
    assert resolve_auto(platform, "AMD Instinct MI300X")["name"] == "mi300x"
    assert resolve_auto(platform, "NVIDIA X1")["name"] == "unknown_gpu"


def test_platform_restricts_the_match():
    assert resolve_auto("tpu", "NVIDIA H100 80GB HBM3")["name"] == "unknown_tpu"
    assert resolve_auto("cpu", "whatever the host calls itself")["name"] == "cpu"


def test_the_catalogue_has_no_ambiguous_pair():
    assert catalogue_problems() == []
    kinds = [(e["kind"], k) for e in kindsmod.entries() for k in e.get("device_kinds") or ()]
    kinds += [(p, k) for p, k, _ in KNOWN] + UNKNOWN
    for platform, kind in kinds:
        resolve(kind, platform)  # raises HardwareError on two equal matches


def test_a_planted_ambiguity_is_caught(monkeypatch):
    a = {"name": "a", "kind": "gpu", "device_kinds": ["X1"], "device_kind_patterns": ["NV X.*"]}
    b = {"name": "b", "kind": "gpu", "device_kinds": ["x1"], "device_kind_patterns": ["NV Y.*", "NV .*1"]}
    monkeypatch.setattr(kindsmod, "entries", lambda: (a, b))
    with pytest.raises(HardwareError, match="several entries: a, b"):
        resolve("X1", "gpu")
    with pytest.raises(HardwareError, match="equal length in a, b"):
        resolve("NV X1", "gpu")  # "NV X.*" and "NV .*1" are both 6 characters long
    assert resolve("NV Y22", "gpu").entry["name"] == "b"
    assert any("listed by a and b" in p for p in catalogue_problems())


def test_every_accelerator_entry_has_memory_domain_and_scaleout_with_sources():
    for name in hardware_names():
        hw = load_hardware(name)
        if hw.kind not in ("tpu", "gpu"):
            continue
        assert hw.memory_bytes and hw.domain_size and hw.scaleout_bw_unidir_Bps and hw.scaleout_latency_s, name
        for word in ("memory", "domain_size", "scaleout", "estimate"):
            assert word in hw.source, (name, word)
        merged = OmegaConf.merge(
            OmegaConf.structured(HardwareConf), OmegaConf.load(REPO_ROOT / "conf" / "hardware" / f"{name}.yaml")
        )
        assert merged.memory_bytes == hw.memory_bytes and merged.domain_size == hw.domain_size


def run(capsys, *argv):
    code = main(["hardware", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    "kind, platform, name, known, matched_by",
    [
        ("TPU v5 lite", "tpu", "tpu_v5e", True, "exact"),
        ("NVIDIA H100 PCIe", "cuda", "h100_pcie", True, "exact"),
        ("AMD Instinct MI300X VF", "rocm", "mi300x", True, "pattern"),
        ("TPU v4 lite", None, "unknown_tpu", False, "unknown"),  # platform guessed from the kind
    ],
)
def test_cli_json_for_a_kind(capsys, kind, platform, name, known, matched_by):
    code, out, _ = run(capsys, "--device-kind", kind, *(["--platform", platform] if platform else []), "--json")
    d = json.loads(out)
    assert code == 0
    assert (d["name"], d["known"], d["matched_by"]) == (name, known, matched_by)
    if known:
        hw = load_hardware(name)
        assert d["link_bw_unidir_Bps"] == hw.link_bw_unidir_Bps and d["memory_bytes"] == hw.memory_bytes
        assert d["domain_size"] == hw.domain_size and d["source"] == hw.source
    else:
        assert "calibrate" in d["source"] and d["kind"] == "tpu"


def test_h200_nvl_and_gh200_144g_have_entries_of_their_own(capsys):
    # JAX's kinds for the PCIe H200 with NVLink bridges and the HBM3e Grace Hopper
    code, out, _ = run(capsys, "--device-kind", "NVIDIA H200 NVL", "--platform", "cuda", "--json")
    d = json.loads(out)
    assert code == 0 and (d["name"], d["matched_by"]) == ("h200_nvl", "exact")
    # a 4-way NVLink bridge (900 GB/s per GPU), PCIe Gen5 (128 GB/s) beyond it, 1,671 TFLOPS sparse;
    # float32 60 TFLOPS on CUDA cores, TF32 835 TFLOPS sparse
    assert (d["domain_size"], d["link_bw_unidir_Bps"], d["node_bw_unidir_Bps"]) == (4, 4.5e11, 6.4e10)
    assert d["flops_per_s"] == {
        "bfloat16": 8.355e14,
        "float16": 8.355e14,
        "float32": 6.0e13,
        "float32_default": 4.175e14,
        "float32_high": 4.175e14,
    }
    assert d["memory_bytes"] == 141e9
    code, out, _ = run(capsys, "--device-kind", "NVIDIA GH200 144G HBM3e")
    assert code == 0
    assert out.startswith("'NVIDIA GH200 144G HBM3e' (gpu) -> gh200_144g (exact)")
    assert "HBM 4.9e+12 B/s, 144 GB" in out
    assert resolve("NVIDIA GH200 480GB", "gpu").entry["name"] == "gh200"  # the HBM3 part keeps its own


def test_cli_text_and_catalogue(capsys):
    code, out, _ = run(capsys, "--device-kind", "TPU v5 lite")
    assert code == 0
    assert out.splitlines()[0] == (
        "'TPU v5 lite' (tpu) -> tpu_v5e (exact): 'TPU v5 lite' is listed in tpu_v5e's device_kinds"
    )
    assert "domain 256 devices; beyond it DCN 3.125e+09 B/s" in out
    code, out, _ = run(capsys, "--platform", "tpu")
    names = [line.split(" ")[0] for line in out.splitlines() if line and not line.startswith(" ")]
    assert code == 0 and names == ["tpu_v3", "tpu_v4p", "tpu_v5e", "tpu_v5p", "tpu_v6e", "tpu_v7x"]
    assert "source: " in out
    code, out, _ = run(capsys, "--json")
    assert code == 0 and {e["name"] for e in json.loads(out)["entries"]} == set(hardware_names())


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--platform", "metal"], "error: --platform 'metal' is not one of cpu, tpu, gpu, cuda, rocm"),
        (["--device-kind", "  "], "error: --device-kind is empty"),
    ],
)
def test_cli_bad_input_exits_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.startswith(message) and err.count("\n") == 1


# listed shortest pattern first, so "the first that matches" and "the shortest" both pick wrong
GENERIC = {"name": "generic", "kind": "gpu", "device_kinds": [], "device_kind_patterns": ["NV .*"]}
H100 = {"name": "h100", "kind": "gpu", "device_kinds": ["NV H100"], "device_kind_patterns": ["NV H100.*"]}
# one entry, two patterns: its score is its longest matching pattern (13), not its shortest (7)
SXM = {"name": "sxm", "kind": "gpu", "device_kinds": [], "device_kind_patterns": ["NV H1.*", "NV H100 SXM.*"]}
TPU = {"name": "tpu-nv", "kind": "tpu", "device_kinds": ["nv h100 pcie"], "device_kind_patterns": ["NV H100 P.*"]}


@pytest.fixture
def catalogue(monkeypatch):
    """The catalogue above in place of conf/hardware's (the tests below ask for it by name)."""
    monkeypatch.setattr(kindsmod, "entries", lambda: (GENERIC, H100, SXM, TPU))


@pytest.mark.usefixtures("catalogue")
def test_the_longest_matching_pattern_wins_across_and_within_entries():
    r = resolve("NV H100 SXM5", "gpu")  # generic 4, h100 9, sxm 13 (its longer pattern)
    assert (r.entry["name"], r.matched_by, r.platform) == ("sxm", "pattern", "gpu")
    assert r.reason == "'NV H100 SXM5' matches sxm's pattern 'NV H100 SXM.*' (the longest that matches)"
    # generic 4, h100 9, sxm 7 ("NV H1.*" only): h100
    assert resolve("NV H100 NVL", "gpu").entry["name"] == "h100"
    # generic 4, sxm 7: sxm
    assert resolve("NV H1xx", "gpu").entry["name"] == "sxm"
    # only generic
    assert resolve("NV A10", "gpu").entry["name"] == "generic"


@pytest.mark.usefixtures("catalogue")
def test_an_exact_name_beats_any_pattern_in_any_case():
    r = resolve("nv h100", "cuda")
    assert (r.entry["name"], r.matched_by, r.device_kind) == ("h100", "exact", "nv h100")


@pytest.mark.usefixtures("catalogue")
def test_the_platform_rules_entries_out_and_none_means_every_platform():
    # on gpu the tpu entry's exact name and its 11-character pattern do not count
    assert resolve("NV H100 PCIe", "gpu").entry["name"] == "h100"
    r = resolve("NV H100 PCIe", "tpu")
    assert (r.entry["name"], r.matched_by) == ("tpu-nv", "exact")
    assert resolve("NV H100 PCIe").entry["name"] == "tpu-nv"
    assert resolve("NV H100 Pxx").entry["name"] == "tpu-nv"  # 11 characters beat h100's 9
    assert resolve("NV A10", "tpu").matched_by == "unknown"


@pytest.mark.usefixtures("catalogue")
def test_patterns_are_anchored_and_equal_lengths_are_an_error(monkeypatch):
    assert resolve("xNV H100", "gpu").matched_by == "unknown"
    other = {"name": "other", "kind": "gpu", "device_kinds": [], "device_kind_patterns": ["NV H100 SXM.."]}
    monkeypatch.setattr(kindsmod, "entries", lambda: (GENERIC, H100, SXM, other))
    with pytest.raises(HardwareError, match="equal length in sxm, other"):
        resolve("NV H100 SXM55", "gpu")
    assert resolve("NV H100 SXM5", "gpu").entry["name"] == "sxm"  # "SXM.." needs two characters
    assert resolve("NV H100 SXM55x", "gpu").entry["name"] == "sxm"  # and no more than two
