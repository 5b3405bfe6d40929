"""``python -m analysis profile LOGDIR``: what each collective of a profiled program cost.

LOGDIR is a shardlab run folder (its trace, compiled HLO and mesh are used), or what
``jax.profiler.start_trace(LOGDIR)`` wrote (``plugins/profile/<session>/
<host>.xplane.pb``, one file per host; the newest session is read), a session folder, or one
``.xplane.pb``. The HLO names the collectives and sizes them; it comes from ``--hlo`` (an
``--xla_dump_to`` folder, whose ``*after_optimizations.txt`` modules are matched to the
trace's modules by name, or a ``compiled.as_text()`` file) or, without it, from the profile
itself: xprof's xplane keeps each compiled module as an ``HloProto`` (stat ``Hlo Proto`` on
the ``/host:metadata`` plane, which jax writes by default, ``ProfileOptions.enable_hlo_proto``),
and jaxlib prints it back as HLO text. Example::

    python -m analysis profile /tmp/logdir --mesh X=4,Y=2 --hardware tpu_v5e --topology 4x2

Writes ``collectives.csv``, ``categories.csv``, ``steps.csv``, ``index.html`` and ``report.md``
to ``--out`` (default ``LOGDIR/profile_report``) and prints the top collectives; a program
whose HLO holds none (a one-device step, say) gets its step's time by op category instead, as
XProf's op profile groups it (``--json``: both tables as JSON). Bad input: one line
``error: ...`` on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from analysis.book.collective_cost import placed_group, predict_collective
from analysis.book.collectives import BY_HLO, V_from_hlo
from analysis.book.errors import BookError
from analysis.book.placement import Placement, from_topology
from analysis.book.topology import parse_layout
from analysis.book.units import fmt_bandwidth, fmt_bytes, fmt_duration, fmt_pct
from analysis.cli.json_out import versioned
from analysis.cli.options import (
    add_constant_arguments,
    fail,
    hardware_from_args,
    parse_mesh,
)
from analysis.runs.rundir import RESULT_NAME, point_dirs, point_file, read_result

_HEADER = re.compile(r"^\s*HloModule\s+([^\s,]+)", re.MULTILINE)
_DUMP = re.compile(r"^module_(\d+)\.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``profile`` command's options."""
    parser.add_argument("logdir", help="jax.profiler's log folder, a session folder, or one .xplane.pb")
    parser.add_argument(
        "--hlo",
        default=None,
        help="an --xla_dump_to folder or a compiled.as_text() file (default: the HLO the profile carries)",
    )
    parser.add_argument(
        "--mesh",
        default=None,
        help="the program's mesh, e.g. X=4,Y=2 (logical device ids in mesh "
        "order): names the axes each collective's groups span",
    )
    parser.add_argument(
        "--hardware",
        default=None,
        help="predict each collective with the book's model on this "
        "hardware (conf/hardware name or YAML path); cpu needs --link-bw-bidir-Bps and --hop-latency-s",
    )
    parser.add_argument("--topology", default=None, help="physical shape (8x16) or nodes=2,gpus_per_node=8 / slices=2")
    parser.add_argument("--out", default=None, help="output folder (default LOGDIR/profile_report)")
    parser.add_argument("--json", action="store_true", help="print the per-collective table as JSON")
    add_constant_arguments(parser, flops=False)


def _predictor(args, hw, mesh, physical: dict | None = None):
    """``predict(c, axes)`` for :func:`analysis.profiling.profile.hlo_table`: over the mesh axes the
    groups span when ``--mesh`` names them, else the group as one axis (as ``analysis hlo``).
    On a torus, the mesh axes lie on the physical axes the run recorded (``physical``, from
    its devices) or a slice ``--topology`` implies (mesh axes take its axes in order)."""
    from analysis.cli.hlo import predict as predict_group

    multi = args.topology is not None and parse_layout(args.topology).kind != "shape"
    place = None
    if hw.interconnect == "torus" and mesh and not multi:
        if args.topology is not None:  # the user's hardware, which the run may not have been on
            place = from_topology(mesh, list(parse_layout(args.topology).shape), args.topology)
        elif physical and set(physical.get("axes") or {}) == set(mesh):
            place = Placement.from_dict(physical)

    def predict(c, axes):
        try:
            if axes and not multi and c.kind in BY_HLO:
                where = placed_group(hw, place, axes) if place else {"axis_sizes": [mesh[a] for a in axes]}
                p = predict_collective(
                    BY_HLO[c.kind].op, V_from_hlo(c.kind, c.operand_bytes, c.result_bytes, c.group_size), hw=hw, **where
                )
                return {"model_time_s": p.time_s, "model_note": f"{p.regime}-bound, {p.topology} over {','.join(axes)}"}
            p = predict_group(c, hw, args.topology)
        except BookError as err:
            return {"model_time_s": math.nan, "model_note": f"no model: {err}"}
        if p is None:
            return {"model_time_s": math.nan, "model_note": "no model for this collective"}
        return {"model_time_s": p["model_time_s"], "model_note": f"{p['regime']}-bound, group as one axis"}

    return predict


