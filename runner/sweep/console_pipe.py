"""A sweep whose console is piped into a reader that leaves early (``shardlab ... | head -1``)
goes on measuring, and says nothing more on the console: its points, log files and report
are written as ever. Without this, every later console line was a ``BrokenPipeError``
traceback from logging (14 of them for a 17-point sweep) and Python's last flush at exit
another."""

from __future__ import annotations

import os


class PipeSafe:
    """``sys.stdout`` that, once its reader has gone, points its file at ``/dev/null``."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_gone()

    def _reader_gone(self) -> None:
        # what the console would still say goes nowhere; the buffered rest is dropped with it
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)
        try:
            self._stream.flush()
        except OSError:
            pass

    def __getattr__(self, name):
        return getattr(self._stream, name)
