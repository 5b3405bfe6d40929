"""Run and sweep folders read from disk: the folder's layout and its reader (:mod:`.rundir`),
what ``result.json`` holds (:mod:`.record`, the record between runner and analysis), which
folder is which point of a sweep (:mod:`.sweep_match`, :mod:`.sweep_id`), a point's HLO and
trace facts read once (:mod:`.point_table`), the tidy table of a sweep that becomes
``summary.csv`` (:mod:`.summary`, with :mod:`.point_flags`), and the traces of points run by
several processes merged (:mod:`.processes`). The statistics, the model and every analyzer
stand above it; :func:`analysis.sweep.load_sweep` puts them together.

May import: :mod:`analysis.book`, :mod:`analysis.hlo`, :mod:`analysis.trace` (never :mod:`runner`).
"""
