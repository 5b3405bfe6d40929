"""The JAX process (:mod:`.serve`): one point at a time is built (:mod:`.programs`, on the mesh of
:mod:`.meshes`), checked (:mod:`.result_check`), timed (:mod:`.timing`), traced (:mod:`.tracing`) and
set against the ceiling (:mod:`.ceiling`, :mod:`.copy_curve`) by :mod:`.measure`. Never imports
:mod:`runner.sweep`."""
