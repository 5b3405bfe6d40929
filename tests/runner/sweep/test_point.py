"""One point's run (:mod:`runner.sweep.point`): what it leaves in its folder."""

from __future__ import annotations

import json

from analysis.runs.rundir import ROUNDS_NAME
from runner.sweep.point import run


def test_a_new_record_drops_the_later_rounds_an_earlier_run_of_the_folder_left(compose_cfg, tmp_path):
    # an earlier run's journal (a sweep killed between rounds, then overwrite=true): its rounds
    # are not the new record's, so writing the new result.json removes it
    (tmp_path / ROUNDS_NAME).write_text(json.dumps({"round": {"round": 2}, "timing": {}}) + "\n")
    result = run(compose_cfg(["op=mm_case4_invalid", "mesh=xy_4x2"]), tmp_path)  # fails before device work
    assert result["status"] == "failed" and json.loads((tmp_path / "result.json").read_text())["status"] == "failed"
    assert not (tmp_path / ROUNDS_NAME).exists()
