"""The crossover between two matmul strategies (the chapter's Question 4) in a sweep: gather
then multiply (strategy 1) or multiply then AllReduce (strategy 2), side by side as a dim
grows, and where the winner changes: measured
(:func:`measured_crossover`) and in the book's model (:func:`model_crossover`). Tables only;
the report section is :mod:`analysis.report.matmul_section`."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.book.hardware import Hardware
from analysis.book.matmul_cost import compare_q4_strategies
from analysis.book.notation import parse
from analysis.runs.summary import dims_of

Q4_STRATEGIES = ("allgather_then_matmul", "matmul_then_allreduce")


def varying_dim(dims: pd.Series) -> str | None:
    """The one dim whose value differs across ``dims`` (the summary's ``dims`` strings), if one."""
    parsed = pd.DataFrame([dims_of(d) for d in dims])
    varying = [c for c in parsed if parsed[c].nunique() > 1]
    return varying[0] if len(varying) == 1 else None


def q4_table(points: pd.DataFrame) -> pd.DataFrame:
    """The two Question 4 strategies side by side per expression and dims, in order of the
    dim the sweep varies (``ratio 2/1`` < 1: multiply-then-AllReduce is faster)."""
    ok = points[(points["status"] == "ok") & points["strategy"].isin(Q4_STRATEGIES)]
    out = []
    for expr, g in ok.groupby("expr"):
        if set(g["strategy"]) != set(Q4_STRATEGIES):
            continue
        dim = varying_dim(g["dims"])
        piv = g.pivot_table(index="dims", columns="strategy", values="time_s", aggfunc="median").dropna()
        for dims, t in piv.iterrows():
            out.append(
                {
                    "expr": expr,
                    "dims": dims,
                    "dim": dim,
                    "value": dims_of(dims).get(dim) if dim else None,
                    "strategy1_s": t[Q4_STRATEGIES[0]],
                    "strategy2_s": t[Q4_STRATEGIES[1]],
                    "ratio_2_over_1": t[Q4_STRATEGIES[1]] / t[Q4_STRATEGIES[0]],
                }
            )
    df = pd.DataFrame(out, columns=["expr", "dims", "dim", "value", "strategy1_s", "strategy2_s", "ratio_2_over_1"])
    return df.sort_values(["expr", "value"]).reset_index(drop=True)


def measured_crossover(q4: pd.DataFrame) -> float | None:
    """The dim value where strategy 2 starts to win, interpolated in log space between the
    last value it lost and the first it won; None if the winner never changes."""
    r = q4["ratio_2_over_1"].to_numpy()
    v = q4["value"].to_numpy(dtype=float)
    for i in range(1, len(r)):
        if (r[i - 1] - 1) * (r[i] - 1) < 0:
            f = np.log(r[i - 1]) / (np.log(r[i - 1]) - np.log(r[i]))
            return float(np.exp(np.log(v[i - 1]) + f * (np.log(v[i]) - np.log(v[i - 1]))))
    return None


def model_crossover(expr: str, dims: dict, dim: str, mesh: dict, dtype: str, hw: Hardware) -> float | None:
    """Where the book's Question 4 model has strategy 2 start to win as ``dim`` grows: the
    first power of 2 (up to 2^24) at which the winner has changed, or None if it never does."""
    mm = parse(expr)
    B, F = (d.name for d in mm.out.dims)
    D = mm.contracting[0]
    X = mesh[mm.rhs.dim(D).axes[0]]
    prev = None
    for e in range(4, 25):
        d = dict(dims, **{dim: 2**e})
        w = compare_q4_strategies(d[B], d[D], d[F], X, hw, dtype).winner
        if prev is not None and w != prev:
            return float(2**e)  # the winner changed between 2**(e-1) and 2**e
        prev = w
    return None
