"""The report of ``python -m analysis profile``: the tables of :mod:`analysis.profiling.profile` in
human units, a timeline of one step, and the CSVs behind them (rendering and writing only).

The reader wants to know where the step's communication went: so the top collectives by
time per step come first, then the step's split into compute, hidden and exposed
communication, then one step drawn per device (is the communication lane under a compute
bar, or alone?), and last every collective with its groups, bytes and the model's word.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # written headless
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from analysis.book.units import fmt_bandwidth, fmt_bytes, fmt_duration, fmt_pct
from analysis.profiling.op_categories import CATEGORY_COLUMNS
from analysis.profiling.profile import step_summary, timeline, typical_step
from analysis.report.axes import DPI, WIDTH_IN
from analysis.report.document import Report
from analysis.runs.rundir import atomic_path, write_text_atomic

MAX_DEVICES_DRAWN = 16  # more lanes than this no longer read at 5 inches
TOP = 10


def _human(table: pd.DataFrame, full: bool) -> pd.DataFrame:
    """The per-collective table in human units (``full``: with groups, bytes and the note)."""
    out = pd.DataFrame(
        {
            "collective": table["name"],
            "kind": table["kind"],
            "mesh axes": table["mesh_axes"],
            "V": table["V_bytes"].map(fmt_bytes),
            "runs/step": table["executions_per_step"].fillna(0),
            "median": table["time_median_s"].map(fmt_duration),
            "p90": table["time_p90_s"].map(fmt_duration),
            "per step": table["time_per_step_s"].map(fmt_duration),
            "share of step": table["step_share"].map(lambda v: fmt_pct(v, 1)),
            "hidden": table["hidden_per_step_s"].map(fmt_duration),
            "exposed": table["exposed_per_step_s"].map(fmt_duration),
            "busbw": table["busbw_Bps"].map(fmt_bandwidth),
            "model": table["model_time_s"].map(fmt_duration),
            "measured/model": table["measured_over_model"].map(lambda r: "" if pd.isna(r) else f"{r:.3g}x"),
        }
    )
    # chips on their own clocks (TPU, GPU): no figure across devices; measured/model from the
    # median device time, an estimate that includes waiting for the last arrival
    apart = table.get("arrival_comparable", pd.Series(True, index=table.index)).eq(False)
    out.loc[apart & table["measured_over_model"].notna(), "measured/model"] += " (device time)"
    if full:
        out.insert(1, "module", table["hlo_module"])
        out["operand"] = table["operand_bytes"].map(fmt_bytes)
        out["result"] = table["result_bytes"].map(fmt_bytes)
        out["groups"] = table["replica_groups"].map(lambda g: g if len(str(g)) <= 60 else str(g)[:57] + "...")
        out["arrival skew"] = table["arrival_skew_s"].map(fmt_duration)
        out["after arrival"] = table["time_after_arrival_s"].map(fmt_duration)  # last start -> last end
        out["with waiting"] = table["time_with_waiting_s"].map(fmt_duration)  # first start -> last end
        out.loc[apart, ["arrival skew", "after arrival", "with waiting"]] = "n/a (chips' clocks differ)"
        out["model note"] = table["model_note"]
    return out


def _steps_human(summary: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "module": summary["hlo_module"],
            "step": summary["step"],
            "devices": summary["devices"],
            "step time": summary["step_s"].map(fmt_duration),
            "compute": summary["compute_s"].map(fmt_duration),
            "collectives": summary["collective_s"].map(fmt_duration),
            "hidden": summary["hidden_s"].map(fmt_duration),
            "exposed": summary["exposed_s"].map(fmt_duration),
            "idle": summary["idle_s"].map(fmt_duration),
            "exposed share": (summary["exposed_s"] / summary["step_s"]).map(lambda v: fmt_pct(v, 1)),
        }
    )


def timeline_figure(rows: pd.DataFrame, path: Path, title: str) -> Path:
    """One step, two lanes per device (compute above, communication below), x in time since
    the step began; collectives coloured by kind, compute grey."""
    devices = sorted(rows["device"].unique())[:MAX_DEVICES_DRAWN]
    kinds = sorted(k for k in rows["label"].unique() if k != "compute")
    colors = {"compute": "0.6", **dict(zip(kinds, sns.color_palette("tab10", n_colors=max(len(kinds), 1))))}
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 5.0))
    for y, dev in enumerate(devices):
        d = rows[rows["device"] == dev]
        for lane, dy in (("compute", -0.2), ("communication", 0.2)):
            for label, g in d[d["lane"] == lane].groupby("label"):
                ax.broken_barh(
                    list(zip(g["start_s"], g["end_s"] - g["start_s"])),
                    (y + dy - 0.17, 0.34),
                    facecolors=colors[label],
                    edgecolor="none",
                )
    ax.set_yticks(range(len(devices)), [f"device {d}" for d in devices], fontsize=7)
    ax.invert_yaxis()
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_duration(v) if v > 0 else "0"))
    ax.set_xlabel("time since the step began (per device: upper bar compute, lower bar communication)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    handles = [Patch(color=colors[k], label=k) for k in ["compute", *kinds]]
    fig.legend(handles=handles, loc="lower center", ncol=min(6, len(handles)), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    with atomic_path(path) as tmp:  # whole or not at all
        fig.savefig(tmp, dpi=DPI)
    plt.close(fig)
    return path


def slowdown_words(slowdown: float | None) -> str:
    """What the profiler did to this trace's step, as measured (traced step / untraced step of
    the same run), or that this trace alone cannot tell."""
    if slowdown is None or not slowdown == slowdown:
        return (
            "the profiler slows ops on the CPU backend by a factor this trace alone cannot tell (a shardlab run "
            "folder measures it: traced step / untraced step)"
        )
    return f"the profiler slowed this run's step {slowdown:.3g}x (traced step / untraced step, measured)"


def _categories_human(categories: pd.DataFrame) -> pd.DataFrame:
    """The time by op category (:func:`analysis.profiling.op_categories.category_table`) in human units."""
    return pd.DataFrame(
        {
            "module": categories["hlo_module"],
            "category": categories["category"],
            "ops": categories["ops"],
            "runs/step": categories["executions_per_step"],
            "per step": categories["time_per_step_s"].map(fmt_duration),
            "share": categories["share"].map(lambda v: fmt_pct(v, 1)),
            "top op": categories["top_op"],
            "holds": categories["top_op_holds"].fillna(""),
            "top op's share": categories["top_op_share"].map(fmt_pct),
        }
    )


def _introduction(r: Report, info: dict) -> None:
    """Where the inputs came from and what a step, hidden and exposed mean; a CPU trace's caveat."""
    r.text(
        f"Trace: {', '.join(f'`{p}`' for p in info['xplanes'])}; HLO from {info['hlo_source']}; "
        f"{info['devices']} devices" + (f", mesh {info['mesh']}" if info.get("mesh") else "") + ". "
        "A step is one execution of the module on a device, from its first op's start to its last op's end. "
        "Hidden = collective time during which the same device also computed; exposed = the rest; "
        "times per step are medians over devices and steps."
    )
    if info.get("cpu"):
        r.banner(
            "incomplete",
            f"CPU trace: {slowdown_words(info.get('profiler_slowdown'))}, and a "
            "device's collective time includes waiting for the last device to arrive (`arrival skew`). "
            "Use these times to attribute a step, and untraced runs for absolute times.",
        )


