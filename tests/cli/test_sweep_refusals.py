"""What a sweep refuses in one line, and what it survives: a point listed twice, more local
processes than the machine holds, a resume under other XLA flags, ``distributed=auto`` with no
cluster, a ``/`` in an override value, a console reader that leaves early, Ctrl-C while the
report is written. (Each was a traceback, a nested folder, a silent mix or an exit 0.)"""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest
from shardlab_cli import REPO_ROOT, analysis, command, runner

QUICK = ["timing=quick", "timing.budget_s=0.2", "timing.min_iters=5"]


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_a_point_listed_twice_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "sweep"
    proc = runner("-m", "op.size_bytes=1KiB,2KiB,1KiB", *QUICK, f"hydra.sweep.dir={out}", expect=2)
    assert _lines(proc.stderr) == [
        "error: the sweep lists the point op.size_bytes=1KiB timing=quick timing.budget_s=0.2 timing.min_iters=5 "
        "twice; list each value once (timing.rounds repeats a point's measurement)"
    ]
    assert not list(out.glob("*/result.json"))


@pytest.mark.parametrize(
    "sweep_list, said",
    [
        (
            "timing.rounds=2,abc",
            "error: Error merging override timing.rounds=abc; Value 'abc' of type 'str' could not be converted to "
            "Integer",
        ),
        (
            "op=all_gather,nope_op",
            "error: In 'config': Could not find 'op/nope_op'; Available options in 'op': all_gather, all_reduce, "
            "all_to_all, matmul, mm_case1, mm_case2, mm_case3, mm_case3_scatter, mm_case4, mm_case4_invalid, mm_q4, "
            "mm_ring_allgather, mm_ring_allgather_naive, mm_ring_reducescatter, mm_ring_reducescatter_naive, program, "
            "reduce_scatter, transformer_block",
        ),
    ],
)
def test_a_bad_value_in_a_sweep_list_is_one_line_and_exit_2_before_any_point(tmp_path, sweep_list, said):
    # Hydra's sweeper composes every point after the callbacks' start: its error was Hydra's own
    # 6 to 25 lines and exit 1 ("a point failed")
    out = tmp_path / "sweep"
    proc = runner("-m", sweep_list, "op.size_bytes=1KiB", *QUICK, f"hydra.sweep.dir={out}", expect=2)
    assert _lines(proc.stderr) == [said]
    assert not [p for p in out.iterdir() if p.is_dir()]  # no point folder


def test_more_local_processes_than_the_machine_holds_is_one_line_and_none_start(tmp_path):
    from runner.config.spec import local_process_limit

    proc = runner(
        "distributed=local", "distributed.num_processes=1000", "op.size_bytes=1KiB", *QUICK,
        f"hydra.run.dir={tmp_path / 'run'}", expect=2,
    )  # fmt: skip
    said = _lines(proc.stdout + proc.stderr)
    assert len(said) == 1 and said[0].startswith(
        f"all_gather: FAILED (ConfigError) distributed.num_processes=1000: this machine holds at most "
        f"{local_process_limit()} local JAX processes ({8} per core on its {os.cpu_count()}"
    )
    assert not (tmp_path / "run" / "worker.log").exists()  # no worker was started


def test_distributed_auto_with_no_cluster_is_one_line_and_exit_2(tmp_path, monkeypatch):
    for var in [v for v in os.environ if v.startswith(("SLURM_", "OMPI_", "TPU_", "JAX_COORDINATOR"))]:
        monkeypatch.delenv(var)
    proc = runner("distributed=auto", "op.size_bytes=1KiB", *QUICK, f"hydra.run.dir={tmp_path / 'run'}", expect=2)
    said = _lines(proc.stdout + proc.stderr)
    assert said == [
        "all_gather: FAILED (ConfigError) distributed=auto found no cluster to join (JAX: coordinator_address "
        "should be defined): run it under SLURM, Open MPI or on a TPU pod slice, or give "
        "distributed.coordinator_address, distributed.num_processes and distributed.process_id; distributed=none "
        f"runs on this host alone -> {tmp_path / 'run'}"
    ]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("resume") / "sweep"
    runner("+sweep=allgather_sizes", "sizes.max=2KiB", *QUICK, f"hydra.sweep.dir={out}", expect=0)
    return out


