"""The book's sharding notation: ``A[I_X, J]``, ``AllGather_X(...)``, ``A * B -> C``.

The face of the notation package: import from here. :mod:`.types` holds the data classes
and the grammar, :mod:`.parser` turns text into them, :mod:`.mesh` checks them against a
mesh, :mod:`.partition_spec` converts to and from ``jax.sharding.PartitionSpec``.

May import: the rest of :mod:`analysis.book`; jax only inside :func:`to_partition_spec`.
"""

from analysis.book.errors import NotationError
from analysis.book.notation.mesh import arrays_of, check, mesh_sizes
from analysis.book.notation.parser import parse
from analysis.book.notation.partition_spec import from_partition_spec, to_partition_spec
from analysis.book.notation.types import (
    AXIS_RE,
    KINDS,
    Array,
    Collective,
    Dim,
    Expr,
    Matmul,
    format_expr,
    replace_unreduced,
)

__all__ = [
    "NotationError",
    "Dim",
    "Array",
    "Collective",
    "Matmul",
    "Expr",
    "parse",
    "format_expr",
    "replace_unreduced",
    "check",
    "mesh_sizes",
    "arrays_of",
    "to_partition_spec",
    "from_partition_spec",
    "AXIS_RE",
    "KINDS",
]
