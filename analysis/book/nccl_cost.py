"""NCCL's own cost model of a collective on a GPU cluster: every (algorithm, protocol) pair NCCL
would consider, priced as NCCL prices it, and the cheapest taken (the expected time on GPUs,
:mod:`analysis.book.expected_cost`).

Source, read for this module (constants copied, code not):

* ``src/graph/tuning.cc`` of NCCL 2.28.3 as stored in the public copy zhanglin496/nccl-2.28.3-1,
  commit 850a18f5a2d15a77525bb671b12ee03bc1d4b951 (``ncclTunerConstantsDefaults``: baseLatencies,
  hwLatencies, llMaxBws, perChMaxRingLL128Bws, perChMaxTreeLL128Bws, perChMaxTreeBws,
  perChMaxNVLSTreeBws, nvlsEfficiency; ``ncclTopoTuneModel``; ``ncclTopoGetAlgoTime``). The one
  version of NVIDIA/nccl's own tuning.cc the index holds (commit
  b6475625fbcaa2c3c0e50eed2fa1255d7514d4a2, 2.19 era) has the same model with older constants
  (Tree/Simple 28 us per NVLink hop, NVLS 23 us, no PAT, no Blackwell): 2.28.3's are used.
* ``src/graph/topo.h`` (same copy, commit 67491d6d60b55d9962eb4b780ba224613a3ab36d): NCCL's NVLink
  bandwidth per link (SM80 20.0, SM90 20.6, SM100 40.1 GB/s), PCI_BW 12.0.
* ``src/graph/search.cc`` (same copy, commit 67491d6d): the speed arrays the topology search tries
  and ``ncclTopoDupChannels``.

NCCL prices ``time = latency + nBytes / bandwidth`` per pair, with nBytes the whole buffer (V for
all_reduce, all_gather and reduce_scatter). Its bandwidths come from the channels its topology
search finds (``graph.nChannels`` x ``bwIntra``/``bwInter``); that search is not reproduced here.
:func:`search_graph` stands in for it: the first speed of the arch's speed array that fits the
GPU's NVLink (one node) or its NIC (several nodes), as many channels as the links hold, then
``ncclTopoDupChannels``; NVLS graphs by search.cc's two passes (:func:`nvls_graph`: each channel
takes its bandwidth from every GPU's NVLink; across nodes one channel per NIC, as NVIDIA/nccl#1041
saw: 8 NVLSTree channels on an H100 node with 8 NICs; NVIDIA/nccl#1197's one-node graph, 8 x 40/60).
``ncclTopoCompute``'s second pass (search.cc, commit 67491d6d) retries a found graph at faster
speeds: a ring at both, NVLS at a faster bwInter, a tree at a faster bwIntra up to twice bwInter
("increase bwIntra for trees (2 nodes or collnet)"). The tree's is followed (:func:`search_graph`,
2 nodes: over 200 Gb/s NICs its bwIntra doubles, which is how a 2-node tree's bus bandwidth passes
the NICs' line rate); across 400 Gb/s NICs it can raise no ring or NVLS graph
(``ncclTopoSearchRecNet`` skips a NIC slower than the speed; Hopper's array starts at 48), so that
part is not reproduced (the 2 x 8 B200 all_gather and H100 all_reduce it was checked for are
unchanged: docs/validation.md, "The two biggest misses").
The network's own latency (``graph.latencyInter``, which search.cc starts at 0 and a network plugin may
report) is the entry's ``net_latency_s``: NCCL adds it to every inter-node step (twice for Simple).
It is the one fitted number, named with its set in each entry. CollNet (SHARP in the network) is
not priced: no entry here has it.
A tuner plugin may override the cheapest pair: where an entry names one (``NcclSystem.tuner``),
:func:`nccl_time` takes the pair its regions pick (:mod:`analysis.book.ofi_tuner`), priced the same.
all_to_all has no tuning table in NCCL (it is grouped send/recv, the p2p path): it is priced as
one pipelined Ring/Simple step over each link (baseLat + hwLat) plus the bytes each GPU sends over
its NVLink and its share of the NICs, whichever is slower, and named ``p2p/Simple``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analysis.book.ofi_tuner import region_pair

ARCHS = ("volta", "ampere", "hopper", "blackwell")  # tuning.cc's compCapIndex order
PROTOS = ("LL", "LL128", "Simple")
ALGOS = ("ring", "tree", "nvls", "nvls_tree", "pat")  # NCCL_ALGO's Ring, Tree, NVLS, NVLSTree, PAT
# tuning.cc ncclTunerConstantsDefaults, in us; algorithm -> (LL, LL128, Simple)
BASE_LAT_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0),
               "pat": (8.0, 8.0, 8.0)}  # fmt: skip
HW_LAT_US = {  # hwLatencies[NVLINK | PCI | NET][algorithm][protocol]
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": (0, 0, 25), "nvls_tree": (0, 0, 25),
               "pat": (0, 0, 4.0)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0),
            "pat": (0, 0, 4.0)},
    "net": {"tree": (5.0, 8.5, 14), "ring": (2.7, 4.0, 14.0), "nvls": (0, 0, 18), "nvls_tree": (0, 0, 14),
            "pat": (0, 0, 14)},
}  # fmt: skip
# per arch (volta, ampere, hopper, blackwell) x (1 node, 2 nodes, more), GB/s
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
RING_LL128_PER_CH = ((20.0,) * 3, (20.0,) * 3, (36.7,) * 3, (73.4,) * 3)
TREE_LL128_PER_CH = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
TREE_PER_CH = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
NVLS_TREE_PER_CH = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 43.1))
NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)
# ncclTopoGetAlgoTime: Tree all_reduce bandwidth correction per log2(nBytes / 64), 64 B - 256 MiB
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
)  # fmt: skip
# topo.h: NCCL's NVLink bandwidth per link, GB/s; search.cc: the speeds the search tries, GB/s
NVLINK_BW = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}
PCI_BW = 12.0
SPEEDS_INTRA = {
    "hopper": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    "blackwell": (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}
SPEEDS_INTER = {
    "hopper": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    "blackwell": (96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
                  0.24, 0.12),
}  # fmt: skip
SPEEDS_INTRA_OLD = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SPEEDS_INTER_OLD = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2)
MAX_SEARCH_CHANNELS = 32  # MAXCHANNELS 64 in 2.28.3 (src/include/device.h); a graph keeps at most half
NVLS_MAX_ARITY = 32  # NCCL_MAX_NVLS_ARITY: an NVLS graph has at most this many channels (heads)


@dataclass(frozen=True)
class NcclSystem:
    """What NCCL's model needs of a cluster: the GPU arch, the intra-node link (``nvlink`` with
    ``nvlinks`` links per GPU, or ``pci``), NICs per node and each one's bandwidth, whether the
    NVSwitch reduces (NVLS), and the CPU (``intel``, ``amd``, ``arm``: the LL cap across nodes and
    the network post overhead depend on it).

    ``net_algorithms`` and ``net_protocols``: what NCCL may choose from across nodes, where the
    platform's network plugin needs ``NCCL_ALGO`` / ``NCCL_PROTO`` set (Google's GPUDirect-TCPX and
    -TCPXO machines: Simple only, as their environment profiles set it for every job that uses
    the plugin); empty, NCCL's own choice among all of them. Inside one node no network plugin
    is loaded, and NCCL chooses among all of them there too."""

    arch: str
    intra: str
    nvlinks: int
    nics_per_node: int
    nic_bw_GBps: float
    nvls: bool
    cpu: str
    net_latency_s: float = 0.0  # graph.latencyInter: the network's own latency per inter-node step
    net_algorithms: tuple[str, ...] = ()
    net_protocols: tuple[str, ...] = ()
    # a tuner plugin whose regions override NCCL's cheapest pair (analysis.book.ofi_tuner.TUNERS); "" for none
    tuner: str = ""


@dataclass(frozen=True)
class Graph:
    """One algorithm's channels as NCCL's search leaves them: count and per-channel GB/s."""

    channels: int
    bw_intra_GBps: float
    bw_inter_GBps: float


@dataclass(frozen=True)
class Choice:
    """One priced (algorithm, protocol) pair: ``name`` like ``ring/LL128``."""

    name: str
    time_s: float
    latency_s: float
    bw_GBps: float  # NCCL's algorithm bandwidth: nBytes / bw is the bandwidth term
    channels: int


def search_graph(sys: NcclSystem, gpus: int, nodes: int, pattern: str = "ring") -> Graph:
    """A stand-in for ncclTopoCompute (module docstring): the first speed of the arch's array that
    fits (``maxBw``: the GPU's NVLink, or its NIC across nodes; ``speed * minChannels <= totalBw``),
    as many channels as the links hold, then ncclTopoDupChannels. NVLS graphs: :func:`nvls_graph`."""
    if pattern in ("nvls", "nvls_tree"):
        return nvls_graph(sys, gpus, nodes)
    intra_total = sys.nvlinks * NVLINK_BW[sys.arch] if sys.intra == "nvlink" else PCI_BW
    new = sys.arch in SPEEDS_INTRA
    if nodes == 1:
        speeds, cap = (SPEEDS_INTRA[sys.arch] if new else SPEEDS_INTRA_OLD), intra_total
    else:
        speeds, cap = (SPEEDS_INTER[sys.arch] if new else SPEEDS_INTER_OLD), min(sys.nic_bw_GBps, intra_total)
    total = intra_total * (gpus / (gpus - 1) if pattern != "ring" and gpus > 1 else 1.0)
    s = next((x for x in speeds if x <= cap and x <= total), speeds[-1])
    n = math.floor(intra_total / s)
    if nodes > 1:
        n = min(n, sys.nics_per_node * max(1, math.floor(sys.nic_bw_GBps / s)))
    n = max(1, min(n, MAX_SEARCH_CHANNELS))
    s_intra = s
    if pattern == "tree" and nodes == 2:
        # search.cc's second pass, "increase bwIntra for trees (2 nodes or collnet)": the channels
        # held, bwIntra one speed faster at a time while below twice bwInter and the NVLink holds it
        j = speeds.index(s)
        while j > 0 and s_intra < 2 * s and n * speeds[j - 1] <= intra_total:
            j -= 1
            s_intra = speeds[j]
    cc_above_80 = sys.arch in ("hopper", "blackwell")
    if s >= 25.0 and not (cc_above_80 and s < 50.0 and n > 4):  # ncclTopoDupChannels
        dup = min(2 * n, MAX_SEARCH_CHANNELS)
        s /= math.ceil(dup / n)
        s_intra /= math.ceil(dup / n)
        n = dup
    return Graph(n, s_intra, s)


def nvls_graph(sys: NcclSystem, gpus: int, nodes: int) -> Graph:
    """The NVLS graph ncclTopoCompute finds (search.cc, commit 850a18f5), its two passes followed:

    * What fits: every NVLS channel pulls from every GPU through the NVSwitch, so
      ncclTopoSearchTryNvls takes the channel's bwIntra from each GPU's NVLink both ways, twice
      from the channel's head: n channels at speed s fit where (n + 1) x s <= the GPU's NVLink
      bandwidth. Across nodes each channel's head is the local GPU of its own NIC, one carrying
      at least bwInter (ncclTopoSearchRecNet: ``net.bw < bw`` is skipped, one channel per NIC,
      no GPU heading two), so n <= the NICs. At most NCCL_MAX_NVLS_ARITY = 32 channels and one
      per GPU; on one node exactly that many ("pull evenly from all GPUs": minChannels =
      maxChannels).
    * Pass 1: from the first speed <= maxBw (NVLink, or the NIC across nodes) with minChannels x
      speed <= totalBw x GPUs/(GPUs-1), lower the speed while the next one is above .49 of the
      best graph's bwInter, keeping a graph with more channels or more channels x bwInter
      (ncclTopoCompareGraphs' NVLS rule), until the channels reach their maximum or channels x
      bwInter reach the GPU's NVLink bandwidth (system->totalBw).
    * Pass 2: raise bwInter alone, channels and bwIntra held, while it is below twice bwIntra
      (and, across nodes, the NIC carries it).

    NVIDIA/nccl#1197 prints the graph of one H100 node (NCCL 2.19.4, 18 NVLinks x 20 GB/s):
    "Pattern 5, crossNic 0, nChannels 8, bw 40.000000/60.000000": Graph(8, 40, 60) here. On a
    GB200 NVL72 rack, one NCCL node: 32 channels at 20 GB/s, bwInter 40. (An earlier stand-in took
    the first speed alone: 8 x 50 GB/s on that H100 node, and 32 x 48 GB/s, more than the
    NVLink carries, across two NVL72 racks.)"""
    nvlink = sys.nvlinks * NVLINK_BW[sys.arch] if sys.intra == "nvlink" else PCI_BW
    speeds = (SPEEDS_INTRA if nodes == 1 else SPEEDS_INTER)[sys.arch]  # NVLS needs Hopper or later
    max_ch = min(NVLS_MAX_ARITY, gpus)
    min_ch = max_ch if nodes == 1 else 1
    max_bw = nvlink if nodes == 1 else min(sys.nic_bw_GBps, nvlink)
    total = nvlink * (gpus / (gpus - 1) if gpus > 1 else 1.0)

    def channels(s_intra: float, s_inter: float) -> int:
        n = min(max_ch, math.floor(nvlink / s_intra) - 1)
        if nodes > 1:
            n = min(n, sys.nics_per_node) if sys.nic_bw_GBps >= s_inter else 0
        return n if n >= min_ch else 0

    i = next((k for k, s in enumerate(speeds) if s <= max_bw and s * min_ch <= total), len(speeds) - 1)
    best = None
    while True:  # pass 1
        n = channels(speeds[i], speeds[i])
        if n and (best is None or n > best.channels or n * speeds[i] > best.channels * best.bw_inter_GBps):
            best = Graph(n, speeds[i], speeds[i])
        if best and (best.channels == max_ch or best.channels * best.bw_inter_GBps >= nvlink):
            break
        if i == len(speeds) - 1 or (best and speeds[i + 1] / best.bw_inter_GBps <= 0.49):
            break
        i += 1
    if best is None:
        return Graph(0, speeds[-1], speeds[-1])
    j = speeds.index(best.bw_inter_GBps)
    while j > 0 and best.bw_inter_GBps < 2 * best.bw_intra_GBps:  # pass 2
        j -= 1
        if nodes > 1 and sys.nic_bw_GBps < speeds[j]:
            break
        best = Graph(best.channels, best.bw_intra_GBps, speeds[j])
    return best


def candidates(kind: str, sys: NcclSystem, ranks: int, nodes: int) -> list[tuple[str, str, float, float, int]]:
    """Every pair NCCL's tuning table would enable for ``kind`` on this system: (algorithm,
    protocol, latency in us, bandwidth in GB/s, channels), as ncclTopoTuneModel computes them,
    among the system's ``net_algorithms`` and ``net_protocols`` across nodes where it names them
    (NCCL_ALGO and NCCL_PROTO disable the rest before tuning)."""
    a_i = ARCHS.index(sys.arch)
    i2 = min(nodes, 3) - 1
    ll_row = a_i if nodes == 1 else (1 if sys.cpu == "amd" else 0)
    ll_max = LL_MAX_BW[ll_row][i2]
    ppn = ranks / nodes
    nsteps = 2 * (ranks - 1) if kind == "all_reduce" else ranks - 1
    algos = ["tree", "ring"] if kind == "all_reduce" else ["ring"]
    if sys.nvls and ppn > 1 and (nodes == 1 or kind == "all_reduce"):
        algos.append("nvls" if nodes == 1 else "nvls_tree")  # multi-node NVLS needs CollNet
    if kind != "all_reduce" and ppn == 1:
        algos.append("pat")  # PAT: one GPU per node only (ncclPatEnable)
    algos_allowed, protos_allowed = (sys.net_algorithms, sys.net_protocols) if nodes > 1 else ((), ())
    if algos_allowed:
        algos = [a for a in algos if a in algos_allowed]
    intra_hw = "nvlink" if sys.intra == "nvlink" else "pci"
    net_us = sys.net_latency_s * 1e6
    net_overhead = 2.0 if sys.cpu == "amd" else 1.0
    out = []
    for a in algos:
        g = search_graph(sys, round(ppn), nodes, a)
        for p_i, p in enumerate(PROTOS):
            if a in ("nvls", "nvls_tree", "pat") and p != "Simple":
                continue
            if protos_allowed and p not in protos_allowed:
                continue
            if p == "LL128" and sys.intra != "nvlink":  # LL128 needs typeIntra <= NVB
                continue
            bw = g.bw_intra_GBps if nodes <= 2 else g.bw_inter_GBps
            if a in ("nvls", "nvls_tree"):
                if g.channels < 2:
                    continue
                eff = NVLS_EFFICIENCY[a_i] * g.bw_intra_GBps * (g.channels - 1) / g.channels
                eff *= 2.0 if kind == "all_reduce" else (ppn - 1) / ppn
                inter = g.bw_inter_GBps * (2 if nodes <= 2 and a == "nvls_tree" else 1)
                bw = min(eff, inter, NVLS_TREE_PER_CH[a_i][i2] if a == "nvls_tree" else math.inf)
            bus = g.channels * bw
            if a == "ring" and p == "LL":
                bus = min(ll_max, bus * 0.5)
            if a == "ring" and p == "LL128":
                bus = min(bus * 0.92, g.channels * RING_LL128_PER_CH[a_i][i2])
            if a == "tree":
                bus = min(bus * 0.92, g.channels * TREE_PER_CH[a_i][i2])
                if p == "LL":
                    bus = min(bus / 3.8, ll_max)
                if p == "LL128":
                    bus = min(bus * (7 / 9 if nodes == 1 else 120 / 128), g.channels * TREE_LL128_PER_CH[a_i][i2])
            if a == "pat":
                bus *= 0.75
            if a in ("ring", "nvls", "nvls_tree"):
                if not (a != "ring" and kind != "all_reduce"):
                    bus *= ranks / nsteps  # bus bandwidth -> algorithm bandwidth
            elif kind == "all_reduce":
                bus *= 0.5
            lat = BASE_LAT_US[a][p_i]
            intra_lat = HW_LAT_US[intra_hw][a][p_i]
            # the network's latency on every inter-node step, twice for Simple ("the flush extra latency")
            inter_lat = HW_LAT_US["net"]["tree" if ppn == 1 else a][p_i] + net_us * (2 if p == "Simple" else 1)
            if a == "ring":
                intra_lat = max(intra_lat, (net_overhead * (3 if p == "Simple" else 1)) if nodes > 1 else 0.0)
                n_inter = 0 if nodes == 1 else (2 * (nodes - 1) if kind == "all_reduce" else nodes - 1)
                lat += (nsteps - n_inter) * intra_lat + n_inter * inter_lat
            elif a == "tree":
                lat += 2 * ((ranks // nodes - 1) * intra_lat + int(math.log2(nodes)) * inter_lat)
            elif a == "nvls":
                lat = intra_lat + (inter_lat if nodes > 1 else 0.0)
            elif a == "nvls_tree":
                lat += intra_lat + 2 * int(math.log2(nodes)) * inter_lat
            elif a == "pat":
                lat += int(math.log2(nodes)) * (inter_lat / 3.5) + ranks * 2.8
            out.append((a, p, lat, bus, g.channels))
    return out


def nccl_time(kind: str, size_bytes: float, ranks: int, nodes: int, sys: NcclSystem) -> tuple[Choice, list[Choice]]:
    """The cheapest pair for ``size_bytes`` (NCCL's nBytes: V for all_reduce, all_gather and
    reduce_scatter; for all_to_all each GPU's buffer, V / ranks) and every pair priced."""
    if ranks <= 1:
        return Choice("none", 0.0, 0.0, math.inf, 0), []
    if kind == "all_to_all":
        return _p2p(size_bytes, ranks, nodes, sys)
    priced = []
    pairs = candidates(kind, sys, ranks, nodes)
    if not pairs:  # NCCL fails the call the same way: nothing left to run it with
        raise ValueError(
            f"{kind}: NCCL_ALGO {','.join(sys.net_algorithms) or 'any'} and NCCL_PROTO "
            f"{','.join(sys.net_protocols) or 'any'} "
            "leave no algorithm NCCL runs it with across nodes"
        )
    for a, p, lat, bw, ch in pairs:
        if bw <= 0:
            continue
        log_size = int(math.log2(size_bytes / 64)) if size_bytes >= 64 else -1  # log2i(nBytes >> 6)
        if a == "tree" and 0 <= log_size < 23:
            bw *= TREE_CORRECTION[PROTOS.index(p)][log_size]
        ring_ch = search_graph(sys, ranks // nodes, nodes).channels
        if (
            a == "ring"
            and p == "Simple"
            and nodes > 1
            and kind == "all_reduce"
            and size_bytes / (ring_ch * ranks) >= 64
        ):
            lat *= 1.4 if sys.arch != "volta" else 1.9  # "plateau effect of ring"
        t_us = lat + size_bytes / (1000 * bw)
        priced.append(Choice(f"{a}/{p}", t_us * 1e-6, lat * 1e-6, bw, ch))
    return tuner_pick(sys, kind, size_bytes, ranks, nodes, priced) or min(priced, key=lambda c: c.time_s), priced


def tuner_pick(
    sys: NcclSystem, kind: str, size_bytes: float, ranks: int, nodes: int, priced: list[Choice]
) -> Choice | None:
    """The priced pair the system's tuner plugin makes NCCL run (it sets that pair's cost to 0:
    NCCL runs it, at NCCL's own price; :mod:`analysis.book.ofi_tuner`); None where there is no
    tuner or its regions leave the choice to NCCL."""
    if not sys.tuner:
        return None
    pair = region_pair(sys.tuner, kind, size_bytes, ranks, nodes, {c.name for c in priced})
    return next((c for c in priced if c.name == pair), None)


def _p2p(size_bytes: float, ranks: int, nodes: int, sys: NcclSystem) -> tuple[Choice, list[Choice]]:
    """all_to_all as NCCL runs it, send/recv to every peer at once (module docstring)."""
    g = search_graph(sys, ranks // nodes, 1)
    hw = "nvlink" if sys.intra == "nvlink" else "pci"
    lat_us = (BASE_LAT_US["ring"][2] + HW_LAT_US[hw]["ring"][2], BASE_LAT_US["ring"][2] + HW_LAT_US["net"]["ring"][2])
    return p2p_choice(
        size_bytes, ranks, nodes, g.channels * g.bw_intra_GBps, sys.nics_per_node * sys.nic_bw_GBps, lat_us, g.channels
    )


def p2p_choice(
    size_bytes: float,
    ranks: int,
    nodes: int,
    intra_GBps: float,
    node_nics_GBps: float,
    lat_us: tuple[float, float],
    channels: int = 0,
) -> tuple[Choice, list[Choice]]:
    """all_to_all as grouped send/recv to every peer at once, NCCL's and RCCL's alike: each GPU's
    buffer's share for its node's peers over its intra-node links (``intra_GBps``), the rest over
    its share of the node's NICs (``node_nics_GBps``), whichever is slower, after one pipelined
    Ring/Simple step (``lat_us``: inside one node, across nodes)."""
    ppn = ranks // nodes
    t = size_bytes * (ppn - 1) / ranks / (1000 * intra_GBps)
    lat = lat_us[0]
    bw_GBps = intra_GBps * ranks / (ppn - 1) if ppn > 1 else math.inf
    if nodes > 1:
        nic_per_gpu_GBps = node_nics_GBps / ppn
        t_net = size_bytes * (ranks - ppn) / ranks / (1000 * nic_per_gpu_GBps)
        lat = lat_us[1]
        if t_net >= t:
            t, bw_GBps = t_net, nic_per_gpu_GBps * ranks / (ranks - ppn)
    c = Choice("p2p/Simple", (lat + t) * 1e-6, lat * 1e-6, bw_GBps, channels)
    return c, [c]
