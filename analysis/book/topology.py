"""How devices lie on the physical network: which mesh axes are rings, and which part of a
collective's group crosses a domain boundary (NVLink domain, TPU slice) onto a slower network.

``--topology`` takes one of three forms:

* ``4x4x4`` / ``8x16`` - one TPU slice (or one switch domain): the physical axes, which decide
  rings vs lines. Whether an axis wraps around depends on the chip (the YAML's
  ``wraparound``): ``always`` (v3), ``never``, ``multiple_of_4`` (v4p/v5p: only a slice of full
  4x4x4 cubes, every dimension a multiple of 4) or ``only_16`` (v5e/v6e: only a full edge of
  16); a mesh axis may span several physical axes (:mod:`analysis.book.placement`).
* ``nodes=4,gpus_per_node=8`` - GPU nodes joined by a scale-out network (InfiniBand/RoCE). A
  node is one NVLink domain, as the book uses the word (GB200 NVL72: ``gpus_per_node=72``); a
  node larger than the entry's NVLink domain (PCIe cards, H100 NVL pairs) adds a PCIe level.
* ``slices=2`` or ``slices=2,slice=16x16`` - TPU slices joined by the data-center network (DCN).

Devices are numbered row-major over the mesh (the first mesh axis varies slowest) and fill
nodes/slices in that order, as the runner's meshes (``mesh_utils.create_device_mesh`` and
``create_hybrid_device_mesh``) lay them out: so the outer part of a mesh axis crosses nodes,
its inner part stays inside.

This module knows no chip: it reads a hardware entry's fields by name (``interconnect``,
``wraparound``, ``domain_size``, ``node_bw_unidir_Bps``), so :mod:`analysis.book.hardware` can
re-export it without an import circle.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from analysis.book.errors import HardwareError, NotationError
from analysis.book.placement import axis_wraps, from_topology

__all__ = [
    "Layout",
    "Fabric",
    "parse_topology",
    "parse_layout",
    "fabrics_for",
    "split_axes",
    "group_extents",
    "wraparound_for",
    "wraparound_reason",
]

_FORMS = "4x4x4, nodes=2,gpus_per_node=8 or slices=2[,slice=16x16]"


def parse_topology(topology: str) -> list[int]:
    """``"4x4x4"`` -> ``[4, 4, 4]`` (a single slice's shape)."""
    try:
        sizes = [int(p) for p in topology.lower().replace("×", "x").split("x")]
    except ValueError:
        sizes = []
    if not sizes or any(s <= 0 for s in sizes):
        raise NotationError(f"topology {topology!r} is not like 4x4x4 or 8x16")
    return sizes


@dataclass(frozen=True)
class Layout:
    """A parsed ``--topology``: ``kind`` is ``shape`` (one slice), ``nodes`` or ``slices``;
    ``blocks`` counts nodes or slices, ``block_size`` their devices (None: total / blocks)."""

    text: str
    kind: str
    shape: tuple[int, ...] | None = None
    blocks: int = 1
    block_size: int | None = None


def parse_layout(topology: str) -> Layout:
    """Any of the three ``--topology`` forms (NotationError quoting a bad one)."""
    text = topology.strip()
    if "=" not in text:
        return Layout(text, "shape", tuple(parse_topology(text)))
    kv: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = re.fullmatch(r"([a-z_]+)\s*=\s*([0-9x×]+)", part.lower())
        if m is None or m.group(1) in kv:
            raise NotationError(f"topology {topology!r}: {part!r} is not like {_FORMS}")
        kv[m.group(1)] = m.group(2)
    try:
        if set(kv) == {"nodes", "gpus_per_node"}:
            nodes, per = int(kv["nodes"]), int(kv["gpus_per_node"])
            if nodes > 0 and per > 0:
                return Layout(text, "nodes", None, nodes, per)
        elif set(kv) in ({"slices"}, {"slices", "slice"}):
            shape = tuple(parse_topology(kv["slice"])) if "slice" in kv else None
            if int(kv["slices"]) > 0:
                return Layout(text, "slices", shape, int(kv["slices"]), math.prod(shape) if shape else None)
    except ValueError:
        pass
    raise NotationError(f"topology {topology!r} is not like {_FORMS}")


@dataclass(frozen=True)
class Fabric:
    """One level of the network: ``block`` devices (cumulative, innermost level first) that
    talk over ``interconnect`` (``torus`` or ``switch``) at the entry's ``bw_attr`` W."""

    name: str
    where: str
    interconnect: str
    bw_attr: str
    lat_attr: str
    block: int


def fabrics_for(hw, layout: Layout | None, total: int) -> list[Fabric]:
    """The levels a group of ``total`` devices spans, innermost first; one level when it fits
    one domain. ``layout=None`` (no topology, or a slice shape): a group larger than
    ``hw.domain_size`` is taken to fill domains in order, an assumption the caller flags.
    A GPU node is one NVLink domain (the book's usage: on GB200 NVL72 a node of 72 GPUs);
    nodes larger than the NVLink domain (PCIe cards, H100 NVL pairs) add a level at
    ``node_bw_unidir_Bps``, the PCIe path between GPUs of a node."""
    switch = hw.interconnect == "switch"
    d = getattr(hw, "domain_size", None)
    net = getattr(hw, "scaleout_network", None) or "scale-out network"
    _check_layout_kind(hw, layout)
    if layout is None or layout.kind == "shape":
        if not d or total <= d or hw.interconnect == "host":
            return [
                Fabric(
                    "NVLink switch" if switch else "ICI",
                    "in one domain",
                    hw.interconnect or "torus",
                    "link_bw_unidir_Bps",
                    "hop_latency_s",
                    total,
                )
            ]
        layout = _assumed_layout(hw, total, d)
    d = d or total
    if layout.kind == "slices":
        return _slice_levels(hw, layout, total, d, net)
    return _node_levels(hw, layout, total, d, net)


def _check_layout_kind(hw, layout: Layout | None) -> None:
    """Refuse GPU nodes on a torus entry and TPU slices on a switch entry."""
    if (
        layout is not None
        and layout.kind != "shape"
        and hw.interconnect != ("switch" if layout.kind == "nodes" else "torus")
    ):
        want = "GPU nodes (an entry whose interconnect is a switch)" if layout.kind == "nodes" else "TPU slices"
        raise HardwareError(
            f"topology {layout.text!r} describes {want}; {hw.name} is {hw.interconnect}: "
            f"use {'slices=N[,slice=AxB]' if layout.kind == 'nodes' else 'nodes=N,gpus_per_node=M'}"
        )


def _assumed_layout(hw, total: int, d: int) -> Layout:
    """No topology for a group larger than a domain of ``d``: devices taken to fill domains in order."""
    if hw.interconnect == "switch" and getattr(hw, "node_bw_unidir_Bps", None) is not None:
        return Layout("(assumed)", "nodes", None, 1, total)  # PCIe / NVL cards: one node of them
    g = math.gcd(total, d)
    return Layout("(assumed)", "nodes" if hw.interconnect == "switch" else "slices", None, total // g, g)


def _slice_levels(hw, layout: Layout, total: int, d: int, net: str) -> list[Fabric]:
    """TPU slices: ICI inside each slice, the scale-out network across them."""
    size = layout.block_size or total // layout.blocks
    if size * layout.blocks != total:
        raise NotationError(f"topology {layout.text!r} has {size * layout.blocks} devices but the mesh has {total}")
    if size > d:
        raise HardwareError(
            f"topology {layout.text!r}: a slice of {size} devices is larger than {hw.name}'s largest slice ({d})"
        )
    return [
        Fabric("ICI", "inside each slice", "torus", "link_bw_unidir_Bps", "hop_latency_s", size),
        Fabric(net, "across slices", "switch", "scaleout_bw_unidir_Bps", "scaleout_latency_s", total),
    ]


def _node_levels(hw, layout: Layout, total: int, d: int, net: str) -> list[Fabric]:
    """GPU nodes: NVLink inside each (PCIe between a node's NVLink domains where a node holds
    several), the scale-out network across nodes."""
    per = layout.block_size or 1
    if per * layout.blocks != total:
        raise NotationError(f"topology {layout.text!r} has {per * layout.blocks} GPUs but the mesh has {total}")
    if d >= per:  # each node one NVLink domain (the book's "node"; for NVL72, gpus_per_node=72)
        levels = [Fabric("NVLink switch", "inside each node", "switch", "link_bw_unidir_Bps", "hop_latency_s", per)]
        if total > per:
            levels.append(Fabric(net, "across nodes", "switch", "scaleout_bw_unidir_Bps", "scaleout_latency_s", total))
        return levels
    if getattr(hw, "node_bw_unidir_Bps", None) is None or per % d:
        raise HardwareError(
            f"topology {layout.text!r}: {hw.name}'s NVLink domain is {d} GPUs, smaller than a "
            f"node of {per}, and the entry gives no node_bw_unidir_Bps for the rest of the "
            f"node; use gpus_per_node={d} or add it"
        )
    levels = (
        [
            Fabric(
                "NVLink",
                "inside each NVLink pair" if d == 2 else "inside each NVLink domain",
                "switch",
                "link_bw_unidir_Bps",
                "hop_latency_s",
                d,
            )
        ]
        if d > 1
        else []
    )
    levels.append(Fabric("PCIe", "inside each node", "switch", "node_bw_unidir_Bps", "hop_latency_s", per))
    if total > per:
        levels.append(Fabric(net, "across nodes", "switch", "scaleout_bw_unidir_Bps", "scaleout_latency_s", total))
    return levels


def split_axes(sizes: Sequence[int], blocks: Sequence[int]) -> list[tuple[int, ...]]:
    """Per mesh axis (row-major, last axis innermost), its extent at each level whose
    cumulative block sizes are ``blocks`` (innermost first, the last = all devices):
    ``split_axes([16], [8, 16])`` -> ``[(8, 2)]`` (8 GPUs in a node, 2 nodes)."""
    out, stride = [], 1
    for m in reversed([int(s) for s in sizes]):
        parts, lo = [], 1
        for hi in blocks:
            a, b = max(stride, lo), min(stride * m, hi)
            if b > a and b % a:
                raise NotationError(
                    f"a mesh axis of {m} does not split evenly over blocks of {lo} devices "
                    f"(it spans devices {stride} apart)"
                )
            parts.append(b // a if b > a else 1)
            lo = hi
        if math.prod(parts) != m:
            raise NotationError(f"a mesh axis of {m} straddles a block of {blocks[0]} devices unevenly")
        out.append(tuple(parts))
        stride *= m
    return out[::-1]


def group_extents(ids: Sequence[int], blocks: Sequence[int]) -> tuple[list[int], bool]:
    """A group of device ids (as HLO's replica groups give them), its extent at each level of
    cumulative ``blocks``; and whether it spreads evenly (extents rounded up when not)."""
    counts = [len(set(ids))] + [len({i // b for i in ids}) for b in blocks[:-1]]
    ext, even = [], True
    for a, b in zip(counts, counts[1:] + [1]):
        even &= a % b == 0
        ext.append(-(-a // b))
    return ext, even


def wraparound_for(hw, axis_sizes: Sequence[int], topology: str | None = None) -> list[bool]:
    """Per mesh axis: True if it is a ring (wraparound), False if a line.

    With a slice topology, the mesh axes take its physical axes in order
    (:func:`analysis.book.placement.from_topology`: an axis may span several, or share one
    with the next mesh axis), and an axis is a ring when every physical axis it spans is (the
    whole axis, and the chip wraps it). Without one, the mesh's own axes stand in for the
    slice's. With ``slices=``/``nodes=``, the rule applies to each axis' part inside one slice
    (mapped onto ``slice=AxB`` when given). A switch counts as all-to-all connected and the
    host as a ring (its W and T_min are fitted to the ring formula), so both return True.
    """
    sizes = [int(s) for s in axis_sizes]
    layout = parse_layout(topology) if topology is not None else None
    if layout is not None and layout.kind != "shape":
        if hw.interconnect in ("switch", "host"):
            return [True] * len(sizes)
        total = math.prod(sizes)
        blocks = [f.block for f in fabrics_for(hw, layout, total)]
        inner = [p[0] for p in split_axes(sizes, blocks)]
        act = [n for n in inner if n > 1]
        rings = iter(wraparound_for(hw, act, "x".join(map(str, layout.shape)) if layout.shape else None))
        return [next(rings) if n > 1 else True for n in inner]
    if hw.interconnect in ("switch", "host"):
        return [True] * len(sizes)
    if layout is None:
        return [axis_wraps(hw.wraparound, sizes, s) for s in sizes]
    names = [str(i) for i in range(len(sizes))]
    place = from_topology(dict(zip(names, sizes)), list(layout.shape), topology)
    return [all(place.ring(hw.wraparound, d, e) for d, e in place.group([a]).items()) for a in names]


def wraparound_reason(hw, size: int, shape: Sequence[int] | None = None) -> str:
    """Why an axis of ``size`` on ``hw`` is a ring or a line, in words (``shape``: the slice's
    chips, by default the axis alone)."""
    rule = hw.wraparound
    if rule == "always":
        return f"{hw.name} wraps around every axis"
    if rule == "multiple_of_4":
        shape = [int(s) for s in (shape or [size])]
        cube = axis_wraps(rule, shape, size)
        return (
            f"{hw.name} wraps around only a slice of full 4x4x4 cubes (every dimension a multiple of 4); "
            f"{'x'.join(map(str, shape))} {'is' if cube else 'is not'}"
        )
    if rule == "only_16":
        return f"{hw.name} wraps around only an axis of 16; this one is {size}"
    return f"{hw.name} has no wraparound"
