"""A user's function that raises a ``BaseException`` (KeyboardInterrupt, SystemExit, its own
subclass) is a failed point like any other: one line naming it, its traceback in the point's
log, and the next point of the sweep measured by a fresh worker. (It was a 45-line traceback on
the console, then "WorkerDied ... exited with code 1" with an empty log tail.)"""

from __future__ import annotations

import json

from runner import run

USER_MODULE = """
class Boom(BaseException):
    pass


def interrupted(x):
    raise KeyboardInterrupt("raised by the user's step")


def boom(x):
    raise Boom("a BaseException of its own")
"""
QUICK = ["timing.min_iters=5", "timing.budget_s=0.3", "trace.iters=3", "timing.rounds=1"]


def test_a_user_base_exception_is_a_failed_point_and_the_sweep_goes_on(compose_cfg, tmp_path, capfd):
    (tmp_path / "bad_step.py").write_text(USER_MODULE)
    for fn, error_type, error in [
        ("interrupted", "KeyboardInterrupt", "raised by the user's step"),
        ("boom", "Boom", "a BaseException of its own"),
    ]:
        cfg = compose_cfg(
            [
                *QUICK,
                "op=program",
                f"op.target={tmp_path / 'bad_step.py'}:{fn}",
                "op.inputs=['x[B_X, D]']",
                "op.dims={B: 64, D: 512}",
            ]
        )
        r = run(cfg, tmp_path / fn)
        assert (r["status"], r["error_type"], r["error"]) == ("failed", error_type, error)
        on_disk = json.loads((tmp_path / fn / "result.json").read_text())
        assert (on_disk["status"], on_disk["error_type"]) == ("failed", error_type)
        log = (tmp_path / fn / "worker.log").read_text()
        assert "Traceback" in log and f"in {fn}" in log  # the user's frame, in the point's log
        assert "Traceback" not in capfd.readouterr().err  # and not on the console
    # the next point runs (a fresh worker: the one that saw the BaseException was let go)
    ok = run(compose_cfg([*QUICK, "op.size_bytes=4KiB"]), tmp_path / "next")
    assert ok["status"] == "ok"
