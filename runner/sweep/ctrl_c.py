"""Ctrl-C while the sweep process starts (Python loads Hydra, Hydra composes the config), before
the sweep's callbacks take Ctrl-C over (:class:`runner.sweep.callbacks.Interrupt`). A Ctrl-C
there raises KeyboardInterrupt wherever the interpreter is, and CPython and the libraries
mishandle it in places; each function here undoes one of those, so that every Ctrl-C of the
start ends in the same two lines and exit 130 (:func:`runner.__main__.main`).

Light on purpose: it is imported before Hydra is.
"""

from __future__ import annotations

import signal
import threading

received = False  # a Ctrl-C came during the start (set by :func:`_raise_noted`)


def _raise_noted(signum, frame) -> None:
    global received
    received = True
    raise KeyboardInterrupt


def note_ctrl_c() -> None:
    """Raise KeyboardInterrupt on Ctrl-C as Python does, and note that it came: a library may turn
    it into another error (OmegaConf restoring its flags in a ``finally`` after the interrupt
    raised "'NoneType' object has no attribute '_invalidate_flags_cache'", which Hydra then
    reported as a bad config), and an error that follows a Ctrl-C is the Ctrl-C's doing. Where
    Ctrl-C is ignored (a background job), it stays ignored."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _raise_noted)


def ignore_ctrl_c() -> None:
    """Ignore Ctrl-C from now on. ``signal.signal`` first runs the handlers of signals already
    received (CPython checks pending signals before it changes a handler), so a second Ctrl-C
    that came in meanwhile raises KeyboardInterrupt from the call itself: take it and try again."""
    while True:
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            return
        except KeyboardInterrupt:
            continue


def clear_unhandled_mark() -> None:
    """Let ``python -m runner`` end with the status it raises. CPython marks a KeyboardInterrupt that
    ends code run from a string (dataclasses and namedtuple build their methods so, and Hydra's
    imports make many) as unhandled even when it is caught, and under ``-m`` the process then kills
    itself with SIGINT at exit (status -2) whatever it raised. Running string code resets the
    mark."""
    exec("", {})


def interrupts_not_dropped(previous):
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
