"""The run folder's reader (:mod:`analysis.runs.rundir`): the records beside ``result.json``."""

from __future__ import annotations

import json

from analysis.runs.processes import process_parts
from analysis.runs.record import Process, Result
from analysis.runs.rundir import read_host_results


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