def _top_lines(table, limit: int = 10) -> list[str]:
    cols = ["name", "kind", "mesh_axes", "V", "runs/step", "median", "p90", "share", "hidden", "busbw", "meas/model"]
    rows = []
    for r in table.head(limit).itertuples():
        share = f"{r.step_share:.1%}" if r.step_share == r.step_share else ""
        hidden = f"{r.hidden_frac:.0%}" if r.hidden_frac == r.hidden_frac else ""
        ratio = f"{r.measured_over_model:.3g}x" if r.measured_over_model == r.measured_over_model else ""
        runs = f"{r.executions_per_step:g}" if r.executions_per_step == r.executions_per_step else "0"
        rows.append(
            [
                r.name,
                r.kind,
                r.mesh_axes,
                fmt_bytes(r.V_bytes),
                runs,
                fmt_duration(r.time_median_s),
                fmt_duration(r.time_p90_s),
                share,
                hidden,
                fmt_bandwidth(r.busbw_Bps),
                ratio,
            ]
        )
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c) for i, c in enumerate(cols)]
    return [
        "  ".join(v.ljust(w) if i < 3 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths))).rstrip()
        for row in [cols] + rows
    ]


def _category_lines(categories) -> list[str]:
    """One module's time by op category as printed: a row per category, then all ops."""
    cols = ["category", "ops", "runs/step", "per step", "share", "top op", "holds", "of category"]
    rows = [
        [
            r.category,
            f"{r.ops:d}",
            f"{r.executions_per_step:.3g}",
            fmt_duration(r.time_per_step_s),
            fmt_pct(r.share, 1),
            str(r.top_op),
            str(r.top_op_holds or ""),
            fmt_pct(r.top_op_share, 0),
        ]
        for r in categories.itertuples()
    ]
    total = categories["time_per_step_s"].sum()
    runs = categories["executions_per_step"].sum()
    rows.append(["all ops", f"{categories['ops'].sum():d}", f"{runs:.3g}", fmt_duration(total), fmt_pct(1.0, 1)])
    rows = [row + [""] * (len(cols) - len(row)) for row in rows]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    return [
        "  ".join(v.ljust(w) if i in (0, 5, 6) else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths))).rstrip()
        for row in [cols] + rows
    ]


def sweep_folder_hint(root: Path, show: int = 3) -> str:
    """One line for ``profile SWEEP``: it takes one run folder; which of the sweep's were traced."""
    runs = point_dirs(root)
    traced = [d for d in runs if read_result(d).files.get("xplane")]
    if not traced:
        return f"{root} is a sweep folder and none of its {len(runs)} runs has a trace (trace.enabled=false?)"
    more = f" (and {len(traced) - show} more)" if len(traced) > show else ""
    names = ", ".join(str(d) for d in traced[:show]) + more
    return f"{root} is a sweep folder: pass one of its run folders, one profile each: {names}"


@dataclass(frozen=True)
class _Profiled:
    """What ``profile`` read and found: the analysis, and where its inputs came from."""

    found: object  # analysis.profiling.profile_load's result: tables, steps, ops, devices
    xplanes: list
    hlo_source: str
    hw: object  # the Hardware to predict with, or None
    slowdown: float | None  # traced step / untraced step, known where the folder is a shardlab run's


def _run_folder(logdir: Path, args: argparse.Namespace, mesh):
    """A shardlab run folder's trace, its mesh (``mesh`` where given), where its mesh axes lay
    and the profiler's slowdown; ``args.hlo`` defaults to its compiled HLO. ValueError for a
    run that failed or has no trace."""
    run = read_result(logdir)
    if not run.ok:
        raise ValueError(f"{logdir}: the run failed ({run.error}); nothing to profile")
    xplanes = [point_file(run, "xplane")] if run.files.get("xplane") else []
    if not xplanes:
        raise ValueError(f"{logdir}: the run has no trace (trace.enabled=false?)")
    args.hlo = args.hlo or str(point_file(run, "hlo_compiled"))
    return xplanes, mesh or run.spec.mesh.axes, run.spec.mesh.physical, run.trace.profiler_slowdown


