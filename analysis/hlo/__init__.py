"""XLA HLO text: the collectives a compiled program runs, with bytes and replica groups.

No library parses HLO text from Python, so this package does, by hand and tested hard. The
face: :func:`parse_collectives` (HLO text in, :class:`Collective` records out),
:func:`group_mesh_axes` (which mesh axes a list of replica groups spans),
:func:`collective_executions` (the top-level instructions, by the names a trace shows, that run
each collective),
:class:`HloParseError`. Inside: :mod:`.scan` finds modules, computations and instructions;
:mod:`.shapes` sizes shapes; :mod:`.groups` expands replica groups; :mod:`.lex` is the
shared tokenising; :mod:`.collectives` builds the records; :mod:`.executed` follows the entry
computation to what runs.

May import: :mod:`analysis.book`, numpy (pandas only inside :func:`collectives_frame`).
"""

from analysis.hlo.collective_instructions import Collective, collectives_frame, parse_collectives
from analysis.hlo.executed import collective_executions
from analysis.hlo.groups import expand_iota_groups, group_mesh_axes, permute_groups
from analysis.hlo.lex import HloParseError
from analysis.hlo.scan import KINDS, async_pairs, instruction_opcodes
from analysis.hlo.shapes import shape_bytes

__all__ = [
    "KINDS",
    "Collective",
    "HloParseError",
    "collective_executions",
    "collectives_frame",
    "expand_iota_groups",
    "group_mesh_axes",
    "async_pairs",
    "instruction_opcodes",
    "parse_collectives",
    "permute_groups",
    "shape_bytes",
]
