"""The column dictionary: every column of the CSV files a report writes, with its unit and
meaning. Written beside the report as ``columns.md``; a test holds it to ``summary.csv``.

Units: files keep SI base units named in the column (``_s`` seconds, ``_bytes`` bytes,
``_Bps`` bytes per second, ``_frac``/``_share`` a fraction of 1); the report prints them in
human units.
"""

from __future__ import annotations

from pathlib import Path

from analysis.runs.rundir import write_text_atomic
from analysis.runs.summary import COLUMN_ORDER

SUMMARY = {
    "point": ("", "the point folder's name: its number in the sweep and what varies"),
    "status": ("", "ok or failed"),
    "sweep_id": ("", "the sweep's id (sweep.json's, else from its start and command): concatenated sweeps stay apart"),
    "sweep_start_time": ("ISO 8601", "when the sweep started (sweep.json's started_at, else its first point's)"),
    "error_type": ("", "for a failed point: ConfigError, WorkerDied (crash or timeout), or the exception's type"),
    "error": ("", "for a failed point: the error, in one line"),
    "op": ("", "all_gather, reduce_scatter, all_reduce, all_to_all or matmul"),
    "expr": ("", "the point's op in the book's notation, e.g. AllGather_X(A[I_X]) -> A[I]"),
    "dtype": ("", "element type"),
    "precision": (
        "",
        "the matmuls' jax.lax.Precision (default, high, highest; matmul and transformer_block points, "
        "the config's value elsewhere); empty for runs from before the key, whose matmuls ran at highest",
    ),
    "mesh": ("", "the mesh config's name (conf/mesh)"),
    "mesh_axes": ("", "the resolved mesh, e.g. X=4,Y=2"),
    "axes": ("", "the mesh axes the collective runs over, e.g. XY"),
    "axis_sizes": ("", "their sizes, e.g. 4x2"),
    "placement": (
        "",
        "where the mesh axes lay on the physical axes (TPU: JSON of result.json's spec.mesh.physical, "
        "each axis' extent along x, y, z, core, slice); the model prices the group over these; empty elsewhere",
    ),
    "n_axes": ("count", "axes of size > 1 the collective runs over (the book's k)"),
    "group_size": ("devices", "devices in one collective group (n)"),
    "num_groups": ("count", "groups running at once"),
    "size_bytes": ("bytes", "op.size_bytes as configured (for a matmul: its two inputs)"),
    "V_bytes": (
        "bytes",
        "the book's V: the gathered array (AllGather), the unreduced per-device array (ReduceScatter, "
        "AllReduce), the whole array across the group (AllToAll)",
    ),
    "S_bytes": ("bytes", "nccl-tests' S, what algbw divides: V, except AllToAll: V / n (the per-rank buffer)"),
    "hardware": ("", "the conf/hardware entry the run resolved to"),
    "backend": ("", "JAX's backend: cpu, tpu or gpu"),
    "device_kind": ("", "JAX's device kind, e.g. TPU v5 lite"),
    "device_count": ("devices", "devices in the run"),
    "jax_version": ("", "jax version"),
    "estimator": ("", "the estimator time_s comes from: step, loop or device (imported: another tool's average)"),
    "missing_reason": (
        "",
        "why the chosen estimator gave no time (device: the trace held no execution of the collective, or no "
        "trace); time_s is then empty and no other estimator stands in",
    ),
    "time_s": ("s", "the median of the chosen estimator (the median of its rounds' medians)"),
    "time_p10_s": ("s", "10th percentile of the chosen estimator's samples"),
    "time_p90_s": ("s", "90th percentile"),
    "time_p95_s": ("s", "95th percentile"),
    "time_p99_s": ("s", "99th percentile"),
    "time_max_s": ("s", "the largest sample"),
    "time_ci_low_s": ("s", "lower end of the median's 95% interval (bootstrap over rounds and samples)"),
    "time_ci_high_s": ("s", "upper end"),
    "time_cv": ("fraction", "coefficient of variation of the samples"),
    "time_rel_ci": ("fraction", "half the interval's width over the median: 0.05 = +-5%"),
    "time_n": ("count", "samples over all rounds"),
    "time_rounds": ("count", "rounds the point was timed in"),
    "rounds_disagree": ("bool", "the rounds' medians differ more than their own intervals allow (drift)"),
    "rounds_wanted": ("count", "rounds timing.rounds asked for (a point whose first 2 agree stops there)"),
    "rounds_why": (
        "",
        "why the point took the rounds it did: stopped after 2 (agreeing, within target), or all and why not; "
        "one round (timing=quick): 'one round: not checked for run-to-run drift'",
    ),
    "noisy": ("bool", "the 95% interval is wider than five times timing.target_rel_ci (+-25% by default)"),
    "step_time_s": ("s", "the step estimator: median wall time of one blocked step"),
    "step_ci_low_s": ("s", "its 95% interval, lower end"),
    "step_ci_high_s": ("s", "upper end"),
    "loop_time_s": (
        "s",
        "the loop estimator: per repetition, the slope (t(K2) - t(K1)) / (K2 - K1) between two loop calls "
        "with compile-time trip counts, so a call's fixed costs cancel",
    ),
    "loop_ci_low_s": ("s", "its 95% interval, lower end"),
    "loop_ci_high_s": ("s", "upper end"),
    "loop_K": ("count", "repetitions in the longer loop call (K2)"),
    "loop_empty_s": (
        "s",
        "the same loop with an empty body (the same carry, no op), per repetition: what a repetition costs "
        "the loop itself (on a GPU, launching the body's kernels)",
    ),
    "loop_launch_bound": (
        "bool",
        "loop_empty_s is more than a quarter of loop_time_s: the loop reads the launch rate more than the op "
        "(a caveat; the loop's time is not corrected)",
    ),
    "loop_rounds": (
        "count",
        "rounds the loop estimator was timed in: round 1 as a cross-check, and round 2 only where round 1's loop "
        "interval and the source estimator's did not overlap (every round where the loop is the estimator)",
    ),
    "loop_why": ("", "why the loop was timed in those rounds (timing.loop_rule in result.json)"),
    "device_time_s": ("s", "the device estimator: the devices' op time from the trace, median over devices and steps"),
    "device_ci_low_s": ("s", "its 95% interval, lower end"),
    "device_ci_high_s": ("s", "upper end"),
    "dispatch_floor_s": (
        "s",
        "step_time_s - loop_time_s: what one dispatch and sync cost the host; 0 where the loop reads above the "
        "step within their intervals, blank where its interval lies wholly above, never negative",
    ),
    "dispatch_share": (
        "fraction",
        "(step - device) / step, where the device times its own ops (TPU, GPU); blank on CPU and never negative",
    ),
    "page_faults_per_step": ("count", "minor page faults of the worker per step, median over rounds"),
    "checked": ("bool", "the result was compared with NumPy (false: check_result=false)"),
    "compile_s": ("s", "XLA compile time of the step"),
    "profiler_slowdown": ("ratio", "traced step / untraced step (wall times)"),
    "trace_unrepresentative": ("bool", "profiler_slowdown above 5x: the trace columns describe a much slower step"),
    "no_communication": ("", "set when the group has one device: the collective ran as a copy"),
    "rewritten": (
        "",
        "set when the compiled step runs the asked collective as other collectives (e.g. compiled as "
        "reduce-scatter + all-gather) or offloads it (call-start/call-done): its device time is theirs",
    ),
    "ceiling_kind": ("", "device_copy (the CPU copy curve read at this point's size) or link (the book's roofline)"),
    "ceiling_busbw_Bps": ("B/s", "the bus bandwidth a device cannot exceed here"),
    "ceiling_ci_low_Bps": ("B/s", "the ceiling's 95% interval, lower end (the copy curve's repeats; blank for a link)"),
    "ceiling_ci_high_Bps": ("B/s", "upper end"),
    "ceiling_inconsistent": ("", "why the copy curve is in doubt at this size (a stalled dip, a wide spread)"),
    "strategy": ("", "matmul strategy"),
    "flops": ("FLOP", "the matmul's floating-point operations, 2 x the product of its dims"),
    "grad": ("bool", "the point ran jax.grad through the collective (its backward pass)"),
    "dims": ("", "matmul dims, e.g. I=1024 J=1024 K=1024"),
    "skipped": ("", "files of the point that could not be read, and why"),
    "trace_collective_s": ("s", "per traced step, the time a device spent in collectives (median over devices)"),
    "trace_compute_s": ("s", "per traced step, the time a device spent computing"),
    "trace_overlap_s": ("s", "collective time during which the same device also computed"),
    "trace_overlap_frac": ("fraction", "trace_overlap_s / trace_collective_s (median over devices)"),
    "trace_overlap_frac_min": ("fraction", "the smallest over devices"),
    "trace_command_buffers": ("count", "GPU command-buffer events in the trace (ops inside have no own times)"),
    "hlo_op": ("", "the collective's instruction name in the compiled HLO"),
    "hlo_kind": ("", "its opcode, e.g. all-gather"),
    "hlo_dtype": ("", "its element type in HLO spelling, e.g. f32"),
    "hlo_operand_bytes": ("bytes", "one device's operand bytes"),
    "hlo_result_bytes": ("bytes", "one device's result bytes"),
    "hlo_group_size": ("devices", "devices per replica group"),
    "hlo_num_groups": ("count", "replica groups"),
    "hlo_axes": ("", "the mesh axes its replica groups span"),
    "trace_op_time_s": (
        "s",
        "per traced step, last device's start to last device's end (median over steps); empty across TPU/GPU "
        "chips, whose clocks differ: use trace_device_time_s there",
    ),
    "trace_device_time_s": ("s", "per traced step, the median device's own op time"),
    "trace_arrival_skew_s": (
        "s",
        "per traced step, last device's start minus the first's; empty across TPU/GPU chips (their clocks differ)",
    ),
    "trace_iterations": ("count", "traced executions of the op"),
    "algbw_Bps": ("B/s", "algorithm bandwidth as nccl-tests: S_bytes / time_s"),
    "busbw_Bps": ("B/s", "bus bandwidth as nccl-tests: algbw x 2(n-1)/n (AllReduce) or (n-1)/n (the others)"),
    "busbw_ci_low_Bps": ("B/s", "busbw_Bps's 95% interval, lower end (from time_ci_high_s)"),
    "busbw_ci_high_Bps": ("B/s", "upper end (from time_ci_low_s)"),
    "busbw_over_ceiling": (
        "ratio",
        "busbw_Bps / ceiling_busbw_Bps; flagged when busbw_ci_low_Bps is above ceiling_ci_high_Bps and the "
        "ceiling is consistent there",
    ),
    "trace_over_untraced": ("ratio", "trace_op_time_s / time_s"),
    "flags": ("", "why the point is left out of the fits (above its ceiling, page-faulting, failed, no communication)"),
    "caveats": (
        "",
        "what to keep in mind reading it (unchecked, rounds disagree, compiled as other collectives, a "
        "launch-bound loop, noisy, command buffers)",
    ),
    "is_target": ("bool", "the row is the collective the point asked for (not a backward pass, not one XLA added)"),
    "model_time_s": ("s", "the book's model's time for the point, with the constants the report names"),
    "model_regime": ("", "latency or bandwidth: which term of the model's max() wins"),
}

