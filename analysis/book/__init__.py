"""The scaling book's vocabulary and cost model ("How To Scale Your Model", Part 3).

A leaf package: it imports nothing else of shardlab and nothing heavy (no pandas, no
matplotlib; jax only inside :func:`analysis.book.notation.to_partition_spec`), so the runner,
the analysis and the command line can all speak it. What lives where:

* :mod:`.errors` - ``BookError`` and its kinds;
* :mod:`.collectives` - THE table of collective kinds (names, HLO opcodes, nccl-tests bus
  bandwidth, backward partners);
* :mod:`.dtypes`, :mod:`.units` - element sizes; parsing and printing sizes and times;
* :mod:`.notation` - the sharding notation, its parser, PartitionSpec conversion;
* :mod:`.hardware` - chips and device kinds, the one reader of ``conf/hardware``
  (:mod:`.folders`: where ``conf/`` lives in a checkout or an install);
* :mod:`.topology` - rings or lines per axis, and which part of a group crosses a domain;
* :mod:`.placement` - where each mesh axis lies on a slice's physical axes (x, y, z, core,
  slice), from the devices' coordinates or ``--topology``;
* :mod:`.fabric_cost` - one collective over one fabric (the ring/line and switch formulas);
* :mod:`.collective_cost`, :mod:`.matmul_cost`, :mod:`.predict` - the cost model.

May import: the standard library, numpy, pyyaml; nothing else of shardlab (tests/project/test_layering.py).
"""
