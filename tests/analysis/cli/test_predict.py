"""``python -m analysis predict``: text, JSON and errors."""

from __future__ import annotations

import json

import pytest
from shardlab_cli import analysis

from analysis.cli import main

Q2 = [
    "AllGather_X([B_X, D_Y])",
    "--hardware",
    "tpu_v4p",
    "--mesh",
    "X=4,Y=4,Z=4",
    "--dims",
    "B=1024,D=4096",
    "--dtype",
    "bfloat16",
    "--topology",
    "4x4x4",
]


def run(capsys, *argv):
    code = main(["predict", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_question2_text(capsys):
    code, out, _ = run(capsys, *Q2)
    assert code == 0
    # V = 2 * 1024 * 1024 B; max(2 us, 2097152 / 9e10 = 23.30 us)
    assert "2,097,152 bytes" in out and "23.30 us" in out and "bandwidth-bound" in out
    assert "ring" in out and "9e+10" in out


def test_question2_json(capsys):
    code, out, _ = run(capsys, *Q2, "--json")
    d = json.loads(out)
    assert code == 0
    assert d["V_bytes"] == 2097152 and d["regime"] == "bandwidth"
    assert d["time_s"] == pytest.approx(2097152 / 9e10)
    assert d["collectives"] == ["AllGather_X([B_X, D_Y])"]


def test_line_shows_the_book_formula_too(capsys):
    # Pop Quiz 2: Y=4 on v5e has no wraparound: 559.24 us, where the ring formula says 372.83 us.
    code, out, _ = run(
        capsys, "AllGather_Y([E_Y, F])", "--hardware", "tpu_v5e", "--mesh", "X=8,Y=4", "--dims", "E=2048,F=8192"
    )
    assert code == 0
    assert "559.24 us" in out and "372.83 us" in out and "no wraparound" in out


def test_matmul_json(capsys):
    code, out, _ = run(
        capsys,
        "A[I, J_X] * B[J_X, K] -> C[I, K]",
        "--hardware",
        "tpu_v5e",
        "--mesh",
        "X=16",
        "--dims",
        "I=1024,J=4096,K=8192",
        "--json",
    )
    d = json.loads(out)
    assert code == 0 and d["case"] == 3
    assert d["collectives"] == ["AllReduce_X(C[I, K]{U_X})"]
    # V = bf16[1024, 8192] = 16 MiB; AllReduce = 2 * V / 9e10 = 372.83 us > T_math = 21.80 us
    assert d["V_bytes"] == 16 * 2**20 and d["regime"] == "bandwidth"
    assert d["time_s"] == pytest.approx(2 * 16 * 2**20 / 9e10)


def test_case4_text_names_the_input_to_gather(capsys):
    code, out, _ = run(
        capsys,
        "A[I_X, J] * B[J, K_X] -> C[I_X, K_X]",
        "--hardware",
        "h100",
        "--mesh",
        "X=8",
        "--dims",
        "I=1024,J=1024,K=8192",
    )
    assert code == 0 and "case 4" in out and "AllGather_X(A[I_X, J])" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["A[I_X, J_X]", "--mesh", "X=4"], "mesh axis X is used twice"),
        (["AllGather_Y(A[I_X, J])", "--mesh", "X=4,Y=2"], "not sharded over Y"),
        (["AllGather_X(A[I_X, J])", "--mesh", "Y=4"], "mesh axis X is not in the mesh"),
        (["AllGather_X(A[I_X, J])", "--mesh", "X=3"], "not divisible"),
        (["AllGather_X(A[I_X, J])", "--mesh", "x=4"], "'x=4'"),
        (["AllGather_X(A[I_X, J])", "--mesh", "X=4", "--dtype", "float7"], "float7"),
    ],
)
def test_invalid_input_exits_2(capsys, argv, message):
    code, out, err = run(capsys, *argv, "--hardware", "tpu_v4p", "--dims", "I=1024,J=1024")
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err


def test_cpu_needs_fitted_constants(capsys):
    argv = ["AllGather_X(A[I_X, J])", "--hardware", "cpu", "--mesh", "X=8", "--dims", "I=1024,J=1024"]
    code, _, err = run(capsys, *argv)
    assert code == 2 and "--hop-latency-s" in err
    code, out, _ = run(capsys, *argv, "--hop-latency-s", "2e-5", "--link-bw-bidir-Bps", "2e9", "--json")
    # V = 2 * 1024 * 1024 B: max(2e-5 * 4, 2097152 / 2e9) = 1.05 ms
    assert code == 0 and json.loads(out)["time_s"] == pytest.approx(2097152 / 2e9)


def test_module_entry_point_without_traceback():
    proc = analysis("predict", "A[I_X, J_X]", "--hardware", "tpu_v4p", "--mesh", "X=4", expect=2)
    assert "mesh axis X is used twice" in proc.stderr and "Traceback" not in proc.stderr


def test_a_float32_matmul_is_priced_at_the_rate_its_precision_runs_at(capsys):
    # H200: float32 at default runs as TF32 on the tensor cores (4.947e14 FLOP/s dense), at
    # highest as float32 arithmetic (6.7e13); 2 * 8192^3 = 1.1e12 FLOPs on one GPU
    argv = ["A[I, J] * B[J, K] -> C[I, K]", "--hardware", "h200", "--mesh", "X=1"]
    argv += ["--dims", "I=8192,J=8192,K=8192", "--dtype", "float32", "--json"]
    times = {}
    for precision in ("default", "high", "highest"):
        code, out, _ = run(capsys, *argv, "--precision", precision)
        assert code == 0
        got = json.loads(out)
        assert got["precision"] == precision
        times[precision] = got["time_s"]
    assert times["default"] == times["high"] == pytest.approx(2 * 8192**3 / 4.947e14)
    assert times["highest"] == pytest.approx(2 * 8192**3 / 6.7e13)
    with pytest.raises(SystemExit) as exit_:  # argparse's own error, before any work
        run(capsys, *argv, "--precision", "tf32")
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--precision" in err and "'highest'" in err
