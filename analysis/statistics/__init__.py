"""Statistics of measured times: summary statistics and intervals of timing samples
(:mod:`.stats`, which the runner's stopping rule shares), bootstrap replicates of a sweep's
medians (:mod:`.resample`), and the fits of ``T = alpha + V/beta`` and the book's
``max(T_min * hops, c * V / W)`` with their intervals (:mod:`.fit`). DataFrames and arrays
in and out; nothing here reads a folder or writes a file.

May import: :mod:`analysis.runs.record` (a result's samples), numpy, scipy, pandas.
"""
