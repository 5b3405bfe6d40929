"""What the sweep process and the worker both need: the config schema (:mod:`.schema`), the spec
a point's config becomes and every check on it (:mod:`.spec`, :mod:`.spec_values`, :mod:`.op_spec`
for the op typed per kind, :mod:`.matmul_plan`, :mod:`.memory`), and the worker's process
settings (:mod:`.jaxenv`). Imports neither :mod:`runner.sweep` nor :mod:`runner.worker`."""