def _without_collectives(r: Report, summary: pd.DataFrame, categories: pd.DataFrame | None) -> None:
    """No collective to hold against the model: where the step's time went instead."""
    r.heading("Time by op category")
    r.text(
        "The HLO holds no collective: the step's time by op category instead, as XProf's op profile groups "
        "it (the category a TPU trace carries, else XLA's for the compiled instruction), each op's own time "
        "(nested ops left out) as a mean per step and device; a module's categories add up to its ops' time "
        "per step. `holds`: the dot or convolution a fusion runs, or a custom call's target."
    )
    r.table(_categories_human(categories if categories is not None else pd.DataFrame(columns=CATEGORY_COLUMNS)))
    r.heading("Steps")
    r.table(_steps_human(summary))


def _model_words(info: dict) -> str:
    """Which model the collectives are held against, or how to get one."""
    if info.get("hardware"):
        return (
            f"Model: the book's prediction on `{info['hardware']}`"
            + (f", topology `{info['topology']}`" if info.get("topology") else "")
            + "; V is the gathered result (all-gather), the unreduced operand (reduce-scatter, all-reduce), "
            "operand x group size (all-to-all). Bus bandwidth follows nccl-tests."
        )
    return "No model: pass `--hardware` (and for `cpu`, `--link-bw-bidir-Bps` and `--hop-latency-s`)."


def _timeline_section(r: Report, ran: pd.DataFrame, table: pd.DataFrame, steps, ops, out: Path) -> None:
    """The median step of the module whose collectives take longest, drawn per device."""
    module = ran.groupby("hlo_module")["time_per_step_s"].sum().idxmax()
    step = typical_step(steps, module)
    rows = timeline(ops, module, step, dict(zip(table["name"], table["kind"])))
    ndev = rows["device"].nunique()
    fig = timeline_figure(
        rows,
        out / "timeline.png",
        f"{module}, step {step} (the median step)"
        + (f", first {MAX_DEVICES_DRAWN} of {ndev} devices" if ndev > MAX_DEVICES_DRAWN else ""),
    )
    r.heading("Timeline of one step")
    r.figure(fig, f"{module} step {step}: compute and communication per device")


def write_profile_report(
    out: Path,
    table: pd.DataFrame,
    steps: pd.DataFrame,
    ops: pd.DataFrame,
    info: dict,
    categories: pd.DataFrame | None = None,
) -> Path:
    """Write ``collectives.csv``, ``categories.csv`` (with ``categories``), ``steps.csv``,
    ``timeline.png``, ``report.md`` and ``index.html`` to ``out``; return the HTML's path.
    ``info`` says where the inputs came from (logdir, xplanes, hlo_source, devices, mesh,
    hardware, topology, cpu). A program without collectives (``table`` empty) gets its time by
    op category in their place."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "collectives.csv", table.to_csv(index=False))
    if categories is not None:
        write_text_atomic(out / "categories.csv", categories.to_csv(index=False))
    write_text_atomic(out / "steps.csv", steps.to_csv(index=False))
    summary = step_summary(steps)
    r = Report(f"Profile: {info['logdir']}")
    _introduction(r, info)
    if table.empty:  # no collective to hold against the model: where the step's time went instead
        _without_collectives(r, summary, categories)
    else:
        r.text(_model_words(info))
        ran = table[table["executions"] > 0]
        r.heading("Top collectives by time per step")
        r.table(_human(ran.head(TOP), full=False))
        r.heading("Steps")
        r.table(_steps_human(summary))
        if categories is not None and len(categories):
            r.heading("Time by op category")
            r.text("Each op's own time as a mean per step and device, by the category XProf's op profile gives it.")
            r.table(_categories_human(categories))
        if len(ran):
            _timeline_section(r, ran, table, steps, ops, out)
        r.heading("Every collective")
        r.table(_human(table, full=True))
    write_text_atomic(out / "report.md", r.to_markdown(out))
    write_text_atomic(out / "index.html", r.to_html())
    return out / "index.html"
