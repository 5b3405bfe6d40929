"""``shardlab [overrides]`` or ``python -m runner [overrides]``: Hydra turns the config into one
``run(cfg)`` call (:mod:`runner.sweep.app`).

Kept this small on purpose: a worker process (spawned) imports this module again as its
``__mp_main__``, and a Ctrl-C that lands while Hydra and the config load is answered here
with two lines, not a traceback.
"""

from __future__ import annotations

import signal
import sys
import threading


def _ignore_sigint() -> None:
    """Ignore Ctrl-C from now on. ``signal.signal`` first runs the handlers of signals already
    received (CPython checks pending signals before it changes a handler), so a second Ctrl-C
    that came in meanwhile raises KeyboardInterrupt from the call itself: take it and try again."""
    while True:
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            return
        except KeyboardInterrupt:
            continue


def _clear_unhandled_interrupt_mark() -> None:
    """Let ``python -m runner`` end with the status it raises. CPython marks a KeyboardInterrupt that
    ends code run from a string (dataclasses and namedtuple build their methods so, and Hydra's
    imports make many) as unhandled even when it is caught, and under ``-m`` the process then kills
    itself with SIGINT at exit (status -2) whatever it raised. Running string code resets the
    mark."""
    exec("", {})


def _interrupts_not_dropped(previous):
    """An unraisable-exception hook that hands a KeyboardInterrupt back to the main thread.
    A Ctrl-C that lands in a weakref callback or a ``__del__`` (importlib runs one as it
    releases a module lock, so a Ctrl-C while Hydra loads can land there) cannot propagate:
    Python prints "Exception ignored in ..." and drops it, and the sweep would go on. It is
    sent again to the main thread 10 ms later, from a timer thread: sent from the hook itself,
    it would raise inside the hook and be dropped the same way. A real signal, so that it also
    wakes a blocking wait, and is ignored as any Ctrl-C once the answer has begun."""

    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            again = threading.Timer(0.01, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
            again.daemon = True
            again.start()
        else:
            previous(unraisable)

    return hook


def main() -> None:
    """The ``shardlab`` command and ``python -m runner``."""
    sys.unraisablehook = _interrupts_not_dropped(sys.unraisablehook)
    try:
        from runner.sweep.app import start

        start()
    except KeyboardInterrupt:
        # Ctrl-C outside a point: while Python loads Hydra, Hydra composes the config or the
        # sweep is set up (a point's own Ctrl-C is handled in runner.sweep.app and
        # runner.sweep.callbacks). A second Ctrl-C must not cut these lines short.
        _ignore_sigint()
        from runner.sweep.pool import discard_worker

        discard_worker()
        print("\ninterrupted before any point ran: nothing was measured or written", file=sys.stderr)
        print("run the same command again to start", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        _clear_unhandled_interrupt_mark()  # the status raised here, or in the app, is the exit status


if __name__ == "__main__":
    main()
