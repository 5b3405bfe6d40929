"""One sweep point, inside the worker process: mesh, program, compile, check, time, trace.

``measure`` fills ``record`` as it goes, so a failure part-way still leaves what was
learnt (the environment, the compile time, the HLO) in the job's result.json.
"""
from __future__ import annotations

import contextlib
import time
from pathlib import Path

import jax
import numpy as np

from analysis import trace as trace_analysis
from analysis.rundir import HLO_COMPILED, HLO_DIR, HLO_LOWERED, TRACE_DIR
from runner import meshes, programs, timing, tracing
from runner.ceiling import ceiling
from runner.devices import environment, resolve_hardware
from runner.memory import check_fits
from runner.spec import check_against_devices


class Phases(dict):
    """Seconds spent in each named phase of a point, for the benchmark's breakdown."""

    @contextlib.contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self[name] = self.get(name, 0.0) + time.perf_counter() - t0


def measure(spec: dict, job_dir: Path, record: dict) -> None:
    """Run ``spec``; write ``hlo/`` and ``trace/`` under ``job_dir``; fill ``record``."""
    phase = record["phases_s"] = Phases()
    with phase("setup"):
        devices = jax.devices()
        record["environment"] = environment(jax, devices)
        record["hardware"] = resolve_hardware(spec["hardware"], devices)
        record["ceiling"] = ceiling(record["hardware"])
        mesh_axes = check_against_devices(spec, len(devices))  # last checks before device work
        stats = jax.local_devices()[0].memory_stats() or {}  # None on the CPU backend: its devices use host memory
        record["memory_estimate"] = check_fits(spec, mesh_axes, stats.get("bytes_limit"))
        mesh = meshes.build_mesh(mesh_axes, spec.get("distributed", {}).get("cross_process_axis"))
        op = spec["op"]
        prog = programs.build(spec, mesh)
    group = int(np.prod([mesh_axes[a] for a in op["axes"]]))
    record["experiment"] = {
        "op": op["name"], "expr": prog.expr, "axes": op["axes"], "size_bytes": op.get("size_bytes"),
        "V_bytes": prog.V_bytes, "dtype": spec["dtype"], "group_size": group,
        "num_groups": len(devices) // group,
        "mesh": {"name": spec["mesh"]["name"], "axes": mesh_axes, "device_ids": mesh.device_ids.tolist()},
        "hardware": record["hardware"]["name"],
        **prog.extra,
    }
    record["experiment"]["placement"] = meshes.describe(mesh, op["axes"])  # which axes cross processes
    record["process"] = meshes.process_info()

    with phase("input"):
        args = prog.make_input()
        args = args if isinstance(args, tuple) else (args,)  # a matmul takes two arrays
    with phase("lower"):
        lowered = prog.fn.lower(*args)
    with phase("compile"):
        compiled = lowered.compile()
    record["compile"] = {"lower_s": phase["lower"], "compile_s": phase["compile"]}
    with phase("hlo_dump"):
        hlo_dir = job_dir / HLO_DIR
        hlo_dir.mkdir(parents=True, exist_ok=True)
        if jax.process_index() == 0:  # one copy per job; every process compiles the same program
            (job_dir / HLO_LOWERED).write_text(lowered.as_text())
            (job_dir / HLO_COMPILED).write_text(compiled.as_text())
    record["files"] = {"hlo_lowered": HLO_LOWERED, "hlo_compiled": HLO_COMPILED}

    def step():
        return compiled(*args)

    if spec["check_result"]:
        with phase("check"):
            record["check"] = check(*meshes.comparable(step(), prog.reference()), spec["dtype"])
        if not record["check"]["passed"]:
            raise AssertionError(f"result differs from the NumPy reference: {record['check']}")

    with phase("timing"):
        record["timing"] = timing.time_step(step, spec["timing"], meshes.agree)
    record["timing"]["wall_s"] = phase["timing"]

    if spec["trace"]["enabled"]:
        with phase("trace"):
            captured = tracing.capture(step, meshes.trace_dir(job_dir / TRACE_DIR), spec["trace"])
        record["files"]["xplane"] = str(captured.pop("xplane").relative_to(job_dir))
        record["trace"] = captured
        record["trace"]["wall_s"] = phase["trace"]
        with phase("trace_parse"):
            record["trace"].update(traced_vs_untraced(job_dir / record["files"]["xplane"],
                                                      captured["wall_samples_s"],
                                                      record["timing"]["summary"]["median_s"]))


def check(got: np.ndarray, want: np.ndarray, dtype: str) -> dict:
    """Compare against the NumPy reference, as nccl-tests' data check does.

    Inputs are small integers, so float32 and integer results must match exactly; 16-bit
    floats get a relative tolerance, for sums of many devices that leave their exact range.
    """
    tol = 1e-2 if dtype in ("bfloat16", "float16") else 0.0
    if got.shape != want.shape:
        return {"passed": False, "max_rel_error": None, "tolerance": tol, "shape": list(got.shape)}
    if tol == 0.0 and np.array_equal(got, want):
        err = 0.0
    else:
        g, w = got.astype(np.float32), want.astype(np.float32)
        err = float(np.max(np.abs(g - w) / np.maximum(np.abs(w), 1.0))) if w.size else 0.0
    return {"passed": bool(err <= tol), "max_rel_error": err, "tolerance": tol, "shape": list(got.shape)}


def traced_vs_untraced(xplane: Path, traced_walls: list[float], untraced_median_s: float) -> dict:
    """How much the profiler perturbed the step: traced times over the untraced median."""
    ops = trace_analysis.device_ops(trace_analysis.read_xplane(xplane))
    summary = trace_analysis.op_summary(trace_analysis.op_steps(ops)) if len(ops) else None
    out = {"op_events": int(len(ops)), "traced_iter_median_s": float(np.median(traced_walls)),
           "traced_iter_over_untraced": float(np.median(traced_walls) / untraced_median_s)}
    if summary is not None:
        out["ops"] = summary.to_dict(orient="records")
    return out
