"""``python -m analysis hlo FILE``: the table, the JSON, predictions and errors.

Constants used below (conf/hardware/tpu_v5e.yaml): W_bidi = 9e10 B/s, W_unidir = 4.5e10 B/s,
T_min = 1e-6 s; only an axis of 16 wraps around.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hlo_samples import hlo_path
from shardlab_cli import analysis

from analysis.cli import main

GPU_ASYNC = str(hlo_path("gpu_async"))
TPU_MODULE = str(hlo_path("tpu_module"))


def run(capsys, *argv):
    code = main(["hlo", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def table(out: str) -> list[list[str]]:
    """The table's rows (header first), split on runs of two or more spaces."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("name "))
    return [[cell for cell in line.split("  ") if cell.strip()] for line in lines[start:]]


def by_name(out: str) -> dict[str, dict]:
    return {r["name"]: r for r in json.loads(out)["collectives"]}


def test_table_of_a_hand_written_gpu_module(capsys):
    code, out, err = run(capsys, GPU_ASYNC)
    assert code == 0 and err == ""
    assert out.splitlines()[0] == f"{GPU_ASYNC}: 5 collectives"
    rows = table(out)
    assert [c.strip() for c in rows[0]] == [
        "name",
        "kind",
        "dtype",
        "operand_bytes",
        "result_bytes",
        "group_size",
        "num_groups",
        "pairs",
    ]
    # f32[256] gathered over 8 -> f32[2048]; one group of 8.
    assert [c.strip() for c in rows[1]] == ["all-gather-start", "all-gather", "f32", "1,024", "8,192", "8", "1"]
    # The permute has 4 pairs and no groups; the bf16[64,32] all-to-all is 4096 B each side.
    assert [c.strip() for c in rows[3]] == [
        "collective-permute-start",
        "collective-permute",
        "f32",
        "2,048",
        "2,048",
        "4",
    ]
    assert [c.strip() for c in rows[5]] == ["all-to-all-start", "all-to-all", "bf16", "4,096", "4,096", "4", "2"]
    # Columns line up: every row puts result_bytes' last digit under the header's last letter.
    lines = out.splitlines()[1:]
    end = lines[0].index("result_bytes") + len("result_bytes")
    assert all(line[end - 1].isdigit() for line in lines[1:])


def test_json_fields(capsys):
    code, out, _ = run(capsys, GPU_ASYNC, "--json")
    assert code == 0
    found = by_name(out)
    assert list(found) == [
        "all-gather-start",
        "all-reduce-start",
        "collective-permute-start",
        "reduce-scatter-start",
        "all-to-all-start",
    ]
    ar = found["all-reduce-start"]  # [2,4]<=[8]: two groups of 4; f32[1024] = 4096 B
    assert (ar["kind"], ar["group_size"], ar["num_groups"], ar["operand_bytes"], ar["result_bytes"]) == (
        "all-reduce",
        4,
        2,
        4096,
        4096,
    )
    assert ar["replica_groups"] == [[0, 1, 2, 3], [4, 5, 6, 7]] and ar["num_pairs"] is None
    cp = found["collective-permute-start"]
    assert (cp["group_size"], cp["num_groups"], cp["num_pairs"]) == (None, 4, 4)
    assert "model_time_s" not in ar  # only with --hardware


def test_num_devices_sizes_empty_replica_groups(capsys):
    # replica_groups={} and no num_partitions in the header: the group size is unknown until
    # --num-devices says so.
    path = str(hlo_path("sugared_variadic"))
    assert json.loads(run(capsys, path, "--json")[1])["collectives"][0]["group_size"] is None
    rs = json.loads(run(capsys, path, "--json", "--num-devices", "4")[1])["collectives"][0]
    assert (rs["group_size"], rs["num_groups"]) == (4, 1)


def test_prediction_on_a_hand_written_tpu_module(capsys):
    # The all-gather: bf16[512,1024] -> bf16[512,2048], V = result = 2,097,152 B, groups of 2.
    # On v5e an axis of 2 has no wraparound: a line, N-1 = 1 hop.
    # T = max(1 * 1e-6, (N-1) * (V/N) / W_unidir) = max(1 us, 1,048,576 / 4.5e10 = 23.30 us).
    code, out, _ = run(capsys, TPU_MODULE, "--hardware", "tpu_v5e", "--json")
    assert code == 0
    ag = by_name(out)["all-gather"]
    assert ag["V_bytes"] == 2097152 and ag["links"] == "line" and ag["regime"] == "bandwidth"
    assert ag["model_time_s"] == pytest.approx(1048576 / 4.5e10)
    assert "only an axis of 16" in ag["wraparound_reason"]
    code, out, _ = run(capsys, TPU_MODULE, "--hardware", "tpu_v5e", "--topology", "2x2")
    assert "one mesh axis of group_size devices" in out.splitlines()[1] and "topology 2x2" in out
    row = next(r for r in table(out) if r[0].strip() == "all-gather")
    assert [c.strip() for c in row[-4:]] == ["2,097,152", "line", "23.30 us", "bandwidth"]


