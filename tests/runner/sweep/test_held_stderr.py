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


# timing.source was the estimator's key; *source* is now a hardware entry's citation only
RENAMED = "error: timing.source is now timing.estimator (auto, step, loop or device): use timing.estimator="


@pytest.mark.parametrize(
    "args, value",
    [
        (["timing.source=loop"], "loop"),  # Hydra cannot compose it: held_stderr names the new key
        (["+timing.source=device"], "device"),  # Hydra adds it: the run's start refuses it
        (["-m", "timing.source=step,loop"], "step,loop"),  # a sweep list, composed per point
        (["-m", "+timing.source=auto"], "auto"),
    ],
)
def test_the_old_estimator_key_is_refused_with_its_new_name(tmp_path, args, value):
    out = tmp_path / "out"
    proc = runner(*args, f"hydra.run.dir={out}", f"hydra.sweep.dir={out}", expect=2)
    assert proc.stderr.splitlines() == [RENAMED + value]
    assert proc.stdout == "" and not out.exists()  # nothing written, no worker started


def test_a_config_that_sets_the_old_estimator_key_is_refused_before_it_runs(compose_cfg):
    from runner.config.spec import build_spec
    from runner.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        build_spec(compose_cfg(["+timing.source=loop"]))
    assert str(err.value) == RENAMED.removeprefix("error: ") + "loop"
    hydra_says = KEY.replace("op.bad", "timing.source").replace("+timing.source=1", "+timing.source=loop")
    assert one_line(hydra_says) == RENAMED.removeprefix("error: ") + "loop"
