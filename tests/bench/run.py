"""Benchmark of shardlab itself: where a sweep's time goes, and shardlab against its peers.

    python tests/bench/run.py [--quick] [--json FILE] [--only trace]

Prints a table of figures; it never passes or fails on time. Ratios are measured side by
side in one run (this machine is noisy): compare them, not absolute times across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "helpers"))  # shardlab_cli: how the tests start shardlab
sys.path.insert(0, str(REPO / "tests" / "bench"))  # peer: the side-by-side with a minimal loop
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import breakdown  # noqa: E402
import peer  # noqa: E402
from trace_reading import print_trace_parsing, trace_parsing  # noqa: E402


def sweep_breakdown(work: Path, cache: Path, label: str) -> dict:
    """Run the default sweep as a user does, note when the first point's line appears, and
    split its wall time into its parts (every round of every point)."""
    from shardlab_cli import start

    out = work / f"sweep_{label}"
    t0 = time.time()
    proc = start("runner", "+sweep=allgather_sizes", f"hydra.sweep.dir={out}", env={"SHARDLAB_CACHE_DIR": str(cache)})
    first_result = None
    for line in proc.stdout:  # the console's one line per point: "[1/17] op.size_bytes=1KiB  ok ..."
        if first_result is None and re.match(r"\[\s*1/", line):  # "[ 1/17]": padded to the total
            first_result = time.time() - t0
    err = proc.stderr.read()
    total = time.time() - t0
    if proc.wait():
        raise RuntimeError(err[-3000:])
    rs = [json.loads(p.read_text()) for p in sorted(out.glob("*/result.json"))]
    parts = breakdown.parts(rs, total, t0, breakdown.report_s(out))
    # What the worker process costs a point: the parent's wall time for it minus the phases
    # the worker measured (IPC, pickling, the result record). Its start-up is paid once.
    isolation = [
        r["wall_s"] - sum(v for k, v in (r.get("phases_s") or {}).items() if not k.startswith("rounds_"))
        for r in rs
        if (r.get("worker") or {}).get("points_served", 1) > 1
    ]
    return {
        "label": label,
        "total_s": total,
        "points": len(rs),
        "rounds": sum(len(r["timing"]["rounds"]) for r in rs),
        "first_result_s": first_result,
        "parts_s": parts,
        "isolation_per_point_s": float(np.median(isolation)) if isolation else None,
        "compile_per_point_s": (parts[breakdown.COMPILE] + parts[breakdown.LOOP_COMPILE]) / len(rs),
        "harness_overhead": breakdown.harness_overhead(parts, total),
        "harness_overhead_as_before": breakdown.harness_overhead(parts, total, breakdown.NOT_OVERHEAD_BEFORE),
        # from the end of the last round to report/ written (its build_s.txt)
        "report_after_measuring_s": breakdown.report_s(out),
        "dir": str(out),
    }


def small_message(repeats: int) -> dict:
    """shardlab's reported time for a 1 KiB AllGather vs a naive perf_counter loop, same program."""
    import jax

    from runner.worker.programs import collectives as programs
    from runner.worker.timing import time_step

    mesh = jax.make_mesh((8,), ("X",))
    prog = programs.build("all_gather", ["X"], mesh, 1024, "float32")
    x = prog.make_input()
    compiled = prog.fn.lower(x).compile()
    step = lambda: compiled(x)  # noqa: E731
    cfg = {
        "warmup_min_iters": 3,
        "warmup_max_s": 2.0,
        "min_iters": 10,
        "max_iters": 2000,
        "target_rel_ci": 0.05,
        "budget_s": 3.0,
        "iters_per_sample": 1,
    }
    shardlab, naive = [], []
    for _ in range(repeats):  # interleaved, so drift hits both alike
        shardlab.append(time_step(step, cfg)["summary"]["median_s"])
        for _ in range(20):
            step().block_until_ready()
        ts = []
        for _ in range(300):
            t0 = time.perf_counter()
            step().block_until_ready()
            ts.append(time.perf_counter() - t0)
        naive.append(float(np.median(ts)))
    return {
        "shardlab_median_s": float(np.median(shardlab)),
        "naive_median_s": float(np.median(naive)),
        "ratio": float(np.median(shardlab) / np.median(naive)),
        "repeats": repeats,
    }


