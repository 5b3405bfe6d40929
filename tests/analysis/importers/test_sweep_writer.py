"""accelerator-microbenchmarks' reader and the imported sweep's writer (analysis.importers.
accelerator_microbenchmarks, .sweep_writer) by exact expectations (issue 30, round two's
mutation check): every collective at both levels with V, S and the time worked out by hand from
the tool's bandwidth definitions, shapes and dtype names, a recorded time preferred over a
bandwidth, every malformed line; and a point's ``result.json`` and a sweep folder written whole,
with several runs, several device kinds and a write that fails half way."""

from __future__ import annotations

import json

import pytest
from imported_point import imported_point

from analysis.importers import ImportFormatError, sweep_writer
from analysis.importers.accelerator_microbenchmarks import parse_results
from analysis.importers.sweep_writer import hardware_of, point_result, write_sweep


def _line(test_name: str, metrics: dict, **dims) -> str:
    return json.dumps({"metrics": metrics, "dimensions": {"test_name": test_name, **dims}})


LINES = [
    # psum_scatter (not psum), M = 64^2 x 2 B (bfloat16) = 8192 B. ici, n = 4: V = M,
    # t = V 3/4 / 6.144 GB/s = 1 us; dcn, n = 2: V = M / 2 = 4096, its average time 0.5 ms
    # (before its later name's 9 ms and the bandwidth's)
    _line(
        "psum_scatter_ici_dcn",
        {
            "ici_bandwidth_gbyte_s_p50": 6.144,
            "dcn_bandwidth_gbyte_s_p50": 1.0,
            "dcn_average_time_ms_p50": 0.5,
            "dcn_time_ms_p50": 9.0,
        },
        matrix_dim="64",
        dtype="2",
        ici_size="4",
        dcn_size="2",
    ),
    "",
    # all_to_all, a shape: M = 8 x 4 x 2 x 8 B (float64) = 512 B; ici n = 4: V = 4 M = 2048,
    # S = V / 4 = 512 (nccl-tests' busbw of all_to_all is S (n-1)/n / t, so t = 512 x 3/4 /
    # 0.384 GB/s = 1 us: test_all_to_all_s_time_is_its_per_rank_buffers); dcn of 1 is no collective
    _line(
        "all_to_all", {"ici_bandwidth_gbyte_s_p50": 0.384}, matrix_dim="8x4x2", dtype="8", ici_size="4", dcn_size="1"
    ),
    # all_gather over dcn only (an ici of 1 is no collective, whatever it measured), its later
    # time name: M = 32^2 x 1 B (int8) = 1024 = V (dcn), 2 us
    _line(
        "all_gather",
        {"dcn_time_ms_p50": 0.002, "ici_bandwidth_gbyte_s_p50": 5.0},
        matrix_dim="32",
        dtype="1",
        ici_size="1",
        dcn_size="4",
    ),
    # psum over dcn (ici of 2 measured nothing): M = 16^2 x 4 B = 1024, V = M / 4 = 256,
    # t = V 2 x 3/4 / 0.384 GB/s = 1 us
    _line("psum", {"dcn_bandwidth_gbyte_s_p50": 0.384}, matrix_dim="16", dtype="4", ici_size="2", dcn_size="4"),
    _line("ppermute", {"ici_bandwidth_gbyte_s_p50": 1.0}, matrix_dim="16", dtype="4", ici_size="4"),
]


def test_every_collective_at_both_levels_has_the_books_V_and_the_time_its_bandwidth_implies():
    points = parse_results("\n".join(LINES), "m.jsonl", hardware="tpu_v6e")
    got = [(p.op, p.origin["level"], p.ranks, p.nodes, p.dtype, p.V_bytes, p.S_bytes) for p in points]
    assert got == [
        ("reduce_scatter", "ici", 4, 1, "bfloat16", 8192.0, 8192.0),
        ("reduce_scatter", "dcn", 2, 2, "bfloat16", 4096.0, 4096.0),
        ("all_to_all", "ici", 4, 1, "float64", 2048.0, 512.0),
        ("all_gather", "dcn", 4, 4, "int8", 1024.0, 1024.0),
        ("all_reduce", "dcn", 4, 4, "float32", 256.0, 256.0),
    ]
    times = [p.time_s for i, p in enumerate(points) if i != 2]  # all_to_all's: the test below
    assert times == pytest.approx([1e-6, 0.5e-3, 2e-6, 1e-6], rel=1e-12, abs=0)
    assert {(p.device_kind, p.backend, p.tool, tuple(p.hosts), p.wrong) for p in points} == {
        ("TPU v6 lite", "tpu", "accelerator-microbenchmarks", (), None)
    }
    first, second, a2a = points[:3]
    assert first.origin == {
        "file": "m.jsonl",
        "run": 0,
        "line": 1,
        "test_name": "psum_scatter_ici_dcn",
        "level": "ici",
        "matrix_dim": 64,
        "size_convention": "M = matrix_dim^2 * itemsize; V as in analysis.importers.accelerator_microbenchmarks",
        "bandwidth_definition": "{level}_bandwidth_gbyte_s = nccl-tests' busbw of V over the level",
        "bandwidth_Bps": pytest.approx(6.144e9, rel=1e-12),
        "metrics": json.loads(LINES[0])["metrics"],
    }
    assert second.origin["bandwidth_Bps"] == pytest.approx(1e9) and points[3].origin["bandwidth_Bps"] is None
    assert (a2a.origin["line"], a2a.origin["matrix_dim"]) == (3, 8)  # the blank line 2 counts