OTHERS = {
    "headline.json": {
        "latency_floor_s": (
            "s",
            "the family's latency floor: the median time of the points its fit calls latency-bound, else its "
            "smallest median (latency_floor_from says which)",
        ),
        "peak_busbw_Bps, peak_at_V_bytes, peak_from": (
            "B/s, bytes, ",
            "the peak bus bandwidth: the unflagged point whose 95% interval has the highest lower end, its V, and "
            "whether it is a steady or a noisy point",
        ),
        "peak_share_of_ceiling": ("fraction", "that point's busbw over its ceiling"),
        "bandwidth_regime, V_max_bytes": (
            "bool, bytes",
            "whether the fit found a bandwidth regime (a bandwidth-bound point at 1.5x its latency term or more) "
            "below the sweep's largest V",
        ),
        "bandwidth_bound_above_bytes": (
            "bytes",
            "the fit's crossover, only with a bandwidth regime: above it the bandwidth term wins",
        ),
        "*_ci_low_*, *_ci_high_*": ("as the value", "its 95% interval (bootstrap for fitted values; null: none)"),
        "measured_over_model_median, model_self_fit": (
            "ratio, bool",
            "median over the family's points of measured / model, and whether the model's constants were fitted "
            "to these very points (then it agrees by construction)",
        ),
        "out_of_sample_{latency,bandwidth}_{median,min,max,points}": (
            "ratio, count",
            "measured / model among the points the model calls latency- or bandwidth-bound; for a self-fit, "
            "each point against its family's fit without its size (leave one size out)",
        ),
        "noisy, unchecked, flagged, failed": ("count", "points of the family with that caveat or flag"),
        "one_round": (
            "count",
            "points of the family timed in one round (timing=quick): their intervals are not checked for "
            "run-to-run drift",
        ),
    },
    "fit.json": {
        "alpha_s, beta_Bps": ("s, B/s", "T = alpha + V / beta, fitted in relative error"),
        "T_min_s, W_Bps, hops": ("s, B/s, count", "the book's T = max(T_min x hops, c x V / W)"),
        "crossover_bytes": ("bytes", "V where the two terms meet (null without a bandwidth regime)"),
        "*_ci_low_*, *_ci_high_*": (
            "as the value",
            "95% bootstrap interval: every point's median redrawn from its rounds and samples, the whole fit "
            "repeated (null: unbounded, or no samples to draw from)",
        ),
        "latency_floor_s": ("s", "median time of the points the fit calls latency-bound"),
        "bandwidth_regime, bandwidth_regime_share": (
            "bool, fraction",
            "whether a bandwidth-bound point takes 1.5x its latency term or more, and in what share of replicates",
        ),
        "bootstrap_replicates, bootstrap_seed, resampled": ("count, , ", "how the intervals were drawn"),
        "alpha_beta_rel_rmse, book_rel_rmse": ("fraction", "relative RMS error of each fit over its points"),
        "left_out": ("", "every point not used by a fit, with the reason"),
    },
    "claims.csv": {
        "claim": ("", "the chapter's claim, in words"),
        "measured, expected": ("", "what was measured (the two points' medians) and what the book expects"),
        "ratio, ci_low, ci_high": ("ratio", "the two medians' ratio and its conservative 95% interval"),
        "verdict": (
            "",
            "holds (the whole interval within 25% of the book), fails (the whole interval outside), "
            "cannot tell at this noise (the interval reaches both)",
        ),
        "reason": ("", "why the verdict is what it is, in numbers"),
    },
    "report/steps.csv": {
        "point, op, sharding, mesh, B, devices, dtype": ("", "the whole-step point: program, recipe, mesh, batch"),
        "step_s": ("s", "the untraced step time (the report's estimator)"),
        "T_math_s": ("s", "the book's FLOPs / (devices x C), where the hardware publishes C"),
        "model_comms_s": ("s", "the model's time of every collective the step executed, summed per step"),
        "traced_step_s, comms_s, exposed_s": (
            "s",
            "from the trace, median over steps: the step, its collective time, and the part of that "
            "during which the device computed nothing",
        ),
        "comms_share": ("fraction", "comms_s / traced_step_s"),
        "top_collective, top_collective_s": ("s", "the collective that cost the most per step, and its time"),
        "skipped": ("", "why the point has no trace columns, if it has none"),
    },
    "report/step_collectives.csv": {
        "point, name, kind, mesh_axes": ("", "the point, the HLO instruction, its opcode and the axes its groups span"),
        "executions, executions_per_step": ("count", "how often it ran in the trace, and per step"),
        "time_median_s, time_p90_s": ("s", "its device time per execution, over executions and devices"),
        "time_per_step_s": ("s", "its device time per step"),
        "model_time_s, measured_over_model": ("s, ratio", "the book's time for it, and measured / model"),
        "last_arrival_over_model": ("ratio", "the last device's time (from the last arrival) / model"),
    },
    "across_processes.csv": {
        "device_spread_s": ("s", "per step, the longest device's op time minus the shortest (clock-free)"),
        "arrival_skew_s": ("s", "per step, last device start minus first (one host only)"),
    },
    "samples.csv": {
        "point, round, estimator, sample, time_s": ("s", "every timing sample, one row each"),
    },
}


def write_dictionary(path: Path) -> Path:
    """``columns.md``: every column above as a Markdown table per file."""
    lines = [
        "# Columns of shardlab's tables",
        "",
        "Files keep SI base units, named in the column (`_s` seconds, `_bytes` bytes, `_Bps` bytes per "
        "second); reports print human units (us, ms; KiB and MiB are binary, GB/s decimal as in nccl-tests).",
        "",
        "## summary.csv",
        "",
        "| column | unit | meaning |",
        "|---|---|---|",
    ]
    # in the order summary.csv holds them (analysis.runs.summary.COLUMN_ORDER), not this table's
    order = [k for k in COLUMN_ORDER if k in SUMMARY] + [k for k in SUMMARY if k not in COLUMN_ORDER]
    lines += [f"| `{k}` | {SUMMARY[k][0]} | {SUMMARY[k][1]} |" for k in order]
    for name, cols in OTHERS.items():
        lines += ["", f"## {name}", "", "| column | unit | meaning |", "|---|---|---|"]
        lines += [f"| `{k}` | {u} | {m} |" for k, (u, m) in cols.items()]
    write_text_atomic(path, "\n".join(lines) + "\n")
    return path
