"""Every command shardlab prints pastes back: a sweep folder with spaces, unicode, commas,
quotes, ``$(...)`` or ``${...}`` in its path comes back to the shell and to Hydra as exactly
that path, and nothing in it runs."""

from __future__ import annotations

import shlex
import subprocess

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from runner.sweep.command import analysis_command, hydra_quote, resume_command

HOSTILE = [
    "outputs/plain",
    "my sweeps/a b",
    "ü/ñ 雪",
    "x,y",
    "it's",
    'say "hi"',
    "$(touch PWNED)",
    "`touch PWNED`",
    "${oops}",
    "a\\b",
    "end\\",
    "back\\'quote",
    "\\${x}",
    "[1,2]",
    "{a: 1}",
    "semi;colon & amp | pipe",
    "new\nline",
]


def _hydra_value(override: str) -> str:
    """What ``python -m runner`` ends up with for ``key=value``: Hydra's parse, then OmegaConf's
    escapes (``\\${``) resolved as the config would resolve them."""
    value = OverridesParser.create().parse_override(override).value()
    return OmegaConf.create({"v": value}).v


def _pasted(command: str, cwd, head: int = 3) -> list[str]:
    """The arguments bash gives the program when ``command`` is pasted, after its first ``head``
    words (printf in their place)."""
    out = subprocess.run(
        ["bash", "-c", "printf '%s\\0' " + command.split(" ", head)[head]], cwd=cwd, capture_output=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("folder", HOSTILE)
def test_a_hydra_quoted_value_reads_back_as_itself(folder):
    assert _hydra_value(f"hydra.sweep.dir={hydra_quote(folder)}") == folder


@pytest.mark.parametrize("folder", HOSTILE)
def test_the_resume_line_pastes_back_to_the_same_arguments_and_folder(folder, tmp_path):
    argv = ["-m", "+sweep=allgather_sizes", "op.size_bytes=1KiB,2KiB", "hydra.sweep.dir=old", "resume=false"]
    line = resume_command(folder, argv)
    assert line.startswith("python -m runner -m +sweep=allgather_sizes op.size_bytes=1KiB,2KiB ")
    args = _pasted(line, tmp_path)
    assert args[:3] == ["-m", "+sweep=allgather_sizes", "op.size_bytes=1KiB,2KiB"]
    assert args[4] == "resume=true" and len(args) == 5
    assert _hydra_value(args[3]) == folder
    assert not (tmp_path / "PWNED").exists()  # a $(...) in the path ran nothing


@pytest.mark.parametrize("folder", HOSTILE)
def test_the_view_and_report_lines_paste_back_to_the_folder(folder, tmp_path):
    for verb in ("view", "report"):
        line = analysis_command(verb, folder)
        assert line.startswith(f"python -m analysis {verb} ")
        assert _pasted(line, tmp_path, head=4) == [folder]
        assert shlex.split(line)[4:] == [folder]
    assert not (tmp_path / "PWNED").exists()
