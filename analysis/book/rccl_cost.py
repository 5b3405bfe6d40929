"""RCCL's own cost model of a collective on AMD Instinct GPUs (gfx942: MI300X): every (algorithm,
protocol) pair RCCL would consider, priced as RCCL prices it, the cheapest taken, and across nodes
the protocol RCCL's size table then sets (the expected time on AMD GPUs,
:mod:`analysis.book.expected_cost`). The sibling of :mod:`analysis.book.nccl_cost`, whose
:class:`~analysis.book.nccl_cost.Choice` it returns.

Source, read for this module (constants copied, code not), all from ROCm/rccl:

* ``src/graph/tuning.cc`` at commit 9e22c79d8dccb80075967c2a03f1a921c253c867 (the version the
  index lists, one of 205 it stores; it has PAT and gfx950, so it is newer than the RCCL 2.22.3 of
  the two-node held-out table; a stored pre-PAT copy prices that table's rows below 128 MiB the same,
  docs/validation.md "Which NCCL and RCCL the runs used"): ``baseLat``, ``tuning_model_5`` (hwLat, bwRatio,
  treeCorrectionFactor, ringCorrectionFactor, llProtoRanges), ``ncclTopoTuneModel`` and
  ``ncclTopoGetAlgoTime``'s ``__HIP_PLATFORM_AMD__`` branches.
* ``src/graph/rome_models.cc`` (commit cb829d62434aa48ef6fd3f5fff59ac313060b5fb): ``parseA2a8P``
  matches an 8-GPU, 2-socket node whose GPUs are all connected with equal XGMI width, the MI300X
  platform, to ``rome_model_81`` (8 GPUs, 8 NICs, 7 links; options ``"noCpuCheck=1,tuning=5,
  ll128Enabled=1,disableNumaMatching=1"``): tuning model 5, LL128 allowed. ``parseGraph`` then sets
  every channel's ``bwIntra = bwInter = system->totalBw / nChannels``, so a channel count never
  matters: each algorithm's bus bandwidth is ``totalBw`` (no ``baseBw`` option in that model).
* ``src/graph/search.cc`` (commit 72bc13c858cdd3b8675b7644d6b9123e2a36e757): ``totalBw`` is the sum
  of a GPU's XGMI links (``getTotalBw``); the model-matched graph returns before the search, so its
  ``latencyInter`` stays 0 (``ncclTopoCompute`` zeroes it).
* ``src/graph/topo.h`` (commit 08814b0a9e0245c64cdc7317a4981681295643f8): ``GFX94X_XGMI_WIDTH
  48.0`` GB/s per XGMI link (``ncclTopoXGMISpeed``).
* ``src/enqueue.cc`` (commit 7383f10d9031167141137837c9f1b4dc7ea82e64): LL128 is priced only on an
  all-XGMI node (``RCCL_TOPO_XGMI_ALL``); ``topoGetAlgoInfo`` takes the cheapest pair (first of
  equals: tree before ring, LL before LL128 before Simple), then calls
  ``rcclUpdateCollectiveProtocol`` (``src/misc/rccl_common.cc``, ``rcclGetSizePerRank`` in
  ``src/include/rccl_common.h``): with 2 or more nodes it keeps the algorithm and sets the
  protocol from the model's llProtoRanges by the size per rank (all_reduce: the whole buffer;
  all_gather, reduce_scatter: the buffer / ranks): Simple, LL inside the LL range, LL128 inside
  the LL128 range (its top times 3.8 for all_reduce above 2 nodes). One node keeps the cheapest.

What RCCL does on gfx942 that differs from NCCL: no per-arch caps (llMaxBw, perChMax*), one
measured bandwidth ratio per algorithm/protocol and node count instead; tree/Simple is not priced
on one node; ring bandwidth is corrected by message size across nodes (NCCL: tree only); the
network's own latencies (hwLat NET) are AMD's measured ones, large for ring/Simple (320 us).
CollNet, NVLS and PAT (NCCL_PAT_ENABLE defaults to 0) are off. Not reproduced: the build flag
ENABLE_LL128 (taken as set, RCCL's default build) and the match itself (a node that matches no
model falls back to the NCCL search with tuning model 0, which this module does not price).
all_to_all has no tuning table (grouped send/recv): one ring/Simple step of latency plus the bytes
over the XGMI links and the NICs, whichever is slower, named ``p2p/Simple`` as in nccl_cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from analysis.book.nccl_cost import Choice, p2p_choice

PROTOS = ("LL", "LL128", "Simple")
ARCHS = ("gfx942",)
# topo.h GFX94X_XGMI_WIDTH: RCCL's bandwidth of one XGMI link, GB/s
XGMI_BW_GBps = {"gfx942": 48.0}
# tuning.cc baseLat, us; (LL, LL128, Simple)
BASE_LAT_US = {"tree": (12.0, 12.0, 17.0), "ring": (12.0, 12.0, 17.0)}
# tuning.cc tuning_model_5 (rome_model_81's "tuning=5"), (LL, LL128, Simple) each
HW_LAT_US = {  # hwLat[NVLINK (XGMI) | NET][algorithm]
    "xgmi": {"tree": (0.9, 0.9, 2.3), "ring": (0.8, 0.8, 2.1)},
    "net": {"tree": (10.5, 10.5, 25.0), "ring": (9.5, 9.5, 320.0)},
}
BW_RATIO = (  # bwRatio[up to 2 nodes | more][algorithm]
    {"tree": (0.06, 0.06, 0.11), "ring": (0.08, 0.08, 1.00)},
    {"tree": (0.06, 0.06, 0.59), "ring": (0.08, 0.08, 1.00)},
)
# per log2i(nBytes >> 6), 64 B ... 4 GiB and beyond (index 26 for every larger size)
TREE_CORRECTION = (
    (.1, .1, .1, .1, .1, .1, 1., 1., 1., 1., 1., .6, 1., .9, 1., 1., .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1),
    (.1, .1, .1, .1, .1, .1, 1., 1., 1., 1., 1., .6, 1., .9, 1., 1., .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1),
    (.1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .7, 1., 1., 1., 1., 1., .7, .7, .5, .6, .6, .6),
)  # fmt: skip
RING_CORRECTION = (  # applied only across nodes
    (.1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, 1., .2, 1., .4, .4, .1, .2, .2, .1, .1, .1, .1, .1, .1, .1, .1),
    (.1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, 1., .2, 1., .4, .4, .1, .2, .2, .1, .1, .1, .1, .1, .1, .1, .1),
    (.1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, .1, 1., .8, 1., 1., 1.),
)  # fmt: skip
# llProtoRanges: bytes per rank, (min, max] of LL and of LL128 (min/max/factor/threads: the first two)
LL_RANGES = {
    "reduce_scatter": ((0, 655360), (131072, 3211264)),
    "all_gather": ((0, 98304), (98304, 5046272)),
    "all_reduce": ((0, 1048576), (1048576, 9437184)),
}


@dataclass(frozen=True)
class RcclSystem:
    """What RCCL's model needs of a cluster: the GPU arch (its tuning model and XGMI link rate),
    XGMI links per GPU, NICs per node and each one's bandwidth (all_to_all only), the CPU
    (``amd`` or ``intel``: the network post overhead), whether LL128 is enabled (the matched
    model's ``ll128Enabled`` on an all-XGMI node) and the network's own latency per inter-node
    step (``graph.latencyInter``: 0 on a model-matched graph)."""

    arch: str
    xgmi_links: int
    nics_per_node: int
    nic_bw_GBps: float
    cpu: str
    ll128: bool = True
    net_latency_s: float = 0.0


def total_bw_GBps(sys: RcclSystem) -> float:
    """search.cc getTotalBw: a GPU's XGMI links summed; every algorithm's bus bandwidth."""
    return sys.xgmi_links * XGMI_BW_GBps[sys.arch]


def candidates(kind: str, sys: RcclSystem, ranks: int, nodes: int) -> list[tuple[str, str, float, float]]:
    """Every pair RCCL's tuning model prices for ``kind``: (algorithm, protocol, latency in us,
    algorithm bandwidth in GB/s before the size correction), as ncclTopoTuneModel computes them."""
    ppn = ranks // nodes
    nsteps = 2 * (ranks - 1) if kind == "all_reduce" else ranks - 1
    n_inter = 0 if nodes == 1 else (2 * (nodes - 1) if kind == "all_reduce" else nodes - 1)
    net_overhead = 2.0 if sys.cpu == "amd" else 1.0  # getNetOverhead, us
    net_us = sys.net_latency_s * 1e6
    out = []
    for a in ("tree", "ring") if kind == "all_reduce" else ("ring",):
        for p_i, p in enumerate(PROTOS):
            if a == "tree" and p == "Simple" and nodes == 1:  # gfx942, all the comm's GPUs on this node
                continue
            if p == "LL128" and not sys.ll128:
                continue
            bus = total_bw_GBps(sys) * BW_RATIO[0 if nodes <= 2 else 1][a][p_i]
            bw = bus * ranks / nsteps if a == "ring" else bus * 0.5  # bus -> algorithm bandwidth
            lat = BASE_LAT_US[a][p_i]
            intra = HW_LAT_US["xgmi"][a][p_i]
            # one GPU per node: a ring's network step costs the tree's; Simple adds the flush latency
            inter = HW_LAT_US["net"]["tree" if ppn == 1 else a][p_i] + net_us * (2 if p == "Simple" else 1)
            if a == "ring":
                intra = max(intra, (net_overhead * (3 if p == "Simple" else 1)) if nodes > 1 else 0.0)
                lat += (nsteps - n_inter) * intra + n_inter * inter
            else:
                lat += 2 * ((ppn - 1) * intra + int(math.log2(nodes)) * inter)
            out.append((a, p, lat, bw))
    return out


def _log_size(size_bytes: float) -> int:
    """log2i(nBytes >> 6), capped at the correction tables' last index (26)."""
    n = int(size_bytes) >> 6
    return min(n.bit_length() - 1 if n > 0 else 0, 26)


