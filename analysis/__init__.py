"""shardlab.analysis: reads run folders from disk and turns traces, HLO and timings into
tables, fits, the scaling book's predictions, figures and reports.

It never imports :mod:`runner`, so it works on folders produced on another machine. Rooms:

* :mod:`analysis.book` - the book's vocabulary and cost model (a leaf: imports nothing else);
* :mod:`analysis.hlo`, :mod:`analysis.trace` - the two raw formats, each behind a small face;
* :mod:`analysis.runs` - run and sweep folders read from disk: the layout, ``result.json``'s
  record, each point's HLO and trace facts, the tidy summary (``summary.csv``);
* :mod:`analysis.statistics` - timing statistics, bootstrap replicates and the fits;
* :mod:`analysis.profiling` - profiled programs: their collectives, op categories, training steps;
* :mod:`analysis.sweep` - a sweep loaded once (:func:`load_sweep`): the summary, fits and model;
* analyzers, DataFrames in and out, never writing files: :mod:`.predictions`, :mod:`.calibrate`,
  :mod:`.headline`, :mod:`.gate`, :mod:`.claims`, :mod:`.compare` (:mod:`.compare_console`),
  :mod:`.matmul_cases`, :mod:`.strategy_crossover`;
* :mod:`analysis.report` - the only code that renders and writes reports;
* :mod:`analysis.cli` - one module per ``python -m analysis`` command.

For notebooks: ``from analysis import load_sweep; s = load_sweep(DIR); s.points``.
"""

from __future__ import annotations


def load_sweep(root, hardware=None, allow_mixed=False):
    """A sweep folder read once: see :func:`analysis.sweep.load_sweep` (imported on first use,
    so ``import analysis`` stays light)."""
    from analysis.sweep import load_sweep as _load

    return _load(root, hardware, allow_mixed)
