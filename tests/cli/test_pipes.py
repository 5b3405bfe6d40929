"""``python -m analysis ... | head``: the reader goes away and the command stops quietly, exit
141 as a command killed by SIGPIPE (it printed two BrokenPipeError tracebacks)."""

from __future__ import annotations

import pytest
from shardlab_cli import start


@pytest.mark.parametrize("args", [("hardware",), ("hardware", "--json")])
def test_a_closed_pipe_ends_the_command_without_a_traceback(args):
    proc = start("analysis", *args)
    proc.stdout.close()  # as `head` does once it has what it wants: every write now fails
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141
    assert err == ""
