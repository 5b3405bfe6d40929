"""The run folder's reader (:mod:`analysis.runs.rundir`): the records beside ``result.json``."""

from __future__ import annotations

import json

from analysis.runs.processes import process_parts
from analysis.runs.record import Process, Result
from analysis.runs.rundir import (
    ROUNDS_NAME,
    append_round,
    journal_rounds,
    read_host_results,
    read_result,
    with_journal,
)


def test_the_other_hosts_records_are_read_in_name_order_and_a_damaged_one_is_left_out(tmp_path):
    host = {"environment": {"process_index": 1, "host": "h1"}, "files": {"xplane": "trace/host1/x.pb"}}
    (tmp_path / "result.host1.json").write_text(json.dumps(dict(host, process={"device_ids": [4, 5]})))
    (tmp_path / "result.host2.json").write_text("[1, 2]")  # not an object
    (tmp_path / "result.host3.json").write_text("{cut")  # not JSON
    (tmp_path / "result.host4.json").write_text(json.dumps({"environment": {"process_index": 4}}))
    got = read_host_results(tmp_path)
    assert [r.environment.process_index for r in got] == [1, 4]
    own = Result.from_json({"point_dir": str(tmp_path), "environment": {"host": "h0"}, "files": {"xplane": "x.pb"}})
    assert process_parts(own) == [
        Process(process_id=0, host="h0", xplane="x.pb"),
        Process(process_id=1, host="h1", xplane="trace/host1/x.pb", device_ids=[4, 5]),
        Process(process_id=4),
    ]


def _round_line(n: int, median: float, started_at="t0", **extra) -> dict:
    """A journal line as runner.sweep.rounds writes it: the round, and the record's timing keys
    as that round left them."""
    return {
        "result_started_at": started_at,
        "round": {"round": n, "step": {"samples_s": [median] * 3}},
        "timing": {"estimator": "step", "summary": {"n": 3 * n, "median_s": median}, "rounds_rule": {"rounds": n}},
        "phases_s": {"rounds_timing": 0.5 * (n - 1)},
        **extra,
    }


def _round_one(tmp_path) -> dict:
    result = {
        "status": "ok",
        "started_at": "t0",
        "spec": {"op": "all_gather"},
        "timing": {
            "estimator": "step",
            "rounds": [{"round": 1, "step": {"samples_s": [1e-3] * 3}}],
            "summary": {"n": 3, "median_s": 1e-3},
        },
        "bandwidth": {"busbw_Bps": 1.0},
    }
    (tmp_path / "result.json").write_text(json.dumps(result))
    return result


def test_the_journals_rounds_are_folded_into_the_record_in_order_and_the_last_ones_summary_stands(tmp_path):
    result = _round_one(tmp_path)
    lines = [_round_line(2, 2e-3, bandwidth={"busbw_Bps": 2.0}), _round_line(3, 3e-3, bandwidth={"busbw_Bps": 3.0})]
    for line in lines:
        append_round(tmp_path, line)
    folded = with_journal(result, tmp_path)
    assert [r["round"] for r in folded["timing"]["rounds"]] == [1, 2, 3]
    assert folded["timing"]["summary"] == {"n": 9, "median_s": 3e-3} and folded["timing"]["rounds_rule"] == {
        "rounds": 3
    }
    assert folded["bandwidth"] == {"busbw_Bps": 3.0} and folded["phases_s"] == {"rounds_timing": 1.0}
    assert result["timing"]["summary"]["median_s"] == 1e-3  # the record read is not changed
    r = read_result(tmp_path)
    assert [x.round for x in r.timing.rounds] == [1, 2, 3] and r.timing.summary.median_s == 3e-3
    # a round result.json already holds (written whole, then killed before the journal went) is not doubled
    (tmp_path / "result.json").write_text(json.dumps(dict(folded, timing=dict(folded["timing"]))))
    assert [x.round for x in read_result(tmp_path).timing.rounds] == [1, 2, 3]


def test_a_torn_or_foreign_journal_line_is_skipped(tmp_path):
    _round_one(tmp_path)
    append_round(tmp_path, _round_line(2, 2e-3))
    with (tmp_path / ROUNDS_NAME).open("a") as f:
        f.write('["not a round"]\n{"round": {"round": "3"}, "timing": {}}\n')  # not ours
        f.write(json.dumps(_round_line(3, 9e-3, started_at="an earlier run")) + "\n")  # not this record's
        f.write(json.dumps(_round_line(4, 4e-3))[:40])  # killed mid-write
    assert [line["round"]["round"] for line in journal_rounds(tmp_path)] == [2, 3]
    r = read_result(tmp_path)
    assert r.ok and [x.round for x in r.timing.rounds] == [1, 2] and r.timing.summary.median_s == 2e-3
    # the next line is written after the torn one, on a line of its own
    append_round(tmp_path, _round_line(4, 4e-3))
    assert [x.round for x in read_result(tmp_path).timing.rounds] == [1, 2, 4]


def test_a_failed_point_or_one_without_a_journal_is_read_as_it_is(tmp_path):
    result = _round_one(tmp_path)
    assert with_journal(result, tmp_path) is result
    append_round(tmp_path, _round_line(2, 2e-3))
    failed = dict(result, status="failed")
    assert with_journal(failed, tmp_path) is failed
