"""The trace reader's benchmark (``python tests/bench/run.py --only trace``): shardlab's reader
against jax.profiler.ProfileData and xprof's ``hlo_stats`` on real traces of 50 k to 1 M events,
in events per second, the device-op table built on top, and `analysis profile` against the read."""

from __future__ import annotations

import contextlib
import io
import time
from pathlib import Path

import numpy as np


def trace_parsing(work: Path, iters: int, big_iters: int = 6500, mlp_iters: int = 2200, rounds: int = 3) -> dict:
    """Events/s reading an xplane file: shardlab's reader vs the ProfileData reader it replaced
    vs xprof's hlo_stats, on three traces of the 8 CPU devices: ``iters`` steps of a 1 KiB
    AllGather (about 50 k events at 300), ``big_iters`` steps of it (1 M events at 6500), and
    ``mlp_iters`` steps of a sharded MLP's forward and backward (1 M events at 2200, a third
    of them device-op candidates against a sixth for the AllGather)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from runner.worker.programs import collectives as programs

    mesh = jax.make_mesh((8,), ("X",))
    prog = programs.build("all_gather", ["X"], mesh, 1024, "float32")
    x = prog.make_input()
    all_gather = prog.fn.lower(x).compile()

    mesh2 = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    rng = np.random.default_rng(0)
    mlp_args = [
        jax.device_put(jnp.asarray(rng.standard_normal(shape), jnp.float32), NamedSharding(mesh2, spec))
        for shape, spec in (((32, 64), P(None, "model")), ((64, 16), P("model", None)), ((64, 32), P("data", None)))
    ]

    def loss(w1, w2, xs):
        return jnp.mean(jnp.square(jax.nn.relu(xs @ w1) @ w2))

    mlp = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    jax.block_until_ready(mlp(*mlp_args))
    opts = jax.profiler.ProfileOptions()
    opts.python_tracer_level, opts.host_tracer_level = 0, 1
    out = {}
    for label, fn, args, steps in (
        ("small", all_gather, (x,), iters),
        ("large", all_gather, (x,), big_iters),
        ("large_mlp", mlp, mlp_args, mlp_iters),
    ):
        tdir = work / f"trace_{label}"
        jax.profiler.start_trace(str(tdir), profiler_options=opts)
        for _ in range(steps):
            jax.block_until_ready(fn(*args))
        jax.profiler.stop_trace()
        out[label] = {"steps": steps, **_reading_figures(next(tdir.glob("plugins/profile/*/*.xplane.pb")), rounds)}
    out["large_mlp"].update(_profile_figures(work / "trace_large_mlp", rounds))
    return out


def _profile_figures(logdir: Path, rounds: int) -> dict:
    """``python -m analysis profile`` on a trace (in this process: its imports paid once, as
    the read's are), against reading the trace alone; best of ``rounds``, interleaved."""
    from analysis.cli import main as analysis_main
    from analysis.trace import read_xplane

    xplane = next(logdir.glob("plugins/profile/*/*.xplane.pb"))
    read, prof = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        read_xplane(xplane)
        read.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            rc = analysis_main(["profile", str(logdir), "--out", str(logdir / "profile_report")])
        prof.append(time.perf_counter() - t0)
        if rc:
            raise RuntimeError(f"analysis profile exited {rc}")
    return {"profile_s": min(prof), "profile_read_s": min(read), "profile_vs_read": min(prof) / min(read)}


def _reading_figures(xplane: Path, rounds: int) -> dict:
    """Best-of-``rounds`` seconds of each reader on one file, the readers interleaved round by
    round (this machine is noisy; drift hits all alike). events/s counts every event in the
    file for all three, as all three read the whole file."""
    import pandas as pd
    from xplane_reference import read_with_profiledata
    from xprof.convert import raw_to_tool_data

    from analysis.trace import count_events, device_ops, read_xplane

    def xprof_hlo_stats():
        # Without its cache: xprof saves converted data beside the trace (use_saved_result=False
        # should skip reading it; removing it makes sure every call converts the xplane).
        for f in xplane.parent.iterdir():
            if f != xplane:
                f.unlink()
        data, _ = raw_to_tool_data.xspace_to_tool_data([str(xplane)], "hlo_stats", {"use_saved_result": False})
        if not data:  # a converter that failed returns nothing: its time would mean nothing
            raise RuntimeError("xprof hlo_stats returned no data")
        return data

    readers = {
        "shardlab": lambda: read_xplane(xplane),
        "profiledata": lambda: read_with_profiledata(xplane),
        "xprof_hlo_stats": xprof_hlo_stats,
    }
    times: dict[str, list[float]] = {k: [] for k in readers}
    results = {}
    for _ in range(rounds):
        for name, fn in readers.items():
            t0 = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - t0)
    events = results["shardlab"]
    pd.testing.assert_frame_equal(events, results["profiledata"])  # the same table, or the figures mean nothing
    ops_times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        ops = device_ops(events)
        ops_times.append(time.perf_counter() - t0)
    n = count_events(xplane)
    fig = {
        "events": n,
        "file_bytes": xplane.stat().st_size,
        "candidate_events": len(events),
        "device_op_events": len(ops),
        "device_ops_s": min(ops_times),
        "xprof_hlo_stats_bytes": len(results["xprof_hlo_stats"]),
    }
    for name, ts in times.items():
        fig[f"{name}_s"] = min(ts)
        fig[f"{name}_events_per_s"] = n / min(ts)
    fig["shardlab_vs_xprof"] = fig["xprof_hlo_stats_s"] / fig["shardlab_s"]
    fig["shardlab_vs_profiledata"] = fig["profiledata_s"] / fig["shardlab_s"]
    return fig


def print_trace_parsing(tp: dict) -> None:
    for label, f in tp.items():
        print(
            f"\ntrace parsing, {label} trace ({f['steps']} steps): {f['events']} events in the xplane "
            f"({f['file_bytes'] / 2**20:.1f} MiB; {f['candidate_events']} kept, {f['device_op_events']} device ops)"
        )
        for name, title in (
            ("shardlab", "shardlab read_xplane"),
            ("profiledata", "ProfileData reader (old)"),
            ("xprof_hlo_stats", "xprof hlo_stats"),
        ):
            print(f"    {title:<26s} {f[name + '_s']:.3f} s  {f[name + '_events_per_s'] / 1e6:.2f} M events/s")
        print(
            f"    shardlab / xprof {f['shardlab_vs_xprof']:.2f}x, / ProfileData {f['shardlab_vs_profiledata']:.2f}x; "
            f"device_ops on the table {f['device_ops_s']:.3f} s; "
            f"read + device_ops {f['shardlab_s'] + f['device_ops_s']:.2f} s"
        )
        if "profile_s" in f:
            print(
                f"    `analysis profile` on it {f['profile_s']:.2f} s, reading it {f['profile_read_s']:.2f} s: "
                f"{f['profile_vs_read']:.1f}x (goal 5x)"
            )
