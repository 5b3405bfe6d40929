"""What every figure of a report shares: the headless backend, the page width, axes in human
units (V in KiB/MiB on log2, times in us/ms, bandwidths in GB/s), panels of small multiples
and the legend below the data. The figures themselves are :mod:`.sweep_figures`,
:mod:`.compare_figures`, :mod:`.matmul_figures` and the sections that draw their own.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # reports are written headless, from a sweep's end or a CI job
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogFormatter, LogLocator  # noqa: E402

from analysis.book.units import fmt_bytes, fmt_duration  # noqa: E402
from analysis.runs.rundir import atomic_path  # noqa: E402

MAX_FAMILIES = 2  # more families than this (each with measured, fit, model): one panel each
WIDTH_IN, DPI = 11.0, 110  # 1210 px: fits a 1280-px page


def error_bars(mid, lo, hi) -> np.ndarray:
    """``yerr`` for ``ax.errorbar``: the distances from ``mid`` down to ``lo`` and up to ``hi``,
    as a plain 2xN array (matplotlib 3.8 calls float() on a pandas Series, which pandas 2.2
    deprecates with a warning on every report)."""
    mid, lo, hi = (np.asarray(v, dtype=float) for v in (mid, lo, hi))
    return np.vstack([mid - lo, hi - mid])


def bytes_axis(ax) -> None:
    """x: V on a log2 scale, ticks in binary units (1 KiB, 1 MiB ...)."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=4))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_bytes(v).replace(".0 ", " ") if v > 0 else ""))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda *_: ""))
    ax.set_xlabel("V, the book's bytes (binary units)")


class _HumanLog(LogFormatter):
    """matplotlib's log-axis labelling (which ticks get a label: decades, and some minor ticks
    when the axis spans less than a decade or two), with our units instead of 1.5x10^9."""

    def __init__(self, one):
        super().__init__(labelOnlyBase=False)
        self._one = one

    def _num_to_string(self, x, vmin, vmax):
        return self._one(x) if x > 0 else ""


def human_log_labels(axis, one) -> None:
    """Label a log axis's major and (on a narrow axis) minor ticks with ``one(value)``."""
    axis.set_major_formatter(_HumanLog(one))
    axis.set_minor_formatter(_HumanLog(one))


def log_y_axis(ax, label: str, one) -> None:
    """y on a log scale, labelled by ``one``."""
    ax.set_yscale("log")
    human_log_labels(ax.yaxis, one)
    ax.set_ylabel(label)


def time_axis(ax, label: str) -> None:
    """y: seconds on a log scale, labelled in us/ms/s."""
    log_y_axis(ax, label, fmt_duration)


def gbps_axis(ax, label: str) -> None:
    """y: bytes per second on a log scale, labelled in GB/s."""
    log_y_axis(ax, label, lambda v: f"{v / 1e9:.3g}")


def panels(families: list[str], title: str):
    """One axes for up to MAX_FAMILIES families, else a grid of small multiples."""
    if len(families) <= MAX_FAMILIES:
        fig, ax = plt.subplots(figsize=(WIDTH_IN, 5.0))
        return fig, {f: ax for f in families}
    cols = 2
    rows = math.ceil(len(families) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(WIDTH_IN, 3.2 * rows), sharex=True, squeeze=False)
    for ax in axes.flat[len(families) :]:
        ax.set_visible(False)
    for fam, ax in zip(families, axes.flat):
        ax.set_title(fam, fontsize=8)
    fig.suptitle(title)
    return fig, dict(zip(families, axes.flat))


def finish(fig, axes: dict, title: str, path: Path) -> Path:
    """Title, one legend below the data (styles only when panels name their family), and the PNG
    written whole or not at all."""
    first = next(iter(axes.values()))
    faceted = len(set(map(id, axes.values()))) > 1
    if not faceted:
        first.set_title(title)
    handles, labels = [], []
    for fam, ax in axes.items():
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if faceted:  # each panel names its family: the legend needs only the styles
                lab = lab.removeprefix(f"{fam}: ")
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:  # outside the data: below the axes
        fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=7, frameon=False)
        rows = math.ceil(len(labels) / 3)
        fig.tight_layout(rect=(0, 0.035 * rows + 0.02, 1, 1))
    else:
        fig.tight_layout()
    with atomic_path(path) as tmp:  # whole or not at all: a full disk leaves no stub
        fig.savefig(tmp, dpi=DPI)
    plt.close(fig)
    return path


def family_colors(families) -> dict:
    """One colour per family, in order (seaborn's tab10)."""
    return dict(zip(families, sns.color_palette("tab10", n_colors=max(len(families), 1))))