def test_the_chip_is_the_entrys_first_device_kind_or_its_name_or_unknown(tmp_path):
    assert parse_results(LINES[4], "m.jsonl", hardware="tpu_v5e")[0].device_kind == "TPU v5 lite"
    assert parse_results(LINES[4], "m.jsonl")[0].device_kind == "unknown"
    mine = tmp_path / "lab.yaml"
    mine.write_text("name: lab\nkind: tpu\n")  # no device_kinds: the name given stands in
    assert parse_results(LINES[4], "m.jsonl", hardware=str(mine))[0].device_kind == str(mine)


def test_other_tests_are_passed_over_and_a_level_without_its_size_has_one_device():
    text = "\n".join(
        [
            LINES[5],  # ppermute: passed over, and the lines after it still read
            # all_to_all over dcn: M = 16^2 x 4 B = 1024 = V (each slice holds M / 2), S = V / 2
            _line("all_to_all", {"dcn_time_ms_p50": 0.001}, matrix_dim="16", dtype="4", dcn_size="2"),
            # no ici_size or dcn_size: one device at each level, so no collective however measured
            _line(
                "psum", {"ici_bandwidth_gbyte_s_p50": 1.0, "dcn_bandwidth_gbyte_s_p50": 1.0}, matrix_dim="8", dtype="4"
            ),
        ]
    )
    (p,) = parse_results(text, "m.jsonl")
    assert (p.op, p.origin["level"], p.ranks, p.nodes, p.V_bytes, p.S_bytes) == (
        "all_to_all",
        "dcn",
        2,
        2,
        1024.0,
        512.0,
    )
    assert (p.time_s, p.origin["line"]) == (pytest.approx(1e-6, rel=1e-12, abs=0), 2)
    with pytest.raises(ImportFormatError, match=r"^<text>: no psum, psum_scatter, all_gather or all_to_all result"):
        parse_results(LINES[5])


def test_all_to_all_s_time_is_its_per_rank_buffers():
    # read back, the point's busbw (S / t x 3/4) must be the file's 0.384 GB/s, not a quarter of it
    (p,) = parse_results(LINES[2], "m.jsonl")
    assert p.time_s == pytest.approx(1e-6, rel=1e-12)


def test_a_dtype_given_by_name_reads_its_element_size():
    # the reader takes a dtype name where the element size is not digits: 8^2 x 2 B = 128 B
    (p,) = parse_results(_line("psum", {"ici_time_ms_p50": 1.0}, matrix_dim="8", dtype="bfloat16", ici_size="2"))
    assert (p.dtype, p.V_bytes) == ("bfloat16", 128.0)
    # a sub-byte type keeps its half byte: 8^2 x 0.5 B = 32 B
    (p,) = parse_results(_line("psum", {"ici_time_ms_p50": 1.0}, matrix_dim="8", dtype="int4", ici_size="2"))
    assert (p.dtype, p.V_bytes) == ("int4", 32.0)


def _error(text: str) -> str:
    with pytest.raises(ImportFormatError) as e:
        parse_results(text, "m.jsonl")
    return str(e.value)


