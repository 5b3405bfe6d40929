"""Hydra's own errors in one line.

Hydra reports a config it cannot compose (an unknown key, a choice that is not there, a value
of the wrong type, an override it cannot parse) in five to twenty lines: the message, the
OmegaConf node it failed on, the list of options one per line, the config search path and a
hint about ``HYDRA_FULL_ERROR``. shardlab promises one line per bad value, naming the key and
what is allowed. So while Hydra composes, what it writes to stderr is held; if composing
fails, :func:`one_line` folds it into one line; once the config is composed (the first
callback or the task runs) it is let through unchanged, and everything after passes straight
to the terminal. An override of a key that was renamed (``timing.source=loop``) is refused
with the one line that names the new key (:data:`runner.config.schema.RENAMED`).
"""

from __future__ import annotations

import io
import re
import sys

from runner.config.schema import RENAMED, renamed

_NOISE = (
    re.compile(r"^Set the environment variable HYDRA_FULL_ERROR"),
    re.compile(r"^\s*(full_key|reference_type|object_type)[:=]"),
    re.compile(r"^See https://hydra\.cc/"),
)
# Hydra's words for an override of a key the config does not have, and the value it was given
_NOT_THERE = re.compile(r"^Could not override '([\w.]+)'", re.M)
_APPEND = re.compile(r"^To append to your config use \+[\w.]+=(.*)$", re.M)


class HeldStderr(io.TextIOBase):
    """A stand-in for ``sys.stderr`` that keeps what is written until :meth:`release`, then
    writes it (and everything later) to the real stream. Logging handlers created meanwhile
    keep this object, so it must pass through for the rest of the process."""

    def __init__(self, real):
        self.real = real
        self.held: list[str] | None = []

    def write(self, s: str) -> int:
        if self.held is None:
            return self.real.write(s)
        self.held.append(s)
        return len(s)

    def flush(self) -> None:
        if self.held is None:
            self.real.flush()

    def fileno(self) -> int:
        return self.real.fileno()

    def isatty(self) -> bool:
        return self.real.isatty()

    @property
    def buffer(self):
        """The real stream's bytes (what writes there is not held)."""
        return self.real.buffer

    def text(self) -> str:
        """What was held (empty once released)."""
        return "".join(self.held or [])

    def release(self) -> None:
        """Write what was held, and pass everything through from now on."""
        if self.held is not None:
            held, self.held = self.text(), None
            self.real.write(held)
            self.real.flush()


def release() -> None:
    """Let stderr through (the config is composed) and put the real stream back as
    ``sys.stderr``; a no-op when it is not held. (Handlers that took the stand-in meanwhile
    keep writing through it.)"""
    if isinstance(sys.stderr, HeldStderr):
        held = sys.stderr
        held.release()
        sys.stderr = held.real


def one_line(text: str) -> str:
    """Hydra's multi-line composition error as one line: its sentences joined by '; ', a list
    of options as 'a, b, c', without the search path and the HYDRA_FULL_ERROR hint; for a key
    that was renamed, the line naming its new key."""
    key, value = _NOT_THERE.search(text), _APPEND.search(text)
    if key and key.group(1) in RENAMED:
        return renamed(key.group(1), value.group(1).strip() if value else "...")
    parts: list[str] = []
    options: list[str] = []
    skipping_search_path = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or any(p.search(line) for p in _NOISE):
            continue
        if line.startswith("Config search path"):
            skipping_search_path = True
            continue
        if raw.startswith("\t"):
            if not skipping_search_path:
                options.append(line.strip())
            continue
        skipping_search_path = False
        if options:
            parts[-1] += " " + ", ".join(options)
            options = []
        parts.append(line.strip())
    if options and parts:
        parts[-1] += " " + ", ".join(options)
    return "; ".join(p.rstrip(".") for p in parts) if parts else "Hydra could not compose the config"
