"""Hardware resolution pinned on a catalogue where a plausible-wrong rule differs (issue 30):
patterns of different lengths in different entries and within one entry, the shorter listed
first, exact names in another case, and a platform that rules an entry out."""

from __future__ import annotations

import pytest

import analysis.book.device_kinds as kindsmod
from analysis.book.device_kinds import resolve
from analysis.book.hardware import HardwareError

# listed shortest pattern first, so "the first that matches" and "the shortest" both pick wrong
GENERIC = {"name": "generic", "kind": "gpu", "device_kinds": [], "device_kind_patterns": ["NV .*"]}
H100 = {"name": "h100", "kind": "gpu", "device_kinds": ["NV H100"], "device_kind_patterns": ["NV H100.*"]}
# one entry, two patterns: its score is its longest matching pattern (13), not its shortest (7)
SXM = {"name": "sxm", "kind": "gpu", "device_kinds": [], "device_kind_patterns": ["NV H1.*", "NV H100 SXM.*"]}
TPU = {"name": "tpu-nv", "kind": "tpu", "device_kinds": ["nv h100 pcie"], "device_kind_patterns": ["NV H100 P.*"]}


@pytest.fixture(autouse=True)
def catalogue(monkeypatch):
    monkeypatch.setattr(kindsmod, "entries", lambda: (GENERIC, H100, SXM, TPU))


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


def test_an_exact_name_beats_any_pattern_in_any_case():
    r = resolve("nv h100", "cuda")
    assert (r.entry["name"], r.matched_by, r.device_kind) == ("h100", "exact", "nv h100")


def test_the_platform_rules_entries_out_and_none_means_every_platform():
    # on gpu the tpu entry's exact name and its 11-character pattern do not count
    assert resolve("NV H100 PCIe", "gpu").entry["name"] == "h100"
    r = resolve("NV H100 PCIe", "tpu")
    assert (r.entry["name"], r.matched_by) == ("tpu-nv", "exact")
    assert resolve("NV H100 PCIe").entry["name"] == "tpu-nv"
    assert resolve("NV H100 Pxx").entry["name"] == "tpu-nv"  # 11 characters beat h100's 9
    assert resolve("NV A10", "tpu").matched_by == "unknown"


def test_patterns_are_anchored_and_equal_lengths_are_an_error(monkeypatch):
    assert resolve("xNV H100", "gpu").matched_by == "unknown"
    other = {"name": "other", "kind": "gpu", "device_kinds": [], "device_kind_patterns": ["NV H100 SXM.."]}
    monkeypatch.setattr(kindsmod, "entries", lambda: (GENERIC, H100, SXM, other))
    with pytest.raises(HardwareError, match="equal length in sxm, other"):
        resolve("NV H100 SXM55", "gpu")
    assert resolve("NV H100 SXM5", "gpu").entry["name"] == "sxm"  # "SXM.." needs two characters
    assert resolve("NV H100 SXM55x", "gpu").entry["name"] == "sxm"  # and no more than two