def test_prediction_on_a_ring_of_16(tmp_path, capsys):
    # One all-gather over 16 devices: bf16[1048576] (2 MiB) -> bf16[16777216], V = 33,554,432 B.
    # On v5e an axis of 16 wraps around: T = max(1e-6 * ceil(16/2), V / W_bidi)
    # = max(8 us, 33554432 / 9e10 = 372.83 us).
    f = tmp_path / "ring.hlo"
    f.write_text(
        "HloModule m, num_partitions=16\n\nENTRY e {\n  p = bf16[1048576]{0} parameter(0)\n"
        "  ROOT ag = bf16[16777216]{0} all-gather(p), replica_groups=[1,16]<=[16], dimensions={0}\n}\n"
    )
    code, out, _ = run(capsys, str(f), "--hardware", "tpu_v5e", "--topology", "16x16", "--json")
    ag = json.loads(out)["collectives"][0]
    assert (ag["links"], ag["regime"]) == ("ring", "bandwidth")
    assert ag["model_time_s"] == pytest.approx(33554432 / 9e10)
    # ids 0..15 sit at chips (0, 0..15) of the 16x16: the whole y axis
    assert ag["wraparound_reason"].startswith("on y (16 of 16) of topology 16x16")


def test_real_cpu_module_with_predictions(cpu_collectives_hlo, tmp_path, capsys):
    # Five modules compiled on a 4x2 CPU mesh, on f32[512] (2048 B in all), in one file.
    f = tmp_path / "compiled.hlo.txt"
    f.write_text("\n".join(cpu_collectives_hlo["texts"].values()))
    code, out, _ = run(capsys, str(f), "--hardware", "tpu_v5e", "--json")
    assert code == 0
    found = {r["kind"]: r for r in json.loads(out)["collectives"]}
    assert set(found) == {"all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute"}
    # all-gather over X: f32[64] -> f32[256] in 2 groups of 4; V = the result, 1024 B. X=4 is a
    # line on v5e: T = max(1e-6 * (4-1), 3 * (1024/4) / 4.5e10 = 17 ns) = 3 us, latency-bound.
    ag = found["all-gather"]
    assert (ag["operand_bytes"], ag["result_bytes"], ag["group_size"], ag["num_groups"]) == (256, 1024, 4, 2)
    assert ag["model_time_s"] == pytest.approx(3e-6) and ag["regime"] == "latency"
    # all-reduce over Y: f32[128] = 512 B, 4 groups of 2; 2 x max(1e-6 * 1, 1 * 256 / 4.5e10) = 2 us.
    ar = found["all-reduce"]
    assert (ar["V_bytes"], ar["group_size"], ar["num_groups"]) == (512, 2, 4)
    assert ar["model_time_s"] == pytest.approx(2e-6)
    # all-to-all over X: each device's f32[256] (1024 B) is 1/4 of the array the group
    # reshards, so V = 4 * 1024 = 4096 B (the book's V, as the runner's all_to_all uses).
    assert found["all-to-all"]["V_bytes"] == 4096
    # ppermute over X: 8 pairs, no formula, so no prediction.
    cp = found["collective-permute"]
    assert (cp["num_pairs"], cp["model_time_s"], cp["regime"]) == (8, None, None)
    code, out, _ = run(capsys, str(f))
    assert code == 0 and len(table(out)) == 1 + 5


@pytest.mark.parametrize(
    "argv, message",
    [
        (["no/such/file.hlo"], "error: cannot read no/such/file.hlo"),
        ([GPU_ASYNC, "--topology", "4x4"], "error: --topology goes with --hardware"),
        ([GPU_ASYNC, "--hardware", "no_such_chip"], "error: unknown hardware"),
        ([GPU_ASYNC, "--hardware", "tpu_v5e", "--topology", "4y4"], "error: topology"),
        ([GPU_ASYNC, "--hardware", "cpu"], "--hop-latency-s"),  # cpu publishes no constants
        ([GPU_ASYNC, "--num-devices", "0"], "num_devices must be a positive int"),
    ],
)
def test_errors_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and message in err


def test_malformed_hlo_exits_2_without_traceback(tmp_path):
    f = tmp_path / "bad.hlo"
    f.write_text(
        "ENTRY e {\n  p = f32[8]{0} parameter(0)\n  ROOT c = f32[8]{0} all-reduce(p), replica_groups={0,1}\n}\n"
    )
    proc = analysis("hlo", f, expect=2)
    assert proc.stderr.startswith(f"error: {f}: bad replica_groups") and "Traceback" not in proc.stderr


def test_cpu_with_given_constants_and_no_heavy_imports(tmp_path):
    # cpu publishes no W or T_min; given them, the host ring formula applies. old_style's
    # all-gather: bf16[8192] over a group of 4 -> bf16[32768], V = 65,536 B;
    # max(1e-5 * ceil(4/2), 65536 / 1e9) = max(20 us, 65.54 us). The command must stay fast:
    # neither pandas nor matplotlib is imported.
    code = (
        "import sys; from analysis.cli import main; "
        f"main(['hlo', {str(hlo_path('old_style'))!r}, '--hardware', 'cpu', '--json', "
        "'--link-bw-bidir-Bps', '1e9', '--hop-latency-s', '1e-5']); "
        "print('pandas' in sys.modules, 'matplotlib' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    *body, imported = proc.stdout.strip().splitlines()
    assert imported == "False False"
    ag = json.loads("\n".join(body))["collectives"][0]
    assert (ag["links"], ag["V_bytes"]) == ("ring", 65536)
    assert ag["model_time_s"] == pytest.approx(65536 / 1e9)
