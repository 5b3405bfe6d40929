"""Issue 40, the analysis side: bad input to ``python -m analysis`` is refused in one line
(``error: ...`` on stderr, exit 2, no traceback), and Ctrl-C exits 130.

A hardware YAML value out of the runner's range, a malformed hardware YAML, ``--dims`` beyond
any float, the size parser's 1PiB bound, HLO text cut short or with an empty replica group, a
sweep whose every result.json is damaged, and Ctrl-C in ``view``. Each test was seen failing
with its fix taken out.
"""

from __future__ import annotations

import math
import queue
import signal
import threading

import pytest
from hlo_samples import hlo_path
from shardlab_cli import analysis, start

from analysis.book.hardware import Hardware, HardwareError, hardware_dir
from analysis.book.units import format_size, parse_size
from analysis.cli import main
from runner.config.spec_values import _check_hardware, check_size
from runner.errors import ConfigError

COLLECTIVE = ["AllGather_X(A[I_X, J])", "--mesh", "X=4", "--dims", "I=1024,J=1024"]


def run(capsys, *argv) -> tuple[int, str, str]:
    """``python -m analysis *argv`` in this process: (exit status, stdout, stderr)."""
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def refused(capsys, *argv) -> str:
    """The one line ``argv`` is refused with (asserting exit 2, nothing on stdout)."""
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, ""), (code, out, err)
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err.removesuffix("\n")


def v5e_with(tmp_path, line: str):
    """conf/hardware/tpu_v5e.yaml with ``line`` (``key: value``) in place of its own ``key:`` line."""
    key = line.split(":", 1)[0]
    text = (hardware_dir() / "tpu_v5e.yaml").read_text()
    lines = [line if raw.startswith(f"{key}:") else raw for raw in text.splitlines()]
    assert line in lines, f"tpu_v5e.yaml has no {key}: line"
    path = tmp_path / "bad_v5e.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


# ----------------------------------------------------------------- 1. hardware values and YAML


@pytest.mark.parametrize(
    "line, shown, allowed",
    [
        ("link_bw_bidir_Bps: -9.0e10", "'-9.0e10'", "null or a finite number > 0"),  # as written
        ("link_bw_bidir_Bps: .nan", "nan", "null or a finite number > 0"),
        ("link_bw_unidir_Bps: .inf", "inf", "null or a finite number > 0"),
        ("link_bw_unidir_Bps: 0", "0", "null or a finite number > 0"),
        ("hop_latency_s: -1.0e-6", "-1e-06", "null or seconds from 0 to 1"),
        ("hop_latency_s: 2", "2", "null or seconds from 0 to 1"),
        ("memory_bytes: -1", "-1", "null or a finite number > 0"),
        ("domain_size: 0", "0", "null or a whole number from 1 to 65536"),
        ("domain_size: 65537", "65537", "null or a whole number from 1 to 65536"),
        ("domain_size: 2.5", "2.5", "null or a whole number from 1 to 65536"),
        ("link_bw_bidir_Bps: true", None, None),  # YAML's true is no bandwidth (float(True) is 1.0)
    ],
)
def test_a_hardware_value_out_of_range_is_one_line_naming_the_file_the_field_and_the_range(
    tmp_path, capsys, line, shown, allowed
):
    # predict printed "max(7.00 us, -130.49 us)" for a negative W; the runner refuses these values
    path = v5e_with(tmp_path, line)
    key = line.split(":", 1)[0]
    err = refused(capsys, "predict", *COLLECTIVE, "--hardware", path)
    if shown is None:
        assert err == f"error: {path}: {key}=True is not a number"
    else:
        assert err == f"error: {path}: {key}={shown}: must be {allowed}"


def test_a_bad_flops_or_calibrated_value_is_refused_too(tmp_path, capsys):
    path = v5e_with(tmp_path, "flops_per_s: {bfloat16: -1.97e14}")
    err = refused(capsys, "predict", "A[I_X, J] * B[J, K] -> C[I_X, K]", "--mesh", "X=4", "--hardware", path)
    assert err == f"error: {path}: flops_per_s.bfloat16='-1.97e14': must be a finite number > 0"
    cal = "calibrated: [{op: all_gather, n_axes: 1, link_bw_bidir_Bps: -1.0e9, hop_latency_s: 1.0e-6}]"
    path.write_text((hardware_dir() / "tpu_v5e.yaml").read_text() + cal + "\n")
    err = refused(capsys, "predict", *COLLECTIVE, "--hardware", path)
    assert err == (
        f"error: {path}: a calibrated entry is malformed "
        f"({path}: link_bw_bidir_Bps='-1.0e9': must be a finite number > 0)"
    )


