"""The report's "Across processes" section (tables from :mod:`analysis.runs.processes`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.report import sweep_figures as figures
from analysis.report.document import Report
from analysis.runs.processes import placement_comparison, process_table
from analysis.runs.rundir import write_text_atomic
from analysis.sweep import Sweep

# Seen in the workers' logs (gloo connects the devices of in-process groups as well).
CPU_NOTE = (
    " On CPU, XLA runs every collective of a multi-process run through gloo over TCP, in-process "
    "groups too; on one machine the gap is the loopback's and the processes', not a network's."
)


def add_processes_section(rep: Report, sweep: Sweep, out: Path) -> None:
    """The report's "Across processes" section and ``across_processes.csv``; nothing for a
    sweep without multi-process points."""
    root, summary = sweep.root, sweep.summary
    table = process_table(sweep.results, summary)
    if table.empty:
        return
    write_text_atomic(root / "across_processes.csv", table.to_csv(index=False))
    rep.heading("Across processes")
    n = int(table["processes"].max())
    rep.text(
        f"{len(table)} point(s) ran as {n} JAX processes forming one mesh; each process traced its own "
        "devices and the traces are merged here (`across_processes.csv`). A group *crosses processes* "
        "when its devices belong to more than one process. Device spread: per iteration, the longest "
        "device's op time minus the shortest (clock-free). Arrival skew: last device start minus first "
        "(only when all processes ran on one host and so share a clock)."
    )
    cols = {
        "op": "op",
        "hlo_op": "collective",
        "axes": "axes",
        "V_bytes": "V (B)",
        "crosses_processes": "crosses processes",
        "time_s": "time (s)",
        "slowest_process_time_s": "slowest process (s)",
        "busbw_Bps": "busbw (B/s)",
        "traces_merged": "traces",
        "devices": "devices",
        "slowest_device": "slowest device",
        "slowest_process": "on process",
        "slowest_device_time_s": "its op time (s)",
        "median_device_time_s": "median device (s)",
        "device_spread_s": "device spread (s)",
        "arrival_skew_s": "arrival skew (s)",
    }
    shown = table[[c for c in cols if c in table]].copy()
    for c in ("slowest_device", "slowest_process", "V_bytes"):  # ids and bytes, not floats
        if c in shown:
            shown[c] = shown[c].map(lambda v: "" if pd.isna(v) else str(int(v)))
    rep.table(shown.rename(columns=cols))
    cmp = placement_comparison(table)
    if len(cmp):
        largest = cmp.loc[cmp.groupby(["op", "dtype", "group_size"])["V_bytes"].idxmax()]
        said = "; ".join(
            f"{r.op} of {r.V_bytes / 2**20:g} MiB over {r.group_size} devices took "
            f"{r.in_process_time_s:.3g} s within a process and {r.cross_process_time_s:.3g} s "
            f"across processes ({r.cross_over_in_time:.2f}x)"
            for r in largest.itertuples()
        )
        rep.text(
            f"In-process against cross-process groups of the same size, at the largest V: {said}."
            + (CPU_NOTE if (summary["backend"] == "cpu").any() else "")
        )
        rep.table(cmp.rename(columns={"V_bytes": "V (B)", "group_size": "devices/group"}))
        rep.figure(
            figures.placement(table, out / "across_processes.png"),
            "Bus bandwidth against V for groups within one process and groups across processes.",
        )
    else:
        rep.text(
            "No group size ran both within one process and across processes here, so there is no "
            "in-process against cross-process comparison: `python -m runner +sweep=cross_process_axes` "
            "runs one (mesh 2x2x2 with Z across the processes)."
        )
