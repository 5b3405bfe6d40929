"""Hydra's composition errors are one line naming the key and what is allowed, exit 2 (they were
5-20 lines: the OmegaConf node, options one per line, the search path, a HYDRA_FULL_ERROR hint)."""

from __future__ import annotations

import pytest
from shardlab_cli import runner

from runner.sweep.held_stderr import one_line

CHOICE = """In 'config': Could not find 'mesh/nope'

Available options in 'mesh':
\tauto
\tx8
\txy_4x2
Config search path:
\tprovider=hydra, path=pkg://hydra.conf
\tprovider=main, path=file:///work/main/conf

Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.
"""
KEY = """Could not override 'op.bad'.
To append to your config use +op.bad=1
Key 'bad' not in 'OpConf'
    full_key: op.bad
    reference_type=OpConf
    object_type=OpConf

Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.
"""


def test_one_line_keeps_the_message_and_the_options_and_drops_the_rest():
    assert one_line(CHOICE) == "In 'config': Could not find 'mesh/nope'; Available options in 'mesh': auto, x8, xy_4x2"
    assert (
        one_line(KEY)
        == "Could not override 'op.bad'; To append to your config use +op.bad=1; Key 'bad' not in 'OpConf'"
    )
    assert one_line("") == "Hydra could not compose the config"
    # options that end the text join the last sentence, however many came before
    assert one_line("Error in 'a'\nsecond sentence\nAvailable options in 'op':\n\tx\n\ty\n") == (
        "Error in 'a'; second sentence; Available options in 'op': x, y"
    )
    # a sentence after the search path is kept, the path's entries are not
    assert one_line("Could not find 'op/x'\nConfig search path:\n\tprovider=main\nwhile composing the defaults\n") == (
        "Could not find 'op/x'; while composing the defaults"
    )


@pytest.mark.parametrize(
    "override, says",
    [
        ("op.bad=1", "Could not override 'op.bad'; To append to your config use +op.bad=1; Key 'bad' not in 'OpConf'"),
        (
            "mesh=nope",
            "In 'config': Could not find 'mesh/nope'; Available options in 'mesh': auto, x8, xy_4x2, xyz_2x2x2",
        ),
        (
            "timing.rounds=x",
            "Error merging override timing.rounds=x; Value 'x' of type 'str' could not be converted to Integer",
        ),
        ("hydra.sweep.dir", "Error parsing override 'hydra.sweep.dir'; missing EQUAL at '<EOF>'"),
    ],
)
def test_a_config_hydra_cannot_compose_is_one_line_and_exit_2(override, says):
    proc = runner(override, expect=2)
    assert proc.stderr.splitlines() == [f"error: {says}"]
    assert proc.stdout == ""