def test_report_and_a_subprocess_refuse_a_negative_bandwidth_without_a_traceback(tmp_path):
    path = v5e_with(tmp_path, "link_bw_bidir_Bps: -9.0e10")
    line = f"{path}: link_bw_bidir_Bps='-9.0e10': must be null or a finite number > 0"
    proc = analysis("predict", *COLLECTIVE, "--hardware", path, expect=2)
    assert (proc.stdout, proc.stderr) == ("", f"error: {line}\n")
    sweep = tmp_path / "sweep"
    (sweep / "0_p").mkdir(parents=True)
    (sweep / "0_p" / "result.json").write_text("{}")
    proc = analysis("report", sweep, "--hardware", path, expect=2)
    assert (proc.stdout, proc.stderr) == ("", f"error: --hardware: {line}\n")
    assert not (sweep / "report").exists()


def test_constants_given_as_flags_meet_the_same_rules(capsys):
    err = refused(
        capsys, "predict", *COLLECTIVE, "--hardware", "cpu", "--link-bw-bidir-Bps", "-5", "--hop-latency-s", "1e-5"
    )
    assert err == "error: --link-bw-bidir-Bps=-5.0: must be a finite number > 0"
    err = refused(
        capsys, "predict", *COLLECTIVE, "--hardware", "cpu", "--link-bw-bidir-Bps", "1e9", "--hop-latency-s", "nan"
    )
    assert err == "error: --hop-latency-s=nan: must be seconds from 0 to 1"


def test_an_expected_factor_that_is_infinite_or_negative_is_refused():
    # an infinite bw_share priced every size at 0 s; a negative setup_s went unchecked
    for factor in ({"bw_share": math.inf, "floor_s": 0}, {"bw_share": 0.5, "floor_s": 1e-6, "setup_s": -1e-6}):
        with pytest.raises(HardwareError) as err:
            Hardware.from_dict({"name": "h", "kind": "gpu", "expected": {"inside": {"all_gather": factor}}})
        assert str(err.value) == (
            "hardware 'h': expected.inside.all_gather: shares > 0 and floor_s >= 0 (setup_s too), all finite; "
            f"got {factor!r}"
        )


@pytest.mark.parametrize(
    "key, values",
    [
        ("link_bw_bidir_Bps", [-1.0, 0.0, 1e-300, 1.0, 9e10, 1e300, math.inf, -math.inf, math.nan]),
        ("hbm_bw_Bps", [-1.0, 0.0, 8e11, math.inf, math.nan]),
        ("hop_latency_s", [-1e-9, 0.0, 1e-6, 1.0, 1.0000001, math.inf, math.nan]),
        ("scaleout_latency_s", [-1.0, 0.0, 1e-5, 2.0, math.nan]),
        ("domain_size", [-1, 0, 1, 256, 65536, 65537, 10**30, 0.5, math.nan, math.inf]),
        ("device_count", [0, 1, 65536, 65537]),
    ],
)
def test_the_analysis_refuses_exactly_what_the_runner_refuses(key, values):
    # the runner's rule (runner.config.spec_values) and the reader's agree on both sides of each bound
    for value in values:
        try:
            _check_hardware({key: value})
            runner_ok = True
        except ConfigError:
            runner_ok = False
        try:
            Hardware.from_dict({"name": "h", "kind": "gpu", key: value})
            analysis_ok = True
        except HardwareError:
            analysis_ok = False
        assert runner_ok == analysis_ok, (key, value, runner_ok, analysis_ok)


def test_a_malformed_hardware_yaml_is_one_line_with_its_line(tmp_path, capsys):
    path = tmp_path / "mal.yaml"
    path.write_text("name: mal\nkind: tpu\nhop_latency_s: 1.0e-6\nlink_bw_bidir_Bps: [1, 2\n")
    err = refused(capsys, "predict", *COLLECTIVE, "--hardware", path)
    assert err == (
        f"error: {path}:5: not valid YAML (while parsing a flow sequence expected ',' or ']', but got '<stream end>')"
    )
    path.write_text("name: mal\nkind: tpu\n  link_bw_bidir_Bps: 1\n")  # indented under kind's value
    err = refused(capsys, "predict", *COLLECTIVE, "--hardware", path)
    assert err == f"error: {path}:3: not valid YAML (mapping values are not allowed here)"
    path.write_bytes(b"name: mal\nkind: \xff\n")
    err = refused(capsys, "predict", *COLLECTIVE, "--hardware", path)
    assert err == f"error: {path}: not UTF-8 text (invalid start byte at byte 16)"
    proc = analysis("report", tmp_path, "--hardware", path, expect=2)  # a folder without points: first things first
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