def test_each_malformed_line_is_one_error_naming_file_and_line():
    assert _error("\n[1]") == "m.jsonl:2: a line without 'metrics' and 'dimensions' objects"
    assert _error('{"metrics": {}, "dimensions": []}') == "m.jsonl:1: a line without 'metrics' and 'dimensions' objects"
    assert _error('{"metrics": [], "dimensions": {}}') == "m.jsonl:1: a line without 'metrics' and 'dimensions' objects"
    assert _error(_line("psum", {}, dtype="4")) == (
        "m.jsonl:1: psum: dimensions' 'matrix_dim' is missing; it must be a whole number like 8192, or a shape "
        "like 8192x8x128"
    )
    assert _error(_line("psum", {}, matrix_dim="8x0", dtype="4")) == (
        "m.jsonl:1: psum: dimensions' 'matrix_dim' is '8x0'; it must be a whole number like 8192, or a shape "
        "like 8192x8x128"
    )
    assert _error(_line("psum", {}, matrix_dim="8")) == (
        "m.jsonl:1: psum: dimensions' 'dtype' is missing; allowed: 4, 2, 1, 8, float64, float32, int32, bfloat16, "
        "float16, int16, int8, uint8, float8_e4m3fn, float8_e5m2, int4"
    )
    assert _error(_line("psum", {}, matrix_dim="8", dtype="float128")).startswith(
        "m.jsonl:1: psum: dimensions' 'dtype' is 'float128'; allowed: 4, 2, 1, 8, float64,"
    )
    bad = _line("psum", {}, matrix_dim="8", dtype="4", ici_size="four")
    assert _error(bad) == "m.jsonl:1: psum: dimensions' 'ici_size' is 'four'; it must be a whole number of devices"
    bad = _line("psum", {}, matrix_dim="8", dtype="4", dcn_size="-2")
    assert _error(bad) == "m.jsonl:1: psum: dimensions' 'dcn_size' is '-2'; it must be a whole number of devices"
    assert _error(LINES[5]) == "m.jsonl: no psum, psum_scatter, all_gather or all_to_all result in it"
    assert _error("{x").startswith("m.jsonl:1: not a JSON line (Expecting property name")


def test_a_points_result_json_whole():
    r = point_result(imported_point(), "h100", "why", "python -m analysis import nccl-tests f.txt")
    assert r == {
        "format": "shardlab.result",
        "format_version": r["format_version"],
        "shardlab_version": r["shardlab_version"],
        "status": "ok",
        "spec": {
            "op": "all_reduce",
            "dtype": "float32",
            "size_bytes": 1024.0,
            "V_bytes": 1024.0,
            "group_size": 16,
            "num_groups": 1,
            "axes": ["X"],
            "mesh": {"name": "2x8", "axes": {"X": 16}},
            "hardware": "h100",
            "nodes": 2,
        },
        "environment": {
            "backend": "gpu",
            "device_kind": "NVIDIA H100 80GB HBM3",
            "device_count": 16,
            "process_count": None,
            "host": "a,b",
            "jax_version": None,
            "jaxlib_version": None,
        },
        "config": {
            "op": {"name": "all_reduce", "size_bytes": 1024.0},
            "dtype": "float32",
            "hardware": {"name": "h100"},
        },
        "timing": {"estimator": "imported", "summary": {"median_s": 1e-5, "n": 1, "rounds": 1}},
        "imported": {
            "file": "f.txt",
            "run": 0,
            "line": 3,
            "tool": "nccl-tests",
            "hardware_resolved": "why",
            "command": "python -m analysis import nccl-tests f.txt",
        },
        "files": {},
    }


def test_wrong_elements_fail_the_point_and_hosts_and_meshes_are_named_by_count():
    bad = point_result(imported_point(wrong=5, tool="rccl-tests"), "h", "w", "c")
    assert (bad["status"], bad["error_type"]) == ("failed", "WrongResult")
    assert bad["error"] == "rccl-tests counted 5 wrong elements at this size"
    unchecked = point_result(imported_point(wrong=None), "h", "w", "c")
    assert unchecked["status"] == "ok" and "error" not in unchecked and "error_type" not in unchecked
    four = point_result(imported_point(hosts=["h0", "h1", "h2", "h3"], nodes=1, ranks=8), "h", "w", "c")
    assert (four["environment"]["host"], four["spec"]["mesh"]["name"]) == ("h0,h1,h2,h3", "x")
    five = point_result(imported_point(hosts=[f"h{i}" for i in range(5)]), "h", "w", "c")
    assert five["environment"]["host"] == "h0,h1,h2,h3,... (5 hosts)"
    six = point_result(imported_point(hosts=[f"h{i}" for i in range(6)], nodes=3, ranks=12), "h", "w", "c")
    assert (six["environment"]["host"], six["spec"]["mesh"]["name"]) == ("h0,h1,h2,h3,... (6 hosts)", "3x4")


