"""Turn a composed config into a checked spec of a point: every value check.

Every check here runs before JAX starts, so a typo costs nothing; checks that need the
devices (mesh size vs device count) run in the worker right after JAX starts and before
any compile (:func:`check_against_devices`). Errors are :class:`ConfigError`, whose message
names the key, the value and what is allowed. Each kind of op checks itself and says how it
splits over the mesh (:mod:`runner.config.op_spec`), the memory estimate is in
:mod:`runner.config.memory`; both are called from here.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

from omegaconf import DictConfig, OmegaConf

from analysis.book.collectives import OPS as COLLECTIVES
from analysis.book.dtypes import PRECISIONS, RUN_DTYPES
from analysis.runs.record import ESTIMATORS
from runner.config.memory import check_fits
from runner.config.op_spec import KINDS, kind
from runner.config.schema import CONF_DIR, unknown_key
from runner.config.spec_values import MAX_TIMEOUT_S, check_size, check_values
from runner.errors import ConfigError

OPS = COLLECTIVES + tuple(KINDS)  # the book's collectives, then matmul, transformer_block, program
DISTRIBUTED_MODES = ("none", "local", "auto")


def parse_size(value: Any, key: str = "op.size_bytes") -> int:
    """``16MiB``, ``128M`` -> bytes (:func:`analysis.book.units.parse_size`), at most 1 PiB;
    ConfigError if not."""
    return check_size(value, key)


def _choices(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def build_spec(cfg: DictConfig) -> dict:
    """Check ``cfg`` without touching JAX and return the spec the worker runs: a plain dict
    but for its ``op``, typed per kind (:mod:`runner.config.op_spec`)."""
    if problem := unknown_key(cfg):
        raise ConfigError(problem)
    c = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    op, mesh, hw = c["op"], c["mesh"], c["hardware"]
    if op["name"] not in OPS:
        raise ConfigError(f"op.name={op['name']!r}: allowed ops are {', '.join(OPS)}")
    if c["dtype"] not in RUN_DTYPES:
        raise ConfigError(f"dtype={c['dtype']!r}: allowed dtypes are {', '.join(RUN_DTYPES)}")
    if c["precision"] not in PRECISIONS:
        raise ConfigError(f"precision={c['precision']!r}: allowed precisions are {', '.join(PRECISIONS)}")
    check_values(c)
    if mesh.get("shape"):
        mesh = dict(mesh, axes=shape_axes(mesh["shape"]))
    axes = mesh["axes"]
    _check_mesh_axes(axes)
    if hw["kind"] not in ("auto", "cpu", "tpu", "gpu"):
        raise ConfigError(f"hardware.kind={hw['kind']!r}: allowed kinds are auto, cpu, tpu, gpu")
    _check_timing(c["timing"], c["trace"])
    check_gate(c["check"])
    _check_timeout(c["timeout_s"], c["timing"], c["trace"])
    spec = {
        "op": kind(op["name"]).from_config(op, axes, mesh["name"], c["dtype"]),  # typed: runner.config.op_spec
        "mesh": {"name": mesh["name"], "axes": dict(axes)},
        "hardware": hw,
        "dtype": c["dtype"],
        "precision": c["precision"],
        "timing": c["timing"],
        "trace": c["trace"],
        "check_result": c["check_result"],
    }
    spec["distributed"] = check_distributed(c["distributed"], hw, axes)
    known = {n: s for n, s in axes.items() if s != -1}
    if len(known) == len(axes):  # fully known mesh: check divisibility and memory now, not in the worker
        check_shapes(spec, known)
        check_fits(spec, known)
    return spec


MESH_AXIS_NAMES = "XYZWVU"  # the book's X, Y, Z, then more


def shape_axes(shape: str) -> dict[str, int]:
    """``mesh.shape=2x4`` -> ``{"X": 2, "Y": 4}`` (``-1`` for all the devices left)."""
    try:
        sizes = [int(p) for p in str(shape).lower().split("x")]
    except ValueError:
        sizes = []
    if not sizes or len(sizes) > len(MESH_AXIS_NAMES) or any(s == 0 or s < -1 for s in sizes):
        raise ConfigError(
            f"mesh.shape={shape!r}: write sizes joined by x, e.g. 8, 4x2 or 2x2x2 (axes X, Y, Z; "
            "-1 for all the devices left)"
        )
    return dict(zip(MESH_AXIS_NAMES, sizes))


def _check_mesh_axes(axes: dict) -> None:
    for name, size in axes.items():
        if not re.fullmatch(r"[A-Z]", name):
            raise ConfigError(f"mesh.axes: axis name {name!r} must be one capital letter (X, Y, Z, ...)")
        if size != -1 and size < 1:
            raise ConfigError(f"mesh.axes.{name}={size}: a size must be >= 1, or -1 for all the devices left")
    if sum(1 for s in axes.values() if s == -1) > 1:
        raise ConfigError(f"mesh.axes={axes}: at most one axis may be -1")


MAX_ITERS = 1_000_000  # more samples than anyone waits for: a typo, not a plan


# A local process is a whole JAX runtime: about 250 MiB here before its point's arrays, and a
# few busy threads while it starts. 1000 of them on 2 cores took 13 GB before anything ran.
LOCAL_PROCESS_BYTES = 320 << 20
LOCAL_PER_CORE = 8


def _available_bytes() -> int:
    """The memory the kernel says is available (``MemAvailable``); 1 TiB where it cannot tell."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 1 << 40