# ----------------------------------------------------------------- 2. --dims beyond any float


def test_dims_too_large_are_one_line(capsys):
    huge = str(2**2000)  # a traceback: "int too large to convert to float"
    err = refused(
        capsys, "predict", "AllGather_X(A[I_X, J])", "--hardware", "tpu_v5e", "--mesh", "X=4", "--dims", f"I={huge},J=8"
    )
    assert err == f"error: --dims entry 'I={huge[:35]}...': must be a whole number from 1 to {2**40}"  # cut to 40
    # both sides of the bound (the runner's op.dims bound, 2**40)
    code, _, _ = run(
        capsys,
        "predict",
        "AllGather_X(A[I_X, J])",
        "--hardware",
        "tpu_v5e",
        "--mesh",
        "X=4",
        "--dims",
        f"I={2**40},J=8",
    )
    assert code == 0
    err = refused(
        capsys,
        "predict",
        "AllGather_X(A[I_X, J])",
        "--hardware",
        "tpu_v5e",
        "--mesh",
        "X=4",
        "--dims",
        f"I={2**40 + 1},J=8",
    )
    assert err == f"error: --dims entry 'I={2**40 + 1}': must be a whole number from 1 to 1099511627776"
    # each dim in range, 30 of them together past a float's range
    dims = ",".join(f"D{i}={2**40}" for i in range(30))
    array = "A[D0_X, " + ", ".join(f"D{i}" for i in range(1, 30)) + "]"
    err = refused(capsys, "predict", f"AllGather_X({array})", "--hardware", "tpu_v5e", "--mesh", "X=4", "--dims", dims)
    assert err == "error: --dims: the arrays' sizes multiply past a float's range (about 1e308); use smaller dims"
    err = refused(
        capsys,
        "predict",
        "AllGather_X(A[I_X, J])",
        "--hardware",
        "tpu_v5e",
        "--mesh",
        "X=65536,Y=2",
        "--dims",
        "I=8,J=8",
    )
    assert err == "error: --mesh X=65536,Y=2: 131072 devices, at most 65536"


def test_huge_dims_in_a_subprocess_leave_no_traceback():
    proc = analysis(
        "predict",
        "AllGather_X(A[I_X, J])",
        "--hardware",
        "tpu_v5e",
        "--mesh",
        "X=4",
        "--dims",
        f"I={2**2000},J=8",
        expect=2,
    )
    assert proc.stdout == "" and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


# ----------------------------------------------------------------- 3. the 1PiB bound


def test_the_size_bound_and_its_message_agree_on_both_sides():
    # "must be at most 1PiB" refused "1PiB" itself: the parser knew no P
    assert check_size("1PiB", "op.size_bytes") == 2**50 == parse_size("1PiB") == parse_size("1p")
    assert check_size(2**50, "op.size_bytes") == 2**50
    for over in (2**50 + 1, "1025TiB", "2PiB"):
        with pytest.raises(ConfigError) as err:
            check_size(over, "op.size_bytes")
        assert str(err.value) == f"op.size_bytes={over!r}: must be at most 1PiB (1125899906842624 bytes)"
    # exact arithmetic: through a float this rounded to 1PiB and passed
    with pytest.raises(ConfigError) as err:
        check_size("1.00000000000000001PiB", "op.size_bytes")
    assert str(err.value) == "op.size_bytes='1.00000000000000001PiB' is not a whole number of bytes"
    assert (parse_size("1PB"), format_size(2**50), format_size(10**15)) == (10**15, "1PiB", "1PB")


# ----------------------------------------------------------------- 4. HLO cut short, empty groups


