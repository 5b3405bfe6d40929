"""The tests' way of running shardlab in a process of its own (tests/helpers/shardlab_cli.py): what the
child sees of the environment, and what a test is told when the exit code is not the one it
expected."""

from __future__ import annotations

import os
import sys

import pytest
from shardlab_cli import REPO_ROOT, analysis, command, start

# Prints the variables a spawned shardlab must see, from the child's own environment.
PRINT_ENV = "import os; print(os.environ.get('SHARDLAB_WORKER_LOG_DIR'), os.environ.get('SHARDLAB_TEST_EXTRA'))"


def test_an_added_variable_joins_the_session_environment_never_replaces_it(monkeypatch):
    # start() runs ``python -m <package>``; here the package is swapped for ``-c`` so the child
    # can print what it was given (shardlab itself prints no environment)
    monkeypatch.setattr("shardlab_cli.command", lambda package, *args: [sys.executable, "-c", PRINT_ENV])
    proc = start("runner", env={"SHARDLAB_TEST_EXTRA": "1"})
    out, _ = proc.communicate(timeout=60)
    assert out.split() == [os.environ["SHARDLAB_WORKER_LOG_DIR"], "1"]
    proc = start("runner")
    out, _ = proc.communicate(timeout=60)
    assert out.split() == [os.environ["SHARDLAB_WORKER_LOG_DIR"], "None"]


def test_the_command_is_python_dash_m_the_package_with_every_argument_a_string(tmp_path):
    assert command("analysis", "hlo", tmp_path, 3) == [sys.executable, "-m", "analysis", "hlo", str(tmp_path), "3"]
    with pytest.raises(ValueError, match=r"^package='shardlab': must be one of runner, analysis$"):
        command("shardlab")


def test_an_unexpected_exit_code_fails_with_the_end_of_what_it_printed(tmp_path):
    missing = tmp_path / "missing.hlo"
    with pytest.raises(AssertionError) as err:
        analysis("hlo", missing, timeout=120, expect=0)
    head, said = str(err.value).split("\n", 1)
    assert head == "exit 2, not 0:" and said.startswith("error: ") and str(missing) in said
    proc = analysis("hlo", missing, cwd=REPO_ROOT, timeout=120, expect=2)
    assert proc.returncode == 2 and proc.stdout == ""
