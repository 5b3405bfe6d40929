"""The pair aws-ofi-nccl's region tuner makes NCCL run on AWS p5 instances, where it overrides
NCCL's own cheapest pair (:func:`analysis.book.nccl_cost.nccl_time` prices the pair it picks).

Source, read for this module (the vertices copied; its geometry written again in Python): aws/aws-ofi-nccl
``src/tuner/nccl_ofi_regions.cpp``, the same p5 regions in the two stored versions (commits
a720c038048a1d7706ea5955bc41bda8e83a9533 and 228fa0eafb41c9e2b46446b86b5ab46c76410650), and
``include/tuner/nccl_ofi_tuner_region.h`` (TUNER_MAX_SIZE, TUNER_MAX_RANKS, ``transform_log2``).

* Each region is a polygon in (log2 nBytes, log2 ranks), one (algorithm, protocol) pair each.
  ``region_get_coll_info_internal_v3`` walks them in order and takes the first that holds the
  point (on an edge counts: ``is_inside_region`` returns 0 there), setting that pair's cost to 0
  so NCCL runs it; outside every region NCCL keeps its own choice.
* It leaves communicators of 2 nodes or fewer to NCCL ("the regions are not well defined").
* ``region_init_internal_p5_p5e`` sets regions for all_reduce only at 8 GPUs a node (and for
  other rank layouts not modelled here): all_gather and reduce_scatter stay NCCL's own.
* A pair NCCL has disabled (``NCCL_ALGO_PROTO_IGNORE``: NVLS-tree without NVLS, say) is skipped.
"""

from __future__ import annotations

import math

MAX_SIZE = 100.0 * 1024**3  # TUNER_MAX_SIZE
MAX_RANKS = 1024.0 * 1024  # TUNER_MAX_RANKS
EPS = 1e-10  # is_inside_region's eps
# expected.nccl.tuner: the platforms whose regions are here, and how predict names them
TUNERS = {"aws_ofi_p5": "aws-ofi-nccl's tuner plugin (its p5/p5e regions)"}


def _log2(p: tuple[float, float]) -> tuple[float, float]:
    """``transform_log2``: 0 becomes 1e-6 first."""
    return (math.log2(p[0] or 1e-6), math.log2(p[1] or 1e-6))


def _extend(a: tuple[float, float], b: tuple[float, float], z: tuple[float, float]) -> tuple[float, float]:
    """``extend_region``: the point where the line through a and b (in log2) reaches z's x or y,
    whichever comes first, back in bytes and ranks."""
    (ax, ay), (bx, by), (zx, zy) = _log2(a), _log2(b), _log2(z)
    if ax == bx:
        x, y = ax, zy
    elif ay == by:
        x, y = zx, ay
    else:
        m = (ay - by) / (ax - bx)
        c = by - m * bx
        x, y = (zx, m * zx + c) if m * zx + c < zy else ((zy - c) / m, zy)
    return (2.0**x, 2.0**y)


def _p5_all_reduce() -> list[tuple[str, list[tuple[float, float]]]]:
    """region_init_internal_p5_p5e, nRanks == 8 * nNodes, ncclFuncAllReduce, in its order."""
    top = (MAX_SIZE, MAX_RANKS)
    tree_ll128 = _extend((402653184, 2048), (402653184, 4096), top)
    nvlstree_1 = _extend((8053063680, 160), (9663676416, 192), top)
    nvlstree_2 = tree_ll128  # the same two points extended
    ring_simple = nvlstree_1
    return [
        ("tree/LL128", [(0, 16), (31457280, 16), (37748736, 32), (117440512, 64), (301989888, 128),
                        (301989888, 256), (335544320, 512), (536870912, 1024), (402653184, 2048),
                        (402653184, 4096), tree_ll128, (0, tree_ll128[1])]),
        ("nvls_tree/Simple", [(31457281, 16), (MAX_SIZE, 16), (31457281, 16)]),
        ("ring/LL128", [(31457280, 17), (1073741824, 17), (2147483648, 64), (2147483648, 128),
                        (1342177280, 160), (2147483648, 256), (1074790400, 256), (444596224, 160),
                        (301989888, 128), (117440512, 64), (37748736, 32)]),
        ("nvls_tree/Simple", [(2147483648, 128), (6442450944, 128), (8053063680, 160), (9663676416, 192),
                              nvlstree_1, nvlstree_2, (402653184, 4096), (402653184, 2048), (536870912, 1024),
                              (335544320, 512), (301989888, 256), (310378496, 160), (444596224, 160),
                              (1074790400, 256), (2684354560, 256), (2147483648, 224), (1342177280, 160)]),
        ("ring/Simple", [(1073741824, 17), (ring_simple[0], 17), ring_simple, (9663676416, 192),
                         (8053063680, 160), (2684354560, 64), (1610612736, 32)]),
    ]  # fmt: skip


