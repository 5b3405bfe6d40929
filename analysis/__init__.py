"""shardlab.analysis: reads run folders from disk and turns traces, HLO and timings into
tables, fits, the scaling book's predictions, figures and reports.

It never imports :mod:`runner`, so it works on folders produced on another machine.
"""
