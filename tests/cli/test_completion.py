"""Tab completion of ``shardlab-analysis`` (analysis/cli/__init__.py), through argcomplete's real
protocol as the shell function of ``register-python-argcomplete`` drives it: the command runs
with ``_ARGCOMPLETE``, ``COMP_LINE`` and ``COMP_POINT`` set and writes the completions to file
descriptor 8, separated by ``_ARGCOMPLETE_IFS``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("argcomplete")

REPO = Path(__file__).resolve().parents[2]


def complete(line: str, words_before: int = 1) -> set[str]:
    """The completions offered at the end of ``line``; ``words_before``: argcomplete's count of
    the words before the arguments (1: ``shardlab-analysis``, 3: ``python -m analysis``)."""
    env = dict(
        os.environ,
        _ARGCOMPLETE=str(words_before),
        _ARGCOMPLETE_IFS="\n",
        COMP_LINE=line,
        COMP_POINT=str(len(line)),
    )
    # as the shell function does: fd 8 is where the answer goes, the program's own stdout is dropped
    r = subprocess.run(
        ["bash", "-c", 'exec "$@" 8>&1 1>/dev/null', "_", sys.executable, "-m", "analysis"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return set(r.stdout.split("\n")) - {""}


def test_a_command_completes_from_its_first_letters():
    assert complete("shardlab-analysis pr") == {"predict", "profile"}
    # a single completion carries the space after it, so the shell moves on to the next word
    assert complete("python -m analysis hl", words_before=3) == {"hlo "}


def test_a_commands_own_flags_complete():
    assert complete("shardlab-analysis predict --d") == {"--dims", "--dtype"}
    assert complete("shardlab-analysis report --h") == {"--hardware", "--help"}
    assert complete("shardlab-analysis compare --o") == {"--out "}


def test_without_argcomplete_the_command_runs_as_usual(monkeypatch, capsys):
    from analysis.cli import main

    monkeypatch.setenv("_ARGCOMPLETE", "1")
    monkeypatch.setenv("COMP_LINE", "shardlab-analysis pr")
    monkeypatch.setenv("COMP_POINT", "20")
    monkeypatch.setitem(sys.modules, "argcomplete", None)  # `import argcomplete` raises ImportError
    with pytest.raises(SystemExit) as exit_:
        main(["nosuch"])
    assert exit_.value.code == 2
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err