def report_n(work: Path, template_sweep: Path, n: int, tables: bool = True) -> dict:
    """Analysis and report of an n-point sweep synthesised from one real point (its trace and
    HLO copied into every point folder), in a fresh process: its wall time and peak memory.
    ``tables``: keep the per-point ``ops_table.json`` the worker wrote (as a sweep has them);
    without, the report reads every trace and HLO again (a sweep measured before they existed)."""
    src = sorted(template_sweep.glob("*/result.json"))[len(list(template_sweep.glob("*/result.json"))) // 2].parent
    base = json.loads((src / "result.json").read_text())
    root = work / f"synthetic_{n}{'' if tables else '_no_tables'}"
    for i in range(n):
        size = 1024 * 2 ** (i % 17)
        point = root / f"{i:04d}_op.size_bytes={size},timing.seed={i // 17}"
        skip = ("result.json",) if tables else ("result.json", "ops_table.json")
        shutil.copytree(src, point, ignore=shutil.ignore_patterns(*skip))
        r = json.loads(json.dumps(base))
        r["spec"]["size_bytes"] = r["spec"]["V_bytes"] = size
        r["config"]["op"]["size_bytes"] = size
        med = 3e-4 + size / 1.5e9
        r["timing"]["summary"].update(
            median_s=med, p10_s=med * 0.9, p90_s=med * 1.1, ci_low_s=med * 0.97, ci_high_s=med * 1.03
        )
        (point / "result.json").write_text(json.dumps(r))
    code = (
        # VmHWM, not ru_maxrss: Linux hands a child the high-water mark of the (large) parent it
        # was forked from, even across exec
        "import re, sys; from analysis.report import write_report; write_report(sys.argv[1], allow_mixed=True); "
        "print(int(re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1)) * 1024)"
    )
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, str(root)], cwd=REPO, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    peak = int(proc.stdout.split()[-1])  # the report process's own high-water mark
    md = (root / "report" / "report.md").read_text()
    return {
        "points": n,
        "ops_tables": tables,
        "analysis_report_s": wall,
        "peak_rss_bytes": peak,
        "report_md_lines": md.count("\n"),
        "report_table_rows": sum(1 for line in md.splitlines() if line.startswith("| ")),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats; under two minutes on 2 cores")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    ap.add_argument(
        "--only",
        choices=["trace", "peer", "sweep"],
        help="run one part: trace = trace parsing (about two minutes), peer = the side-by-side with a "
        "minimal loop, sweep = the default sweep cold and warm, with its harness overhead",
    )
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="shardlab-bench-"))
    if args.only == "trace":
        tp = trace_parsing(work, 300)
        print_trace_parsing(tp)
        if args.json:
            args.json.write_text(json.dumps({"trace_parsing": tp}, indent=1))
        shutil.rmtree(work, ignore_errors=True)
        return 0
    if args.only == "peer":
        found = peer.side_by_side(work, 1 if args.quick else 2)
        peer.print_figures(found)
        if args.json:
            args.json.write_text(json.dumps({"peer": found}, indent=1))
        shutil.rmtree(work, ignore_errors=True)
        return 0
    cache = work / "jax-cache"
    if args.only == "sweep":
        found = {key: sweep_breakdown(work, cache, label) for key, label in SWEEPS}
        found["rerun"] = rerun_overlap(*(found[key]["dir"] for key, _ in SWEEPS))
        print_sweeps(found)
        if args.json:
            args.json.write_text(json.dumps(found, indent=1))
        shutil.rmtree(work, ignore_errors=True)
        return 0
    t0 = time.time()
    figures = {
        "machine": {
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "quick": args.quick,
    }
    for key, label in SWEEPS:
        figures[key] = sweep_breakdown(work, cache, label)
    figures["rerun"] = rerun_overlap(*(figures[key]["dir"] for key, _ in SWEEPS))
    figures["small_message"] = small_message(5 if args.quick else 9)
    figures["trace_parsing"] = trace_parsing(work, 300)
    figures["report_100"] = report_n(work, Path(figures["sweep_warm"]["dir"]), 100)
    figures["report_100_no_tables"] = report_n(work, Path(figures["sweep_warm"]["dir"]), 100, tables=False)
    figures["report_1000"] = report_n(work, Path(figures["sweep_warm"]["dir"]), 1000)
    figures["peer"] = peer.side_by_side(work, 1 if args.quick else 2)
    figures["bench_wall_s"] = time.time() - t0
    import jax

    figures["machine"]["jax"] = jax.__version__
    if args.json:  # first: a failure to print must not lose the figures
        args.json.write_text(json.dumps(figures, indent=1))
    print_table(figures)
    shutil.rmtree(work, ignore_errors=True)
    return 0


SWEEPS = (("sweep_cold", "cold cache"), ("sweep_warm", "warm cache"))


def rerun_overlap(a: Path, b: Path) -> dict:
    """Whether two runs of the same sweep agree: for each point in both, whether the headline
    intervals overlap, and the median relative half-width of the intervals."""

    def summaries(d: Path) -> dict:
        out = {}
        for f in Path(d).glob("*/result.json"):
            s = json.loads(f.read_text())["timing"]["summary"]
            if s.get("median_s"):
                out[f.parent.name] = s
        return out

    sa, sb = summaries(a), summaries(b)
    both = sorted(set(sa) & set(sb))
    overlap = [sa[k]["ci_low_s"] <= sb[k]["ci_high_s"] and sb[k]["ci_low_s"] <= sa[k]["ci_high_s"] for k in both]
    widths = [x[k]["rel_ci_halfwidth"] for k in both for x in (sa, sb)]
    return {
        "points": len(both),
        "overlapping": int(sum(overlap)),
        "apart": [k for k, o in zip(both, overlap) if not o],
        "median_rel_halfwidth": float(np.median(widths)) if widths else None,
    }


def print_sweeps(f: dict) -> None:
    """The default sweep's lines, cold and warm: its wall time, harness overhead and parts."""
    for key, _ in SWEEPS:
        s = f[key]
        print(
            f"default sweep, {s['label']}: {s['total_s']:.1f} s for {s['points']} points; "
            f"harness overhead {100 * s['harness_overhead']:.0f}% "
            f"({100 * s['harness_overhead_as_before']:.0f}% counted as before 2026-11-26); "
            f"compile {1e3 * s['compile_per_point_s']:.0f} ms/point; "
            f"worker-process isolation {1e3 * (s['isolation_per_point_s'] or 0):.1f} ms/point; "
            f"first result line after {s['first_result_s']:.1f} s; "
            f"report complete {s['report_after_measuring_s']:.1f} s after the last round"
        )
        for part, secs in s["parts_s"].items():
            print(f"    {part:<55s} {secs:7.2f} s  {100 * secs / s['total_s']:5.1f}%")
    r = f.get("rerun")
    if r:
        apart = f" (apart: {', '.join(r['apart'])})" if r["apart"] else ""
        print(
            f"    cold and warm, run to run: {r['overlapping']} of {r['points']} intervals overlap{apart}; "
            f"median half-width ±{100 * r['median_rel_halfwidth']:.1f}%"
        )


def print_table(f: dict) -> None:
    m = f["machine"]
    print(f"shardlab benchmark on {m['host']} ({m['cpus']} CPUs, Python {m['python']}, jax {m['jax']})\n")
    print_sweeps(f)
    sm = f["small_message"]
    print(
        f"\n1 KiB AllGather on 8 CPU devices: shardlab {1e6 * sm['shardlab_median_s']:.0f} us, naive loop "
        f"{1e6 * sm['naive_median_s']:.0f} us (ratio {sm['ratio']:.2f}, medians of {sm['repeats']} interleaved repeats)"
    )
    print_trace_parsing(f["trace_parsing"])
    print()
    for key in ("report_100", "report_100_no_tables", "report_1000"):
        r = f[key]
        how = "the worker's op tables" if r["ops_tables"] else "every trace and HLO read again"
        print(
            f"analysis + report of {r['points']} points ({how}; a fresh process): {r['analysis_report_s']:.2f} s, "
            f"peak {r['peak_rss_bytes'] / 2**20:.0f} MiB; report.md {r['report_md_lines']} lines, "
            f"{r['report_table_rows']} table rows"
        )
    peer.print_figures(f["peer"])
    print(f"\nbenchmark wall time {f['bench_wall_s']:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