def protocol_override(kind: str, size_bytes: float, ranks: int, nodes: int, sys: RcclSystem) -> str | None:
    """rcclUpdateCollectiveProtocol: across 2 or more nodes the protocol RCCL sets by the size per
    rank (module docstring); None on one node or where the model has no range (the cheapest stands)."""
    if nodes < 2 or kind not in LL_RANGES:
        return None
    per_rank = size_bytes if kind == "all_reduce" else size_bytes // ranks  # rcclGetSizePerRank
    (ll_min, ll_max), (ll128_min, ll128_max) = LL_RANGES[kind]
    if kind == "all_reduce" and nodes > 2:
        ll128_max *= 3.8  # "Tree has special behavior at 2 nodes"
    proto = "LL" if ll_min < per_rank <= ll_max else "Simple"
    if sys.ll128 and ll128_min < per_rank <= ll128_max:
        proto = "LL128"
    return proto


def rccl_time(kind: str, size_bytes: float, ranks: int, nodes: int, sys: RcclSystem) -> tuple[Choice, list[Choice]]:
    """The pair RCCL runs for ``size_bytes`` (RCCL's nBytes: V for all_reduce, all_gather and
    reduce_scatter; for all_to_all each GPU's buffer, V / ranks) and every pair priced: the
    cheapest, then across nodes the algorithm kept with the protocol of :func:`protocol_override`.
    Its time, latency and bandwidth stay the cheapest pair's: topoGetAlgoInfo sets
    ``simInfo->estimatedTime`` to the cheapest time after the override, never pricing the pair it
    runs (whose own line in tuning model 5 can be 10x slower: tree/LL128 at 4 MiB, 2 nodes)."""
    if ranks <= 1:
        return Choice("none", 0.0, 0.0, math.inf, 0), []
    if kind == "all_to_all":
        return _p2p(size_bytes, ranks, nodes, sys)
    log_size = _log_size(size_bytes)
    priced = []
    for a, p, lat, bw in candidates(kind, sys, ranks, nodes):
        if a == "tree":
            bw *= TREE_CORRECTION[PROTOS.index(p)][log_size]
        elif nodes > 1:
            bw *= RING_CORRECTION[PROTOS.index(p)][log_size]
        t_us = lat + size_bytes / (1000 * bw)
        priced.append(Choice(f"{a}/{p}", t_us * 1e-6, lat * 1e-6, bw, 0))
    best = min(priced, key=lambda c: c.time_s)  # the first of equals, as topoGetAlgoInfo's strict <
    proto = protocol_override(kind, size_bytes, ranks, nodes, sys)
    if proto is not None:  # RCCL runs this protocol; its estimate (simInfo) stays the cheapest's time
        best = replace(best, name=f"{best.name.split('/')[0]}/{proto}")
    return best, priced


def _p2p(size_bytes: float, ranks: int, nodes: int, sys: RcclSystem) -> tuple[Choice, list[Choice]]:
    """all_to_all as grouped send/recv to every peer (module docstring), over the XGMI links and the NICs."""
    lat_us = (
        BASE_LAT_US["ring"][2] + HW_LAT_US["xgmi"]["ring"][2],
        BASE_LAT_US["ring"][2] + HW_LAT_US["net"]["ring"][2],
    )
    return p2p_choice(size_bytes, ranks, nodes, total_bw_GBps(sys), sys.nics_per_node * sys.nic_bw_GBps, lat_us)