def local_process_limit() -> int:
    """How many ``distributed=local`` processes this machine can hold: by its cores and by its
    available memory, whichever is fewer (at least 2, the smallest local run)."""
    return max(2, min(LOCAL_PER_CORE * (os.cpu_count() or 1), _available_bytes() // LOCAL_PROCESS_BYTES))


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_timeout(timeout_s, timing: dict, trace: dict) -> None:
    """``timeout_s`` bounds a point: finite and positive, and long enough for what a round is
    allowed to take (warm-up, the timing budget, tracing), so that the timeout never cuts off
    a point that keeps to its budget (its samples would be lost with the worker)."""
    if not _finite(timeout_s) or not 0 < timeout_s <= MAX_TIMEOUT_S:  # longer overflows subprocess's waits
        raise ConfigError(
            f"timeout_s={timeout_s!r}: must be a finite number of seconds > 0 (default 600), at most "
            f"{MAX_TIMEOUT_S} (a week)"
        )
    # a round may spend the larger of round 1's budget and a later round's
    key = "timing.later_budget_s" if timing["later_budget_s"] > timing["budget_s"] else "timing.budget_s"
    need = timing["warmup_max_s"] + max(timing["budget_s"], timing["later_budget_s"]) * 1.5 + trace["max_s"] + 5
    if timeout_s < need:
        raise ConfigError(
            f"timeout_s={timeout_s!r}: a point may take timing.warmup_max_s + 1.5 x {key} "
            f"+ trace.max_s + 5 s of set-up = {need:g} s; give timeout_s >= {need:g} or shorten those"
        )


def check_gate(check: dict) -> None:
    """``check.min_busbw_GBps``: unset, or a finite positive bandwidth."""
    bar = check.get("min_busbw_GBps")
    if bar is not None and not (isinstance(bar, (int, float)) and math.isfinite(bar) and bar > 0):
        raise ConfigError(f"check.min_busbw_GBps={bar!r}: must be a bandwidth in GB/s > 0, or null for no check")


def _check_timing(timing: dict, trace: dict) -> None:
    for section, values in (("timing", timing), ("trace", trace)):
        for key, value in values.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{section}.{key}={value!r}: must be a finite number")
    rules = [
        ("timing.estimator", timing["estimator"] in ("auto", *ESTIMATORS), ", ".join(("auto", *ESTIMATORS))),
        ("timing.rounds", 1 <= timing["rounds"] <= 100, "from 1 to 100"),
        ("timing.loop_target_s", 0 < timing["loop_target_s"] <= 10, "between 0 and 10 seconds"),
        ("timing.loop_max_samples", 5 <= timing["loop_max_samples"] <= 10_000, "from 5 to 10000"),
        (
            "timing.loop_check_below_s",
            timing.get("loop_check_below_s") is None or 0 < timing["loop_check_below_s"] <= 3600,
            "null (the loop cross-check on every point) or between 0 and 3600 seconds",
        ),
        ("timing.warmup_min_iters", 1 <= timing["warmup_min_iters"] <= 10_000, "from 1 to 10000"),
        ("timing.warmup_max_s", 0 < timing["warmup_max_s"] <= 3600, "between 0 and 3600 seconds"),
        ("timing.min_iters", 3 <= timing["min_iters"] <= 10_000, "from 3 to 10000"),
        (
            "timing.max_iters",
            timing["min_iters"] <= timing["max_iters"] <= MAX_ITERS,
            f"from timing.min_iters to {MAX_ITERS}",
        ),
        ("timing.target_rel_ci", 0 < timing["target_rel_ci"] < 1, "between 0 and 1 (0.05 = +-5%)"),
        ("timing.budget_s", 0 < timing["budget_s"] <= 3600, "between 0 and 3600 seconds"),
        ("timing.later_budget_s", 0 < timing["later_budget_s"] <= 3600, "between 0 and 3600 seconds"),
        # bounded: 2000 unblocked 8-device CPU all-gathers deadlocked XLA's rendezvous (jax 0.10)
        ("timing.iters_per_sample", 1 <= timing["iters_per_sample"] <= 64, "from 1 to 64"),
        ("trace.iters", 1 <= trace["iters"] <= 10_000, "from 1 to 10000"),
        (
            "trace.inspect_iters",
            trace.get("inspect_iters") is None or 1 <= trace["inspect_iters"] <= 10_000,
            "null (trace.iters) or from 1 to 10000",
        ),
        ("trace.max_s", 0 < trace["max_s"] <= 3600, "between 0 and 3600 seconds"),
        ("trace.inspect_max_s", 0 < trace["inspect_max_s"] <= 3600, "between 0 and 3600 seconds"),
        ("trace.host_tracer_level", trace["host_tracer_level"] in (None, 0, 1, 2, 3), "null, 0, 1, 2 or 3"),
        ("trace.python_tracer_level", trace["python_tracer_level"] in (0, 1), "0 or 1"),
    ]
    for key, ok, allowed in rules:
        if not ok:
            section, name = key.split(".")
            value = (timing if section == "timing" else trace)[name]
            raise ConfigError(f"{key}={value!r}: must be {allowed}")


def resolve_mesh(axes: dict[str, int], device_count: int) -> dict[str, int]:
    """Fill a -1 axis with the devices left; raise ConfigError if the mesh does not fit."""
    fixed = math.prod(s for s in axes.values() if s != -1)
    resolved = {n: (device_count // fixed if s == -1 else s) for n, s in axes.items()}
    total = math.prod(resolved.values())
    if total != device_count:
        raise ConfigError(
            f"mesh.axes={axes}: the mesh has {total} devices but {device_count} are available; "
            f"pick a mesh whose sizes multiply to {device_count} (allowed meshes: {', '.join(_choices('mesh'))})"
        )
    return resolved


def check_shapes(spec: dict, mesh_axes: dict[str, int]) -> None:
    """The op's arrays must split evenly over their mesh axes (each kind's ``check_shapes``:
    a collective's V over its group, a matmul's or a block's dims over their shards)."""
    spec["op"].check_shapes(mesh_axes, spec["dtype"], spec.get("check_result", True))


def check_against_devices(spec: dict, device_count: int) -> dict[str, int]:
    """Checks that need the device count; returns the resolved mesh axes."""
    mesh_axes = resolve_mesh(spec["mesh"]["axes"], device_count)
    check_shapes(spec, mesh_axes)
    return mesh_axes


def check_distributed(dist: dict, hardware: dict, mesh_axes: dict[str, int]) -> dict:
    """Check ``distributed.*`` before JAX starts; return the plain dict the worker gets."""
    mode = dist["mode"]
    if mode not in DISTRIBUTED_MODES:
        raise ConfigError(f"distributed.mode={mode!r}: allowed modes are {', '.join(DISTRIBUTED_MODES)}")
    if not _finite(dist["timeout_s"]) or not dist["timeout_s"] > 0:
        raise ConfigError(f"distributed.timeout_s={dist['timeout_s']!r}: must be a finite number of seconds > 0")
    axis = dist.get("cross_process_axis")
    if mode == "none":
        if axis is not None:
            raise ConfigError(
                f"distributed.cross_process_axis={axis!r} needs several processes: "
                f"use distributed=local or distributed=auto"
            )
        return dict(dist)
    if mode == "local":
        for key in ("num_processes", "devices_per_process"):
            if not isinstance(dist.get(key), int) or dist[key] < 1:
                raise ConfigError(f"distributed.{key}={dist.get(key)!r}: must be a whole number >= 1")
        if hardware["kind"] not in ("auto", "cpu"):
            raise ConfigError(
                f"distributed=local runs CPU devices on this machine, but hardware="
                f"{hardware['name']} is {hardware['kind']}; use hardware=auto or cpu, or "
                f"distributed=auto on a {hardware['kind']} cluster"
            )
        if dist.get("process_id") is not None or dist.get("coordinator_address") is not None:
            raise ConfigError(
                "distributed=local chooses process_id and coordinator_address itself; "
                "leave them null (they are for distributed=auto)"
            )
        if dist["num_processes"] > (most := local_process_limit()):
            raise ConfigError(
                f"distributed.num_processes={dist['num_processes']}: this machine holds at most {most} local JAX "
                f"processes ({LOCAL_PER_CORE} per core on its {os.cpu_count() or 1}, each about "
                f"{LOCAL_PROCESS_BYTES >> 20} MiB of its {_available_bytes() >> 30} GiB available); "
                "use distributed=auto across machines for more"
            )
    if axis is not None:
        if axis not in mesh_axes:
            raise ConfigError(
                f"distributed.cross_process_axis={axis!r} is not a mesh axis (axes: {', '.join(mesh_axes)})"
            )
        n, size = dist.get("num_processes"), mesh_axes[axis]
        if n and size != -1 and size % n and n % size:
            raise ConfigError(
                f"distributed.cross_process_axis={axis}: its size {size} and "
                f"distributed.num_processes={n} must divide one another (see "
                f"runner.worker.meshes.build_mesh)"
            )
    return dict(dist)
