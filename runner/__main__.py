"""``shardlab [overrides]`` or ``python -m runner [overrides]``: Hydra turns the config into one
``run(cfg)`` call (:mod:`runner.sweep.app`).

Kept this small on purpose: a worker process (spawned) imports this module again as its
``__mp_main__``, and a Ctrl-C that lands while Hydra and the config load is answered here
with two lines, not a traceback (:mod:`runner.sweep.ctrl_c`).
"""

from __future__ import annotations

import sys

from runner.sweep import ctrl_c
from runner.sweep.console_pipe import PipeSafe


def main() -> None:
    """The ``shardlab`` command and ``python -m runner``."""
    ctrl_c.note_ctrl_c()
    sys.stdout = PipeSafe(sys.stdout)  # `shardlab ... | head -1`: the sweep goes on, quietly
    sys.unraisablehook = ctrl_c.interrupts_not_dropped(sys.unraisablehook)
    try:
        from runner.sweep.app import start

        start()
    except (KeyboardInterrupt, Exception) as exc:
        # Ctrl-C outside a point: while Python loads Hydra, Hydra composes the config or the
        # sweep is set up (a point's own Ctrl-C is handled in runner.sweep.app and
        # runner.sweep.callbacks); an error after a Ctrl-C is its doing. A second Ctrl-C must
        # not cut these lines short.
        if not (isinstance(exc, KeyboardInterrupt) or ctrl_c.received):
            raise
        ctrl_c.ignore_ctrl_c()
        from runner.sweep.pool import discard_worker

        discard_worker()
        print("\ninterrupted before any point ran: nothing was measured or written", file=sys.stderr)
        print("run the same command again to start", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        ctrl_c.clear_unhandled_mark()  # the status raised here, or in the app, is the exit status


if __name__ == "__main__":
    main()
