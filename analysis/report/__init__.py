"""Reports: the only code that renders and writes report files.

:func:`write_report` writes a sweep's ``summary.csv``, ``fit.json`` and ``report/``;
:func:`write_compare_report` writes a comparison of sweeps. :mod:`.document` renders blocks
to Markdown and HTML, :mod:`.figures` and :mod:`.compare_figures` only draw, and each
``*_section`` module (and :mod:`.sweep_sections`, the sweep report's own) lays out one analyzer's tables.

May import: the rest of :mod:`analysis` (never :mod:`runner`), pandas, matplotlib, seaborn.
"""

from __future__ import annotations

import time


def write_report(root, hardware=None, allow_mixed=False, t0=None):
    """See :func:`analysis.report.sweep_report.write_report` (imported on first use: the
    runner calls this at the end of a sweep, and matplotlib is slow to import; the report's
    ``build_s.txt`` counts that import, or from ``t0``, a ``time.perf_counter()``, on)."""
    t0 = time.perf_counter() if t0 is None else t0
    from analysis.report.sweep_report import write_report as _write

    return _write(root, hardware, allow_mixed, t0=t0)


def write_compare_report(dirs, out, allow_mixed=False):
    """See :func:`analysis.report.compare_report.write_compare_report`."""
    from analysis.report.compare_report import write_compare_report as _write

    return _write(dirs, out, allow_mixed)
