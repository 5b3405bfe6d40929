"""shardlab installs and runs as its ecosystem expects: a package that carries its configs, a
command with tab completion, strict configs, versioned results, nccl-tests' size spellings
and acceptance gate. (CI also builds the wheel and runs it from a fresh venv: .ci/run.)"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from shardlab_cli import runner

REPO = Path(__file__).resolve().parents[2]
FAST = ["timing.rounds=1", "timing.budget_s=0.2", "timing.min_iters=5", "trace.iters=2"]


def test_the_wheel_lists_every_package_and_carries_conf_and_sweeps():
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = sorted(
        ".".join(p.parent.relative_to(REPO).parts)
        for d in ("runner", "analysis")
        for p in (REPO / d).rglob("__init__.py")
    )
    assert sorted(p for p in tool["packages"] if p not in ("runner.conf", "runner.sweeps")) == found
    assert tool["package-dir"] == {"runner.conf": "conf", "runner.sweeps": "sweeps"}


def test_the_shardlab_command_completes_op_names_in_bash():
    launch = "import sys; sys.argv[0] = 'shardlab'; from runner.__main__ import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", launch, "-sc", "query=bash"],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "COMP_LINE": "shardlab op=all_"},
        cwd="/",
        timeout=60,
    )
    assert proc.stdout.split() == ["op=all_gather", "op=all_reduce", "op=all_to_all"]


def test_an_unknown_key_added_with_plus_is_refused_before_any_work(compose_cfg, tmp_path):
    from runner.config.spec import build_spec
    from runner.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^op.sise_bytes: op has no such key; its keys are name, axes, size_bytes"):
        build_spec(compose_cfg(["+op.sise_bytes=1KiB"]))
    proc = runner("-m", "+op.sise_bytes=1KiB", f"hydra.sweep.dir={tmp_path}/s", timeout=60)
    assert proc.returncode == 2 and not (tmp_path / "s").exists()
    assert proc.stderr.strip().splitlines() == [
        "error: op.sise_bytes: op has no such key; its keys are name, axes, size_bytes, grad, expr, dims, strategy, "
        "sharding, target, inputs"
    ]


@pytest.mark.parametrize(
    "override,allowed",
    [
        ("dtype=float31", "[float32, bfloat16, float16, int32, int8]"),
        (
            "op.strategy=fastest",
            "[auto, allgather_then_matmul, matmul_then_allreduce, matmul_then_reducescatter, collective_matmul]",
        ),
        ("distributed.mode=mpi", "[none, local, auto]"),
        ("timing.estimator=wall", "[auto, step, loop, device]"),
    ],
)
def test_choices_are_checked_by_hydra_at_composition(compose_cfg, override, allowed):
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException) as err:
        compose_cfg([override])
    assert f"expected one of {allowed}" in str(err.value.__cause__)


def test_one_override_sweeps_every_power_of_two(compose_cfg):
    cfg = compose_cfg(["+sweep=allgather_sizes", "sizes.max=1GiB"], return_hydra_config=True)
    sizes = cfg.hydra.sweeper.params["op.size_bytes"].split(",")
    assert sizes == [
        "1KiB",
        "2KiB",
        "4KiB",
        "8KiB",
        "16KiB",
        "32KiB",
        "64KiB",
        "128KiB",
        "256KiB",
        "512KiB",
        "1MiB",
        "2MiB",
        "4MiB",
        "8MiB",
        "16MiB",
        "32MiB",
        "64MiB",
        "128MiB",
        "256MiB",
        "512MiB",
        "1GiB",
    ]
    cfg = compose_cfg(
        ["+sweep=collectives_sizes", "sizes.min=8", "sizes.max=128M", "sizes.factor=16"], return_hydra_config=True
    )
    assert cfg.hydra.sweeper.params["op.size_bytes"] == "8B,128B,2KiB,32KiB,512KiB,8MiB,128MiB"


@pytest.mark.parametrize(
    "text,expected", [("128M", 128 << 20), ("4G", 4 << 30), ("16mib", 16 << 20), ("16MB", 16_000_000), ("8", 8)]
)
def test_sizes_read_as_nccl_tests_reads_them_and_print_exactly(text, expected):
    from analysis.book.units import format_size, parse_size

    assert parse_size(text) == expected
    assert format_size(16_000_000) == "16MB" and format_size(128 << 20) == "128MiB"


def test_results_are_strict_json_with_versions_and_iso_times(compose_cfg, tmp_path):
    from small_sweep import small_sweep

    from analysis.report import write_report

    root = small_sweep(tmp_path / "s", compose_cfg, sizes=("1KiB", "2KiB", "4KiB"))
    write_report(root)

    def refuse(name):
        raise ValueError(f"not strict JSON: {name}")

    result = json.loads(next(root.glob("*/result.json")).read_text(), parse_constant=refuse)
    fit = json.loads((root / "fit.json").read_text(), parse_constant=refuse)
    assert (result["format"], result["format_version"]) == ("shardlab.result", 2)
    assert (fit["format"], fit["format_version"]) == ("shardlab.fit", 2)
    assert result["shardlab_version"] == fit["shardlab_version"] != ""
    import datetime as dt

    started, ended = (dt.datetime.fromisoformat(result[k]) for k in ("started_at", "ended_at"))
    assert started.tzinfo is not None and started <= ended
    assert "XLA_FLAGS" in result["environment"]["env"]  # what changes XLA's behaviour is recorded
    samples = (root / "samples.csv").read_text().splitlines()
    assert samples[0].startswith("point,") and len(samples) > 3


def test_point_folders_are_zero_padded_and_resume_adopts_old_unpadded_ones(tmp_path):
    from runner.sweep.point import adopt_unpadded

    old = tmp_path / "3_op.size_bytes=8KiB"
    (old / "trace").mkdir(parents=True)
    (old / "result.json").write_text('{"status": "ok"}')
    (old / ".hydra").mkdir()
    (old / ".hydra" / "config.yaml").write_text("old")
    new = tmp_path / "003_op.size_bytes=8KiB"
    (new / ".hydra").mkdir(parents=True)
    (new / ".hydra" / "config.yaml").write_text("new")  # Hydra's, for this run
    adopt_unpadded(new)
    assert not old.exists()
    assert (new / "result.json").read_text() == '{"status": "ok"}' and (new / "trace").is_dir()
    assert (new / ".hydra" / "config.yaml").read_text() == "new"


def test_the_gate_fails_a_sweep_below_the_bar_after_its_report(tmp_path):
    out = tmp_path / "s"
    proc = runner(
        "+sweep=allgather_sizes",
        "sizes.max=4KiB",
        *FAST,
        "check.min_busbw_GBps=1000",
        f"hydra.sweep.dir={out}",
        expect=3,
    )
    assert (out / "report" / "index.html").is_file()
    assert sorted(p.name.split(",")[0] for p in out.iterdir() if p.name[0].isdigit()) == [
        "000_op.size_bytes=1KiB",
        "001_op.size_bytes=2KiB",
        "002_op.size_bytes=4KiB",
    ]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(
        "error: bus bandwidth below check.min_busbw_GBps=1000: AllGather over X (8 devices, float32) averages "
    )
    assert line.endswith("(3 of 3 points below: 1KiB, 2KiB, 4KiB)")


def test_the_gate_judges_each_familys_average_as_nccl_tests_does():
    import pandas as pd

    from analysis.gate import below_bar

    rows = [
        ("all_gather", 1024, 1e9),
        ("all_gather", 2048, 3e9),  # average 2 GB/s
        ("all_reduce", 1024, 0.5e9),
        ("all_reduce", 2048, 1.0e9),
    ]  # average 0.75 GB/s
    summary = pd.DataFrame(
        [
            {
                "status": "ok",
                "is_target": True,
                "op": op,
                "axes": "X",
                "group_size": 8,
                "dtype": "float32",
                "V_bytes": v,
                "busbw_Bps": b,
            }
            for op, v, b in rows
        ]
    )
    fails = below_bar(summary, 1.5e9)
    assert fails["op"].tolist() == ["all_reduce"] and fails["below"].tolist() == [["1KiB", "2KiB"]]
    assert fails["avg_busbw_Bps"].tolist() == [0.75e9]
    assert below_bar(summary, 0.7e9).empty


def test_shares_read_as_percentages_and_missing_ones_as_blank():
    import pandas as pd

    from analysis.book.units import fmt_pct

    assert [fmt_pct(x) for x in (0.123, 1.0, None, float("nan"), pd.NA)] == ["12%", "100%", "", "", ""]
    assert fmt_pct(0.1234, 1) == "12.3%"
