"""Profiled programs: what the collectives of a traced step cost, step by step
(:mod:`.profile`), a step's time by op category as XProf groups it (:mod:`.op_categories`),
a profile read from disk and joined with its HLO (:mod:`.profile_load`), and the whole
training steps of a sweep (:mod:`.training_steps`). Tables only; ``python -m analysis
profile`` and the report's sections show them.

May import: :mod:`analysis.book`, :mod:`analysis.hlo`, :mod:`analysis.trace`, :mod:`analysis.runs`.
"""