def test_a_resume_under_other_xla_flags_is_refused_not_mixed(finished):
    before = {p: p.read_bytes() for p in finished.glob("*/result.json")}
    flags = os.environ.get("XLA_FLAGS", "")
    proc = runner(
        "+sweep=allgather_sizes", "sizes.max=2KiB", *QUICK, f"hydra.sweep.dir={finished}", "resume=true",
        env={"XLA_FLAGS": f"{flags} --xla_cpu_enable_fast_math=false".strip()}, expect=2,
    )  # fmt: skip
    said = _lines(proc.stderr)
    assert len(said) == 1 and said[0].startswith("error: resume=true: 000_op.size_bytes=1KiB")
    assert "--xla_cpu_enable_fast_math=false" in said[0] and said[0].endswith(
        "one fit would mix them: resume under the same settings, or measure every point again "
        "(overwrite=true, no resume)"
    )
    assert {p: p.read_bytes() for p in finished.glob("*/result.json")} == before
    kept = runner("+sweep=allgather_sizes", "sizes.max=2KiB", *QUICK, f"hydra.sweep.dir={finished}", "resume=true")
    assert kept.returncode == 0 and "(kept from before)" in kept.stdout  # the same settings resume as ever


def test_a_slash_in_an_override_value_keeps_every_point_one_folder_deep(tmp_path):
    step = tmp_path / "sub" / "my_step.py"
    step.parent.mkdir()
    step.write_text("def matmul(x, w):\n    return x @ w\n")
    out = tmp_path / "sweep"
    runner(
        "-m", "op=program", f"op.target={step}:matmul", "op.inputs=['x[B_X, D]', 'w[D, F]']",
        "op.dims={B: 16, D: 4, F: 8}", "dtype=float32,bfloat16", *QUICK, f"hydra.sweep.dir={out}", expect=0,
    )  # fmt: skip
    points = sorted(p.parent for p in out.glob("*/result.json"))
    assert len(points) == 2 and not list(out.glob("*/*/result.json"))
    assert all(f"op.target={str(step).replace('/', '%2F')}" in p.name for p in points)
    rebuilt = analysis("report", out, expect=0)
    assert rebuilt.stdout.strip() == str(out / "report" / "index.html")
    import pandas as pd

    assert sorted(pd.read_csv(out / "summary.csv")["dtype"]) == ["bfloat16", "float32"]


def test_folder_names_stay_short_and_apart():
    from analysis.runs.sweep_match import MAX_NAME_BYTES, folder_name

    assert folder_name("op.size_bytes=1KiB") == "op.size_bytes=1KiB"
    assert folder_name("op.target=a/b%c.py:f") == "op.target=a%2Fb%25c.py:f"
    long_a, long_b = "x=" + "a" * 400, "x=" + "a" * 399 + "b"
    assert len(folder_name(long_a).encode()) <= MAX_NAME_BYTES
    assert folder_name(long_a) != folder_name(long_b)


def test_a_console_reader_that_leaves_early_costs_no_traceback_and_no_point(tmp_path):
    out = tmp_path / "sweep"
    sweep = command("runner", "+sweep=allgather_sizes", "sizes.max=4KiB", *QUICK, f"hydra.sweep.dir={out}")
    pipeline = f"{shlex.join(sweep)} | head -1"
    proc = subprocess.run(["bash", "-c", pipeline], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    first = f"shardlab: 3 points x 1 round(s) (one round: not checked for run-to-run drift) -> {out}"
    assert _lines(proc.stdout) == [first]
    assert "Traceback" not in proc.stderr and "Broken pipe" not in proc.stderr, proc.stderr[-2000:]
    assert len(list(out.glob("*/result.json"))) == 3 and (out / "report" / "index.html").is_file()


def test_ctrl_c_while_the_report_is_written_exits_130_with_two_lines(finished, monkeypatch, capsys):
    from omegaconf import OmegaConf

    import analysis.report
    from runner.sweep import callbacks

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(analysis.report, "write_report", interrupted)
    config = OmegaConf.create(
        {
            "hydra": {"sweep": {"dir": str(finished)}},
            "timing": {"rounds": 1, "seed": 0},
            "distributed": {"mode": "none"},
            "check": {"min_busbw_GBps": None},
        }
    )
    with pytest.raises(SystemExit) as stop:
        callbacks.ReportCallback().on_multirun_end(config)
    assert stop.value.code == 130
    assert _lines(capsys.readouterr().err) == [
        "interrupted while the report was written: the 2 point(s) are on disk, each whole",
        f"report: {callbacks.command.analysis_command('report', callbacks._rel(finished))}",
    ]
