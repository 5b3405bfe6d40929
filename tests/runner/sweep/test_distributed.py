"""distributed=local: 2 JAX processes x 4 CPU devices on 127.0.0.1 as one 8-device mesh.

One small sweep (AllGather and AllReduce of 1 MiB over an in-process axis X and a
cross-process axis Z) runs through the CLI; the failure cases call ``run`` directly with a
short ``distributed.timeout_s`` and check that no process is left behind.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from shardlab_cli import runner, start

from runner.config.jaxenv import MODE_ENV, NUM_PROCESSES_ENV, process_env
from runner.config.spec import build_spec
from runner.errors import ConfigError
from runner.sweep import pool
from runner.sweep.distributed import TEST_SKIP_PROCESS_ENV, ProcessGroup
from runner.worker import serve as worker

FAST = ["timing.rounds=1", "timing.budget_s=0.3", "timing.min_iters=5", "timing.warmup_max_s=0.5", "trace.iters=2"]


# --- config ------------------------------------------------------------------------------


def test_none_is_the_default_and_local_auto_compose(compose_cfg):
    assert compose_cfg([]).distributed.mode == "none"
    local = build_spec(compose_cfg(["distributed=local", "mesh=xy_4x2", "distributed.cross_process_axis=Y"]))
    assert local["distributed"]["num_processes"] == 2 and local["distributed"]["cross_process_axis"] == "Y"
    env = process_env(local["hardware"], local["distributed"])
    # the test process says 8 devices in XLA_FLAGS; each local process must get its 4
    assert "--xla_force_host_platform_device_count=4" in env["XLA_FLAGS"] and "=8" not in env["XLA_FLAGS"]
    assert env["JAX_PLATFORMS"] == "cpu" and env[MODE_ENV] == "local" and env[NUM_PROCESSES_ENV] == "2"
    auto = build_spec(compose_cfg(["distributed=auto", "distributed.num_processes=4"]))
    env = process_env(auto["hardware"], auto["distributed"])
    assert env[MODE_ENV] == "auto" and env[NUM_PROCESSES_ENV] == "4"


@pytest.mark.parametrize(
    "overrides, names",
    [
        (["distributed.cross_process_axis=X"], "distributed=local or distributed=auto"),
        (["distributed=local", "distributed.cross_process_axis=Q"], "not a mesh axis"),
        (
            [
                "distributed=local",
                "mesh=xy_4x2",
                "mesh.axes.X=2",
                "mesh.axes.Y=3",
                "distributed.devices_per_process=3",
                "distributed.cross_process_axis=Y",
            ],
            "must divide one another",
        ),
        (["distributed=local", "hardware=tpu_v5e"], "distributed=auto on a tpu cluster"),
        (["distributed=local", "distributed.process_id=1"], "leave them null"),
        (["distributed=local", "distributed.num_processes=0"], "distributed.num_processes=0"),
        (["distributed=local", "distributed.timeout_s=0"], "distributed.timeout_s=0"),
    ],
)
def test_bad_distributed_values_name_the_key(compose_cfg, overrides, names):
    with pytest.raises(ConfigError, match=names.replace("(", r"\(")):
        build_spec(compose_cfg(overrides))


# --- a real 2-process sweep --------------------------------------------------------------


def _gone(pid: int) -> bool:
    out = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return out == ""  # a zombie ("Z") would still be listed: a child nobody reaped


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist") / "axes"
    runner("+sweep=cross_process_axes", "op.size_bytes=1MiB", f"hydra.sweep.dir={out}", *FAST, expect=0)
    results = {}
    for p in out.glob("*/result.json"):
        r = json.loads(p.read_text())
        r["point_dir"] = str(p.parent)
        results[(r["spec"]["op"], r["spec"]["axes"][0])] = r
    return out, results


def test_two_processes_form_one_8_device_mesh_with_correct_results(sweep):
    _, results = sweep
    assert set(results) == {(op, ax) for op in ("all_gather", "all_reduce") for ax in ("X", "Z")}
    for (_op, axis), r in results.items():
        assert r["status"] == "ok", r["error"]
        assert r["environment"]["device_count"] == 8 and r["environment"]["process_count"] == 2
        assert r["check"]["passed"] and r["check"]["max_rel_error"] == 0.0
        local = [p["device_ids"] for p in r["processes"]]
        assert [len(d) for d in local] == [4, 4] and not set(local[0]) & set(local[1])
        mesh_ids = sum(sum(r["spec"]["mesh"]["device_ids"], []), [])
        assert sorted(mesh_ids) == sorted(local[0] + local[1])
        placement = r["spec"]["placement"]
        assert placement["cross_process_axes"] == ["Z"]
        assert placement["crosses_processes"] == (axis == "Z")
        # both processes followed process 0's stopping decisions: same number of samples
        assert len({p["timing_summary"]["n"] for p in r["processes"]}) == 1
        assert all(_gone(pid) for pid in r["worker"]["pids"])  # the CLI ended its processes


def test_each_process_traces_and_the_traces_merge_into_one_table(sweep):
    from analysis.runs.processes import collective_skew, merged_device_ops
    from analysis.runs.record import Result

    _, results = sweep
    r = results[("all_gather", "Z")]
    assert len(r["files"]["xplanes"]) == 2 and r["files"]["xplanes"][1].startswith("trace/host1/")
    ops = merged_device_ops(Result.from_json(r))
    assert set(ops["process"]) == {0, 1} and ops["device"].nunique() == 8
    skew = collective_skew(ops)
    ag = skew[skew["hlo_op"].str.startswith("all-gather") | skew["hlo_op"].str.startswith("all_gather")]
    assert len(ag) == 1 and ag["processes"].iloc[0] == 2 and ag["devices"].iloc[0] == 8
    assert ag["slowest_device_time_s"].iloc[0] >= ag["median_device_time_s"].iloc[0] > 0


def test_report_sets_cross_process_beside_in_process(sweep):
    out, _ = sweep
    cmp = pd.read_csv(out / "across_processes.csv")
    assert len(cmp) == 4 and set(cmp["traces_merged"]) == {2}
    md = (out / "report" / "report.md").read_text()
    assert "## Across processes" in md and "across processes (" in md
    # the figure: in-process and cross-process time at 1 MiB for both ops (no timing assertion)
    for op in ("all_gather", "all_reduce"):
        assert f"{op} of 1 MiB over 2 devices took" in md


# --- failures ----------------------------------------------------------------------------


@pytest.fixture
def groups(monkeypatch):
    """Every ProcessGroup the test starts, so it can check their processes are gone."""
    made: list[ProcessGroup] = []
    init = ProcessGroup.__init__

    def spy(self, env):
        init(self, env)
        made.append(self)

    monkeypatch.setattr(ProcessGroup, "__init__", spy)
    yield made
    pool.discard_worker()


def _run(compose_cfg, tmp_path, *overrides):
    from runner.sweep.point import run

    cfg = compose_cfg(["distributed=local", "distributed.timeout_s=3", "op.size_bytes=64KiB", *FAST, *overrides])
    return run(cfg, tmp_path)


def test_a_peer_that_never_joins_fails_the_point_within_the_timeout(compose_cfg, tmp_path, monkeypatch, groups):
    monkeypatch.setenv(TEST_SKIP_PROCESS_ENV, "1")
    r = _run(compose_cfg, tmp_path)
    assert r["status"] == "failed" and r["error_type"] == "WorkerDied"
    assert "did not all join within distributed.timeout_s=3" in r["error"] and "[1] never started" in r["error"]
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "failed"
    assert (tmp_path / "worker.log").is_file()  # process 0's start-up output, saved for the reader
    assert groups and all(_gone(pid) for g in groups for pid in g.pids())


def test_a_process_that_dies_mid_point_takes_its_peers_down(compose_cfg, tmp_path, monkeypatch, groups):
    monkeypatch.setenv(worker.TEST_ABORT_ENV, str(64 << 10))
    monkeypatch.setenv(worker.TEST_ABORT_PROCESS_ENV, "1")
    r = _run(compose_cfg, tmp_path)
    assert r["status"] == "failed" and r["error_type"] == "WorkerDied"
    assert "process 1: worker process killed by signal SIGABRT" in r["error"]
    # process 0 waits in its first collective for the dead peer: it is killed as soon as the
    # parent sees the death, not after distributed.timeout_s
    assert "process 0: killed at once: process(es) [1] died" in r["error"]
    assert groups and all(_gone(pid) for g in groups for pid in g.pids())


# --- agreement under load ----------------------------------------------------------------

BUSY = "import time\nt = time.time() + {s}\nwhile time.time() < t:\n    pass\n"


@pytest.fixture
def cpu_load():
    """Two busy-loop processes (as many as this machine has cores), each ending by itself after
    90 s and killed, by pid, when the test ends: the JAX processes run at unequal speeds."""
    busy = [subprocess.Popen([sys.executable, "-c", BUSY.format(s=90)]) for _ in range(2)]
    yield busy
    for p in busy:
        p.kill()
        p.wait(timeout=10)


def test_processes_agree_on_every_loop_under_cpu_load(compose_cfg, tmp_path, cpu_load, groups):
    # Every loop whose length decides how many collectives a process runs - warm-up, timing,
    # the loop estimator's trip counts and repetitions, the traced steps, the ceiling - ends on
    # process 0's decision. Traced steps are the sharpest case: 200 allowed, stopped by a 0.1 s
    # wall clock that each process started at its own moment; a process that ran one more
    # traced step than its peer waited in the collective until distributed.timeout_s.
    from runner.sweep.point import run

    for i in range(3):
        cfg = compose_cfg(
            [
                "distributed=local",
                "distributed.timeout_s=10",
                "op.size_bytes=1KiB",
                "op.grad=true",  # a collective program the CPU ceiling is not measured for (35 s here)
                "timing.rounds=1",
                "timing.budget_s=0.2",
                "timing.min_iters=5",
                "timing.warmup_max_s=0.3",
                "timing.loop_target_s=0.1",
                "trace.iters=500",
                "trace.max_s=0.05",
            ]
        )
        r = run(cfg, tmp_path / str(i))
        assert r["status"] == "ok", r["error"]
        assert len({p["timing_summary"]["n"] for p in r["processes"]}) == 1
    assert len(groups) == 1  # one process group served all three points: none was killed


def test_traced_steps_stop_on_the_shared_decision_not_the_local_clock(tmp_path):
    import jax.numpy as jnp

    from runner.worker import tracing

    ticks = iter(range(10_000))
    clock = lambda: float(next(ticks))  # noqa: E731 - every reading 1 s later: the local clock says stop at once
    trace = {"iters": 6, "max_s": 0.5, "python_tracer_level": 0, "host_tracer_level": 1}
    asked = []

    def go_on(flag):  # process 0 says: go on
        asked.append(flag)
        return False

    out = tracing.capture(lambda: jnp.ones(4) + 1, tmp_path / "a", trace, agree=go_on, clock=clock)
    # all 6 steps although each local decision (asked after steps 2..5) was "stop"
    assert out["iters"] == 6 and asked == [True] * 4
    out = tracing.capture(lambda: jnp.ones(4) + 1, tmp_path / "b", trace, agree=lambda flag: True, clock=clock)
    assert out["iters"] == 2  # process 0 said stop at the first decision (after the 2 steps always run)


# --- distributed=auto: the README's cluster recipe, two hosts faked on this machine ---------


def test_the_hosts_of_a_distributed_auto_sweep_share_its_folder_and_one_report(tmp_path):
    # "Every host runs the same command" into one shared folder: here two processes on
    # 127.0.0.1, each told its process id (as a cluster's environment would), 2 CPU devices each.
    from runner.sweep.distributed import free_port

    out = tmp_path / "ag"
    env = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    command = [
        "+sweep=allgather_sizes",
        "op.size_bytes=1KiB,2KiB",
        "distributed=auto",
        "distributed.num_processes=2",
        f"distributed.coordinator_address=127.0.0.1:{free_port()}",
        "distributed.timeout_s=60",
        "hardware=cpu",
        "timing.rounds=1",
        "timing.budget_s=0.2",
        "timing.min_iters=5",
        "trace.enabled=false",
        f"hydra.sweep.dir={out}",
    ]
    hosts = [
        start("runner", *command, f"distributed.process_id={i}", env=env, stderr=subprocess.STDOUT) for i in (0, 1)
    ]
    try:
        logs = [h.communicate(timeout=400)[0] for h in hosts]
    finally:
        for h in hosts:
            if h.poll() is None:
                h.kill()
                h.wait()
    assert [h.returncode for h in hosts] == [0, 0], "\n---\n".join(logs)[-4000:]
    # one point folder per point, shared: process 0's result.json and process 1's beside it
    points = sorted(p for p in out.iterdir() if p.is_dir() and p.name[:3].isdigit())
    assert [j.name.split("_", 1)[0] for j in points] == ["000", "001"]
    for j in points:
        r = json.loads((j / "result.json").read_text())
        assert r["status"] == "ok" and r["environment"]["process_count"] == 2, r["error"]
        assert json.loads((j / "result.host1.json").read_text())["environment"]["process_index"] == 1
    # one report, by process 0
    assert "report: " in logs[0] and "the report is process 0's to write" in logs[1] and "report: " not in logs[1]
    assert (out / "report" / "index.html").is_file()
    assert sorted(pd.read_csv(out / "summary.csv").drop_duplicates("point")["size_bytes"]) == [1024, 2048]
