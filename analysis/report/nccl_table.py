"""One family's table as nccl-tests prints it, column for column, and its closing line.

nccl-tests' ``common.cu`` prints per size ``max(sendBytes, expectedBytes)`` (the bytes of S,
what algbw divides) and ``nbytes / wordSize(type)``, where ``nbytes`` is the *paramcount* its
``*GetCollByteCount`` sets: the count one rank passes to the NCCL call. That is the per-rank
send count for AllGather (``count / nranks``), the per-rank receive count for ReduceScatter
(``count / nranks``), the whole per-rank buffer for AllReduce, and the per-peer chunk for
AllToAll (``count / nranks`` of a per-rank buffer of ``count``): so an AllGather of 1 KiB of
float32 over 8 devices prints 32, not 256. After the last size it prints
``# Avg bus bandwidth : <mean of every line's busbw in GB/s>``.
"""

from __future__ import annotations

import pandas as pd

from analysis.book.dtypes import NCCL_TESTS_TYPES, dtype_bytes

# shardlab's dtypes -> the names nccl-tests prints (float64 is "double", float16 "half")
NCCL_TYPES = {dtype: name for name, dtype in NCCL_TESTS_TYPES.items()}
# S over the count one rank passes, in elements: nranks for all but AllReduce (see the docstring)
_PER_RANK = {"all_gather": True, "reduce_scatter": True, "all_to_all": True, "all_reduce": False}


def nccl_count(op: str, S_bytes: float, group_size: int, dtype: str) -> int:
    """The count column of nccl-tests for one point: elements per rank (per peer for AllToAll)."""
    # bytes per element may be a fraction (int4: 0.5), so the division is not by whole bytes
    elems = int(S_bytes / dtype_bytes(dtype)[1])
    return elems // int(group_size) if _PER_RANK.get(op, False) and group_size else elems


def nccl_frame(g: pd.DataFrame) -> pd.DataFrame:
    """The rows of one family (sorted by V), in nccl-tests' columns and units."""
    size = g["S_bytes"].fillna(g["V_bytes"])
    return pd.DataFrame(
        {
            "size": size.astype("int64"),
            "count": [nccl_count(o, s, n, d) for o, s, n, d in zip(g["op"], size, g["group_size"], g["dtype"])],
            "type": g["dtype"].map(lambda d: NCCL_TYPES.get(d, d)),
            "redop": g["op"].map(lambda o: "sum" if o in ("all_reduce", "reduce_scatter") else "none"),
            "time (us)": (g["time_s"] * 1e6).map(lambda v: f"{v:.2f}"),
            "algbw (GB/s)": (g["algbw_Bps"] / 1e9).map(lambda v: f"{v:.2f}"),
            "busbw (GB/s)": (g["busbw_Bps"] / 1e9).map(lambda v: f"{v:.2f}"),
            "#wrong": g["checked"].map(lambda c: 0 if c else ""),
        }
    )


def avg_busbw_line(g: pd.DataFrame) -> str:
    """``# Avg bus bandwidth    : 1.23456`` (GB/s, ``%g`` as nccl-tests prints it): the mean of
    the family's lines' bus bandwidth, every size with a time (as nccl-tests, flagged ones too)."""
    bw = pd.to_numeric(g["busbw_Bps"], errors="coerce").dropna()
    if not len(bw):
        return "# Avg bus bandwidth    : (no size has a time)"
    return f"# Avg bus bandwidth    : {bw.mean() / 1e9:g} "