REGIONS = {("aws_ofi_p5", "all_reduce", 8): [(pair, [_log2(v) for v in vs]) for pair, vs in _p5_all_reduce()]}


def _cross(a, b) -> float:
    return a[0] * b[1] - a[1] * b[0]


def _intersect(x0, x1, y0, y1):
    """The tuner's ``intersect``: 1 where segment x0-x1 crosses y0-y1, -1 where not, 0 where the
    crossing is within eps of y0 or y1 or the segments are parallel; with the crossing point."""
    dx, dy = (x1[0] - x0[0], x1[1] - x0[1]), (y1[0] - y0[0], y1[1] - y0[1])
    d = _cross(dy, dx)
    if abs(d) < EPS:
        return 0, None
    a = (_cross(x0, dx) - _cross(y0, dx)) / d
    sect = (y0[0] + a * dy[0], y0[1] + a * dy[1])
    if a < -EPS or a > 1 + EPS:
        return -1, sect
    if a < EPS or a > 1 - EPS:
        return 0, sect
    b = (_cross(x0, dy) - _cross(y0, dy)) / d
    return (-1 if b < 0 or b > 1 else 1), sect


def _distance(p, y0, y1) -> float:
    """The tuner's ``distance``: from p to the segment along its normal (infinite off its ends)."""
    dy = (y1[0] - y0[0], y1[1] - y0[1])
    r, sect = _intersect(p, (p[0] + dy[1], p[1] - dy[0]), y0, y1)
    if r == -1:
        return math.inf
    s = sect or (0.0, 0.0)  # parallel (a zero-length edge): the tuner measures from the origin
    return math.hypot(s[0] - p[0], s[1] - p[1])


def inside(p: tuple[float, float], vertices: list[tuple[float, float]]) -> bool:
    """``is_inside_region`` >= 0 for a point already in log2: on an edge, or inside by ray casting
    towards (2 x TUNER_MAX_SIZE, 2 x TUNER_MAX_RANKS)."""
    n = len(vertices)
    if any(_distance(p, vertices[i], vertices[(i + 1) % n]) < EPS for i in range(n)):
        return True
    xs, ys = [v[0] for v in vertices], [v[1] for v in vertices]
    if not (min(xs) <= p[0] <= max(xs) and min(ys) <= p[1] <= max(ys)):
        return False
    far = _log2((2 * MAX_SIZE, 2 * MAX_RANKS))
    crosses = sum(_intersect(p, far, vertices[i], vertices[(i + 1) % n])[0] == 1 for i in range(n))
    return crosses % 2 == 1


def region_pair(tuner: str, kind: str, size_bytes: float, ranks: int, nodes: int, enabled) -> str | None:
    """The pair (``ring/LL128``, ...) the ``tuner``'s regions make NCCL run for ``kind`` of
    ``size_bytes`` (NCCL's nBytes) on ``ranks`` over ``nodes``, among the ``enabled`` pair names;
    None where the tuner leaves the choice to NCCL."""
    if nodes <= 2 or ranks % nodes:
        return None
    regions = REGIONS.get((tuner, kind, ranks // nodes))
    if not regions:
        return None
    p = _log2((size_bytes, ranks))
    for pair, vertices in regions:
        if pair in enabled and inside(p, vertices):
            return pair
    return None