def test_hlo_cut_short_anywhere_is_refused_and_the_whole_module_is_not(tmp_path, capsys):
    # the cut text listed "0 collectives" with exit 0, as if the program had none
    whole = hlo_path("cpu_all_gather").read_text()
    code, out, err = run(capsys, "hlo", hlo_path("cpu_all_gather"))
    assert (code, out.splitlines()[0], err) == (0, f"{hlo_path('cpu_all_gather')}: 1 collective", "")
    cut = tmp_path / "cut.hlo"
    end = whole.rindex("}")  # the entry computation's closing brace
    for at in sorted({*range(40, end, 37), whole.index("ENTRY"), end}):
        cut.write_text(whole[:at])
        err = refused(capsys, "hlo", cut)
        assert err in (
            f"error: {cut}: module jit__lambda has no ENTRY computation: cut short, or not a whole module",
            f"error: {cut}: module jit__lambda ends inside computation main.0_spmd: cut short",
        ), (at, err)
    cut.write_text(whole[: end + 1])
    assert run(capsys, "hlo", cut)[0] == 0


def test_a_whole_module_without_collectives_says_0_with_exit_0(tmp_path, capsys):
    f = tmp_path / "none.hlo"
    f.write_text(
        "HloModule m, num_partitions=4\n\nENTRY e {\n  p = f32[8]{0} parameter(0)\n  ROOT c = f32[8]{0} add(p, p)\n}\n"
    )
    assert run(capsys, "hlo", f) == (0, f"{f}: 0 collectives\n", "")


def test_an_empty_replica_group_is_refused_as_xla_refuses_it(tmp_path, capsys):
    # XLA's HLO verifier: "Instruction cannot have an empty replica group"; {} is all devices
    text = (
        "HloModule m, num_partitions=4\n\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT s = f32[] add(a, b)\n}\n\nENTRY e {\n  p = f32[8]{0} parameter(0)\n"
        "  ROOT c = f32[8]{0} all-reduce(p), replica_groups=GROUPS, to_apply=add\n}\n"
    )
    f = tmp_path / "groups.hlo"
    for groups in ("{{}}", "{{0,1},{}}"):
        f.write_text(text.replace("GROUPS", groups))
        err = refused(capsys, "hlo", f)
        assert err == f"error: {f}: bad replica_groups: {groups!r} has an empty group, which XLA refuses"
    f.write_text(text.replace("GROUPS", "{}"))
    code, out, _ = run(capsys, "hlo", f, "--json")
    assert code == 0 and '"group_size": 4' in out and '"num_groups": 1' in out


# ----------------------------------------------------------------- 5. a sweep of damaged files


def test_a_report_of_points_that_are_all_unreadable_exits_2(tmp_path):
    for i, text in enumerate(["{not json", "[1, 2]"]):
        (tmp_path / f"{i}_op.size_bytes={i + 1}KiB").mkdir()
        (tmp_path / f"{i}_op.size_bytes={i + 1}KiB" / "result.json").write_text(text)
    proc = analysis("report", tmp_path, expect=2)
    first = tmp_path / "0_op.size_bytes=1KiB" / "result.json"
    assert proc.stdout == ""
    assert proc.stderr == (
        f"error: {tmp_path}: none of its 2 points can be read "
        f"({first}: Expecting property name enclosed in double quotes: line 1 column 2 (char 1); ...)\n"
    )
    assert not (tmp_path / "report").exists()


# ----------------------------------------------------------------- 6. Ctrl-C in view


def test_ctrl_c_in_view_exits_130(tmp_path):
    from analysis.cli.view import missing_xprof

    if missing_xprof():
        pytest.skip("XProf is not installed")
    (tmp_path / "run" / "trace").mkdir(parents=True)  # a folder with traces to serve (none inside)
    (tmp_path / "run" / "result.json").write_text("{}")
    (tmp_path / "tmp").mkdir()
    proc = start("analysis", "view", tmp_path / "run", env={"TMPDIR": str(tmp_path / "tmp")})
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    try:
        assert "XProf serving" in lines.get(timeout=180)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130  # it exited 0, as if it had served and finished
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    err = proc.stderr.read()
    assert err.endswith("\ninterrupted\n") and "Traceback" not in err, err
    assert list((tmp_path / "tmp").iterdir()) == [], "the temporary logdir is removed"


def test_report_of_a_folder_with_no_points_is_one_line(tmp_path):
    # said before any point is read (the unreadable-points check has nothing to say of it)
    from shardlab_cli import analysis

    proc = analysis("report", tmp_path, expect=2)
    assert proc.stderr.strip().splitlines() == [f"error: {tmp_path} holds no run folders (no */result.json)"]
