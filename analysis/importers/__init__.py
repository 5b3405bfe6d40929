"""Measurements shardlab did not take, read into sweep folders: nccl-tests / rccl-tests output
(:mod:`analysis.importers.nccl_tests`) and Google's accelerator-microbenchmarks results
(:mod:`analysis.importers.accelerator_microbenchmarks`), written by
:mod:`analysis.importers.sweep_writer` as run folders that ``load_sweep``, ``report``,
``compare``, ``calibrate`` and the gate read unchanged.

May import: :mod:`analysis.book` and :mod:`analysis.runs.rundir` (never :mod:`runner`).
"""

from __future__ import annotations


class ImportFormatError(ValueError):
    """A file that is not the tool's output, or a table cut short; the message names the file
    and the line."""

    def __init__(self, path, line: int | None, why: str):
        self.path, self.line = str(path), line
        super().__init__(f"{path}:{line}: {why}" if line else f"{path}: {why}")