def _profile(args: argparse.Namespace, logdir: Path) -> _Profiled:
    """Read ``logdir`` (module docstring) and analyse it; OSError, ValueError, TraceError,
    HloParseError or BookError for bad input."""
    from analysis.profiling.profile_load import analyse, find_xplanes, load_hlo

    slowdown = None
    if not logdir.exists():
        raise ValueError(f"{logdir} does not exist")
    if args.topology is not None and args.hardware is None:
        raise BookError("--topology goes with --hardware")
    mesh = parse_mesh(args.mesh) if args.mesh else None
    physical = None  # where a run's mesh axes lay on the physical axes (TPU), as it recorded
    hw = hardware_from_args(args) if args.hardware else None
    if (logdir / RESULT_NAME).is_file():  # a shardlab run folder: its trace, HLO and mesh
        xplanes, mesh, physical, slowdown = _run_folder(logdir, args, mesh)
    elif logdir.is_dir() and any(logdir.glob(f"*/{RESULT_NAME}")):
        # a sweep folder: its points' traces are programs of different sizes, one profile each
        raise ValueError(sweep_folder_hint(logdir))
    else:
        xplanes = find_xplanes(logdir)
    texts, hlo_source = load_hlo(args.hlo, xplanes)
    predict = _predictor(args, hw, mesh, physical) if hw is not None else None
    return _Profiled(analyse(xplanes, texts, mesh, predict), xplanes, hlo_source, hw, slowdown)


def _print_categories(steps, categories, ndev: int) -> None:
    """Per module without collectives: its step, then its time by op category."""
    for module, s in steps.groupby("hlo_module"):
        # means, as the categories are (they add up to the ops' time; medians would not)
        print(
            f"{module}: {s['step'].nunique()} steps on {ndev} devices, step {fmt_duration(s['step_s'].mean())} "
            f"(mean), its ops {fmt_duration(s['busy_s'].mean())}; no collectives (its HLO holds none). "
            "Time by op category, as XProf's op profile groups it (mean per step and device):"
        )
        print("\n".join(_category_lines(categories[categories["hlo_module"] == module])))


def _print_collectives(summary, table, ndev: int) -> None:
    """Per module its median step, then the top collectives and the notes of those without a model."""
    for module, s in summary.groupby("hlo_module"):
        print(
            f"{module}: {len(s)} steps on {ndev} devices, step {fmt_duration(s['step_s'].median())} "
            f"(collectives {fmt_duration(s['collective_s'].median())}, exposed {fmt_duration(s['exposed_s'].median())})"
        )
    print("\n".join(_top_lines(table)))
    for note in sorted({n for n in table["model_note"] if str(n).startswith("no model:")}):
        print(f"note: {note}")


def main(args: argparse.Namespace) -> int:
    """Run ``profile``; 0 on success, 2 on bad input."""
    from analysis.hlo import HloParseError
    from analysis.profiling import profile as prof
    from analysis.trace import TraceError

    logdir = Path(args.logdir)
    try:
        got = _profile(args, logdir)
    except (OSError, ValueError, TraceError, HloParseError, BookError) as err:
        return fail(str(err).splitlines()[0] if str(err) else type(err).__name__)
    found, hw = got.found, got.hw
    table, steps, ops, ndev, on_cpu = found.table, found.steps, found.ops, found.devices, found.on_cpu
    out = Path(args.out) if args.out else (logdir if logdir.is_dir() else logdir.parent) / "profile_report"
    from analysis.report.profile_report import write_profile_report

    info = {
        "logdir": str(logdir),
        "xplanes": [str(p) for p in got.xplanes],
        "hlo_source": got.hlo_source,
        "devices": ndev,
        "mesh": args.mesh,
        "hardware": hw.name if hw else None,
        "topology": args.topology,
        "cpu": on_cpu,
        "profiler_slowdown": got.slowdown,
    }
    try:
        write_profile_report(out, table, steps, ops, info, found.categories)
    except OSError as err:
        return fail(f"cannot write {out}: {err.strerror or err}")
    if args.json:
        records = json.loads(table.to_json(orient="records"))
        by_category = json.loads(found.categories.to_json(orient="records"))
        body = {"logdir": str(logdir), "collectives": records, "categories": by_category}
        print(json.dumps(versioned("profile", body), indent=1))
        return 0
    summary = prof.step_summary(steps)
    if table.empty:  # the HLO holds no collective: where each step's time went, by op category
        _print_categories(steps, found.categories, ndev)
        print(f"HLO from {got.hlo_source}; wrote {out}/index.html, report.md, categories.csv, steps.csv")
        return 0
    _print_collectives(summary, table, ndev)
    print(f"HLO from {got.hlo_source}; wrote {out}/index.html, report.md, collectives.csv, steps.csv")
    return 0
