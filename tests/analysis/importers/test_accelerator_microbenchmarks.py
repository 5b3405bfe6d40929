"""``python -m analysis import accelerator-microbenchmarks``: its metrics_report.jsonl (the layout
of benchmark_utils.maybe_write_metrics_file at AI-Hypercomputer/accelerator-microbenchmarks
commit 7feab442) read into a sweep folder, with V and the time worked out by hand from its
bandwidth definitions (src/benchmark_collectives.py)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from analysis import load_sweep
from analysis.cli import main as analysis_main

LINES = [
    # psum over 8 chips (ici): M = 8192^2 * 2 B = 134217728 = V; bw = V * 2*7/8 / t
    {
        "metrics": {"ici_bandwidth_gbyte_s_p50": 87.5, "ici_bandwidth_gbyte_s_avg": 86.0},
        "dimensions": {"matrix_dim": "8192", "dtype": "2", "dcn_size": "2", "ici_size": "8", "test_name": "psum"},
    },
    # all_gather over 4 chips: M = 1024^2 * 4 B = 4194304, V = 4 M = 16777216; bw = M * 3 / t
    {
        "metrics": {"ici_bandwidth_gbyte_s_p50": 50.0},
        "dimensions": {"matrix_dim": "1024", "dtype": "4", "dcn_size": "1", "ici_size": "4", "test_name": "all_gather"},
    },
    {
        "metrics": {"ici_bandwidth_gbyte_s_p50": 10.0},
        "dimensions": {"matrix_dim": "1024", "dtype": "4", "dcn_size": "1", "ici_size": "4", "test_name": "ppermute"},
    },  # fmt: skip
]


def run_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = analysis_main(["import", "accelerator-microbenchmarks", *map(str, argv)])
    return rc, out.getvalue(), err.getvalue()


def test_psum_and_all_gather_become_points_with_the_books_V_and_the_time_its_bandwidth_implies(tmp_path):
    f = tmp_path / "metrics_report.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in LINES) + "\n")
    rc, out, err = run_cli(f, "--out", tmp_path / "s", "--hardware", "tpu_v6e")
    assert rc == 0, err
    results = [json.loads(p.read_text()) for p in sorted((tmp_path / "s").glob("*/result.json"))]
    got = {(r["spec"]["op"], r["spec"]["group_size"]): r for r in results}
    assert set(got) == {("all_reduce", 8), ("all_gather", 4)}  # ppermute left out; dcn has no bandwidth
    ar, ag = got["all_reduce", 8], got["all_gather", 4]
    assert ar["spec"]["V_bytes"] == 134217728 and ar["spec"]["dtype"] == "bfloat16"
    assert ar["timing"]["summary"]["median_s"] == pytest.approx(2.68435456e-3)  # 134217728 * 1.75 / 87.5e9
    assert ag["spec"]["V_bytes"] == 16777216
    assert ag["timing"]["summary"]["median_s"] == pytest.approx(2.5165824e-4)  # 16777216 * 0.75 / 50e9
    assert ar["spec"]["hardware"] == "tpu_v6e" and ar["imported"]["line"] == 1
    s = load_sweep(tmp_path / "s", allow_mixed=True)  # two collectives over two group sizes
    bus = dict(zip(s.points["op"], s.points["busbw_Bps"]))
    assert bus["all_reduce"] == pytest.approx(87.5e9) and bus["all_gather"] == pytest.approx(50e9)


def test_without_hardware_or_with_a_broken_line_it_is_one_error_line(tmp_path):
    f = tmp_path / "metrics_report.jsonl"
    f.write_text(json.dumps(LINES[0]) + "\n{not json\n")
    rc, _, err = run_cli(f, "--out", tmp_path / "s")
    assert (
        rc == 2
        and err == "error: accelerator-microbenchmarks results do not name the chip: pass --hardware (e.g. tpu_v6e)\n"
    )
    rc, _, err = run_cli(f, "--out", tmp_path / "s", "--hardware", "tpu_v6e")
    assert rc == 2 and err.startswith(f"error: {f}:2: not a JSON line (")
    assert not (tmp_path / "s").exists()


def test_a_shape_and_a_recorded_time_are_read_as_such(tmp_path):
    # later versions: matrix_dim "8192x8x128" (M = 8192*8*128 * 2 B = 16 MiB) and ici_time_ms_p50
    line = {
        "metrics": {"ici_bandwidth_gbyte_s_p50": 1.0, "ici_time_ms_p50": 0.25},
        "dimensions": {"matrix_dim": "8192x8x128", "dtype": "2", "ici_size": "4", "test_name": "psum"},
    }
    f = tmp_path / "metrics_report.jsonl"
    f.write_text(json.dumps(line) + "\n")
    assert run_cli(f, "--out", tmp_path / "s", "--hardware", "tpu_v6e")[0] == 0
    (r,) = [json.loads(p.read_text()) for p in (tmp_path / "s").glob("*/result.json")]
    assert r["spec"]["V_bytes"] == 8192 * 8 * 128 * 2  # psum: V = M per chip
    assert r["timing"]["summary"]["median_s"] == pytest.approx(0.25e-3)  # the recorded time, not V / bw
