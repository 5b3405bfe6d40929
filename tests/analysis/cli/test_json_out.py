"""Every JSON object a command prints opens with its format and the version of its layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.cli import main
from analysis.cli.json_out import versioned
from analysis.runs.rundir import shardlab_version

HLO = Path(__file__).resolve().parents[2] / "data" / "hlo" / "comments_and_loops.hlo.txt"
PREDICT = ["predict", "AllGather_X(A[I_X])", "--hardware", "tpu_v5e", "--mesh", "X=8", "--dims", "I=1024"]


def printed(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "argv,fmt,version",
    [
        ([*PREDICT, "--dtype", "float32", "--json"], "shardlab.predict", 2),
        (["hardware", "--json"], "shardlab.hardware", 1),
        (["hardware", "--device-kind", "TPU v5 lite", "--json"], "shardlab.hardware", 1),
        (["hlo", str(HLO), "--json"], "shardlab.hlo", 2),
    ],
)
def test_each_commands_json_opens_with_format_and_version(capsys, argv, fmt, version):
    out = printed(capsys, argv)
    assert list(out)[:3] == ["format", "format_version", "shardlab_version"]
    assert (out["format"], out["format_version"], out["shardlab_version"]) == (fmt, version, shardlab_version())


def test_predicts_renamed_time_keeps_its_old_name_for_one_version(capsys):
    out = printed(capsys, [*PREDICT, "--dtype", "float32", "--json"])
    # 1024 float32 elements gathered over 8 TPU v5e chips: a positive time, the same under both names
    assert out["time_s"] > 0 and out["predicted_time_s"] == out["time_s"]


def test_hlos_records_are_under_collectives(capsys):
    out = printed(capsys, ["hlo", str(HLO), "--json"])
    assert out["file"] == str(HLO) and [r["name"] for r in out["collectives"]] == ["ar", "a2a"]


def test_an_unknown_layout_is_one_error_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"no JSON layout named 'xla'; known: hardware, hlo, predict, profile"):
        versioned("xla", {})
