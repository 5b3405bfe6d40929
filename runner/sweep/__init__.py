"""The Hydra process: a config becomes a point (:mod:`.point`, ``run(cfg)``), points are sent to
worker processes (:mod:`.pool`, :mod:`.workers`, :mod:`.distributed`), rounds are interleaved
(:mod:`.rounds`), the folder is claimed (:mod:`.folder`, :mod:`.lock`), the console says one line a
point (:mod:`.progress`) and the sweep ends with its report (:mod:`.callbacks`), written by a
process that imported the report's modules on idle CPU while the points ran (:mod:`.report_process`)."""