def test_the_hardware_is_the_override_or_the_device_kinds_entry():
    assert hardware_of("NVIDIA H100 80GB HBM3", "gpu", "h200") == ("h200", "--hardware h200")
    assert hardware_of("NVIDIA H100 80GB HBM3", "gpu", None) == (
        "h100",
        "'NVIDIA H100 80GB HBM3' is listed in h100's device_kinds",
    )
    # a GPU tool's import is resolved among GPU entries only, and JAX's "cuda" is "gpu"
    assert hardware_of("TPU v6 lite", "gpu", None)[0] == "unknown_gpu"
    assert hardware_of("Mystery 9000", "cuda", None)[0] == "unknown_gpu"
    name, why = hardware_of("Mystery 9000", "gpu", None)
    assert name == "unknown_gpu" and why.startswith("no conf/hardware entry covers gpu device kind 'Mystery 9000'")


def test_a_sweep_of_two_runs_and_two_device_kinds_is_written_whole(tmp_path):
    points = [
        imported_point(S_bytes=1024.0),
        imported_point(S_bytes=2048.0, device_kind="TPU v6 lite"),  # a TPU's name in a GPU tool's file
        imported_point(S_bytes=1024.0, op="all_to_all", origin={"file": "f.txt", "run": 1, "line": 40}),
    ]
    out = tmp_path / "imp"
    out.mkdir()  # an empty folder is taken
    assert write_sweep(points, out, "cmd") == out
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "000_op.size_bytes=1024,op=all_reduce,run=0",
        "001_op.size_bytes=2048,op=all_reduce,run=0",
        "002_op.size_bytes=1024,op=all_to_all,run=1",
        "sweep.json",
    ]
    sweep = json.loads((out / "sweep.json").read_text())
    assert (sweep["format"], sweep["command"], sweep["rounds"]) == ("shardlab.sweep", "cmd", 1)
    assert sweep["expected_points"] == [
        {"num": 0, "overrides": ["op=all_reduce", "op.size_bytes=1024", "run=0"]},
        {"num": 1, "overrides": ["op=all_reduce", "op.size_bytes=2048", "run=0"]},
        {"num": 2, "overrides": ["op=all_to_all", "op.size_bytes=1024", "run=1"]},
    ]
    assert isinstance(sweep["started_at"], str) and sweep["started_at"][:2] == "20"
    results = [json.loads((out / n / "result.json").read_text()) for n in names[:3]]
    assert [r["spec"]["hardware"] for r in results] == ["h100", "unknown_gpu", "h100"]
    assert [r["imported"]["command"] for r in results] == ["cmd"] * 3
    assert out.stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["imp"]  # no temporary folder left beside it
    # one run: no run number in the overrides; --hardware names every point's entry
    one = write_sweep(points[:2], tmp_path / "one", "c", hardware="h200")
    assert sorted(p.name for p in one.iterdir())[:2] == [
        "000_op.size_bytes=1024,op=all_reduce",
        "001_op.size_bytes=2048,op=all_reduce",
    ]
    results = [json.loads(p.read_text()) for p in sorted(one.glob("*/result.json"))]
    assert [(r["spec"]["hardware"], r["imported"]["hardware_resolved"]) for r in results] == [
        ("h200", "--hardware h200")
    ] * 2


def test_a_used_folder_is_refused_and_a_write_that_fails_leaves_nothing(tmp_path, monkeypatch):
    used = tmp_path / "used"
    used.mkdir()
    (used / "x").write_text("")
    with pytest.raises(FileExistsError, match=r"^--out .*used: exists and is not an empty folder; pick a new one$"):
        write_sweep([imported_point()], used, "c")
    (tmp_path / "file").write_text("")
    with pytest.raises(FileExistsError, match="file: exists and is not an empty folder"):
        write_sweep([imported_point()], tmp_path / "file", "c")
    calls = []

    def fail_second(path, data):
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full")
        real(path, data)

    real = sweep_writer.write_json_atomic
    monkeypatch.setattr(sweep_writer, "write_json_atomic", fail_second)
    with pytest.raises(OSError, match="disk full"):
        write_sweep([imported_point(), imported_point(S_bytes=2048.0)], tmp_path / "new" / "deeper" / "s", "c")
    # the folder was built beside its place (one rename away), named after it, and removed
    built = calls[0].parent.parent
    assert built.parent == tmp_path / "new" / "deeper" and built.name.startswith(".s.")
    assert len(calls) == 2 and list((tmp_path / "new" / "deeper").iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "new", "used"] and list(used.iterdir()) == [
        used / "x"
    ]
