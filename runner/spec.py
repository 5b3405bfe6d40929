"""Turn a composed config into a checked, JSON-able experiment spec.

Every check here runs before JAX starts, so a typo costs nothing; checks that need the
devices (mesh size vs device count) run in the worker right after JAX starts and before
any compile (:func:`check_against_devices`). Errors are :class:`ConfigError`, whose message
names the key, the value and what is allowed.
"""
from __future__ import annotations

import math
import re
from typing import Any

from omegaconf import DictConfig, OmegaConf

from runner.schema import REPO_ROOT

COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
OPS = COLLECTIVES + ("matmul",)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "int32": 4, "int8": 1}
_UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
          "KB": 10**3, "MB": 10**6, "GB": 10**9}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?\s*$")


class ConfigError(ValueError):
    """A config value that cannot run. The message names the key and what is allowed."""


def parse_size(value: Any, key: str = "op.size_bytes") -> int:
    """``16MiB`` -> 16777216; ``1KB`` -> 1000; ints pass through. Raises ConfigError."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}={value!r}: expected a byte count such as 4096, 64KiB or 16MiB")
    if isinstance(value, int):
        n = value
    else:
        m = _SIZE_RE.match(str(value))
        if not m:
            raise ConfigError(f"{key}={value!r}: expected a byte count such as 4096, 64KiB or 16MiB "
                              f"(units: {', '.join(u for u in _UNITS if u)})")
        number, unit = float(m.group(1)), m.group(2) or ""
        n = number * _UNITS[unit]
        if n != int(n):
            raise ConfigError(f"{key}={value!r} is not a whole number of bytes")
        n = int(n)
    if n <= 0:
        raise ConfigError(f"{key}={value!r}: must be a positive number of bytes")
    return n


def format_size(n: int) -> str:
    """4096 -> '4KiB'; the inverse of :func:`parse_size` for powers of two and friends."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"


def _choices(group: str) -> list[str]:
    return sorted(p.stem for p in (REPO_ROOT / "conf" / group).glob("*.yaml"))


def build_spec(cfg: DictConfig) -> dict:
    """Check ``cfg`` without touching JAX and return the plain spec the worker runs."""
    c = OmegaConf.to_container(cfg, resolve=True)
    op, mesh, hw = c["op"], c["mesh"], c["hardware"]
    if op["name"] not in OPS:
        raise ConfigError(f"op.name={op['name']!r}: allowed ops are {', '.join(OPS)}")
    if c["dtype"] not in DTYPE_BYTES:
        raise ConfigError(f"dtype={c['dtype']!r}: allowed dtypes are {', '.join(DTYPE_BYTES)}")
    axes = mesh["axes"]
    _check_mesh_axes(axes)
    if hw["kind"] not in ("auto", "cpu", "tpu", "gpu"):
        raise ConfigError(f"hardware.kind={hw['kind']!r}: allowed kinds are auto, cpu, tpu, gpu")
    _check_timing(c["timing"], c["trace"])
    op_spec = _matmul_op(op, axes) if op["name"] == "matmul" else _collective_op(op, axes, mesh["name"], c["dtype"])
    spec = {
        "op": op_spec,
        "mesh": {"name": mesh["name"], "axes": dict(axes)},
        "hardware": hw,
        "dtype": c["dtype"],
        "timing": c["timing"],
        "trace": c["trace"],
        "check_result": c["check_result"],
    }
    from runner.distributed import check_distributed  # runner.distributed imports this module

    spec["distributed"] = check_distributed(c["distributed"], hw, axes)
    known = {n: s for n, s in axes.items() if s != -1}
    if len(known) == len(axes):  # fully known mesh: check divisibility and memory now, not in the worker
        check_shapes(spec, known)
        from runner.memory import check_fits  # imports this module

        check_fits(spec, known)
    return spec


def _check_mesh_axes(axes: dict) -> None:
    for name, size in axes.items():
        if not re.fullmatch(r"[A-Z]", name):
            raise ConfigError(f"mesh.axes: axis name {name!r} must be one capital letter (X, Y, Z, ...)")
        if size != -1 and size < 1:
            raise ConfigError(f"mesh.axes.{name}={size}: a size must be >= 1, or -1 for all the devices left")
    if sum(1 for s in axes.values() if s == -1) > 1:
        raise ConfigError(f"mesh.axes={axes}: at most one axis may be -1")


def _collective_op(op: dict, axes: dict, mesh_name: str, dtype: str) -> dict:
    if op.get("expr") is not None or op.get("dims"):
        raise ConfigError(f"op.expr / op.dims are for op=matmul; op={op['name']} takes op.axes and op.size_bytes")
    if op.get("size_bytes") is None:
        raise ConfigError(f"op.size_bytes: missing; {op['name']} needs V, e.g. op.size_bytes=16MiB")
    op_axes = list(op["axes"])
    if not op_axes:
        raise ConfigError("op.axes=[]: name at least one mesh axis to run the collective over")
    for a in op_axes:
        if a not in axes:
            raise ConfigError(f"op.axes: {a!r} is not an axis of mesh {mesh_name!r} (axes: {', '.join(axes)})")
    if len(set(op_axes)) != len(op_axes):
        raise ConfigError(f"op.axes={op_axes}: a mesh axis may appear only once")
    size_bytes = parse_size(op["size_bytes"])
    itemsize = DTYPE_BYTES[dtype]
    if size_bytes % itemsize:
        raise ConfigError(f"op.size_bytes={op['size_bytes']!r}: V={size_bytes} B is not a whole number of "
                          f"{dtype} elements ({itemsize} B each)")
    if op.get("grad") and op["name"] not in ("all_gather", "reduce_scatter"):
        raise ConfigError(f"op.grad=true: allowed only for all_gather and reduce_scatter, not {op['name']}")
    return {"name": op["name"], "axes": op_axes, "size_bytes": size_bytes, "grad": bool(op.get("grad"))}


def _matmul_op(op: dict, axes: dict) -> dict:
    from runner.matmul_plan import check_dims, parse_matmul, plan, used_axes  # imports this module

    if op.get("expr") is None:
        raise ConfigError("op.expr: missing; op=matmul needs one, e.g. 'A[I, J_X] * B[J_X, K] -> C[I, K]'")
    mm = parse_matmul(op["expr"])
    plan(mm, op["strategy"], {n: max(s, 1) for n, s in axes.items()})  # strategy fits the expression
    dims = check_dims(mm, dict(op["dims"]), None)
    return {"name": "matmul", "expr": op["expr"], "dims": dims, "strategy": op["strategy"], "axes": used_axes(mm)}


def _check_timing(timing: dict, trace: dict) -> None:
    rules = [("timing.warmup_min_iters", timing["warmup_min_iters"] >= 1, ">= 1"),
             ("timing.min_iters", timing["min_iters"] >= 3, ">= 3"),
             ("timing.max_iters", timing["max_iters"] >= timing["min_iters"], ">= timing.min_iters"),
             ("timing.target_rel_ci", 0 < timing["target_rel_ci"] < 1, "between 0 and 1 (0.05 = +-5%)"),
             ("timing.budget_s", timing["budget_s"] > 0, "> 0 seconds"),
             # bounded: thousands of unblocked CPU collectives deadlocked XLA (DESIGN.md fact 4)
             ("timing.iters_per_sample", 1 <= timing["iters_per_sample"] <= 64, "from 1 to 64"),
             ("trace.iters", trace["iters"] >= 1, ">= 1"),
             ("trace.host_tracer_level", trace["host_tracer_level"] in (None, 0, 1, 2, 3), "null, 0, 1, 2 or 3"),
             ("trace.python_tracer_level", trace["python_tracer_level"] in (0, 1), "0 or 1")]
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
        raise ConfigError(f"mesh.axes={axes}: the mesh has {total} devices but {device_count} are available; "
                          f"pick a mesh whose sizes multiply to {device_count} (allowed meshes: {', '.join(_choices('mesh'))})")
    return resolved


def shards(spec: dict, mesh_axes: dict[str, int]) -> int:
    """Number of devices in one collective group (the product of the op's axis sizes)."""
    return math.prod(mesh_axes[a] for a in spec["op"]["axes"])


def check_shapes(spec: dict, mesh_axes: dict[str, int]) -> None:
    """The array must split evenly over the op's axes (twice over for AllToAll); a matmul's
    dims over their shards."""
    if spec["op"]["name"] == "matmul":
        from runner.matmul_plan import check_dims, parse_matmul

        check_dims(parse_matmul(spec["op"]["expr"]), spec["op"]["dims"], mesh_axes)
        return
    p = shards(spec, mesh_axes)
    itemsize = DTYPE_BYTES[spec["dtype"]]
    elems = spec["op"]["size_bytes"] // itemsize
    need = p * p if spec["op"]["name"] == "all_to_all" else (1 if spec["op"]["name"] == "all_reduce" else p)
    if elems % need:
        raise ConfigError(
            f"op.size_bytes={spec['op']['size_bytes']}: {elems} {spec['dtype']} elements do not split over "
            f"{'x'.join(spec['op']['axes'])} ({p} devices); {spec['op']['name']} needs a multiple of {need} "
            f"elements, i.e. of {need * itemsize} bytes")


def check_against_devices(spec: dict, device_count: int) -> dict[str, int]:
    """Checks that need the device count; returns the resolved mesh axes."""
    mesh_axes = resolve_mesh(spec["mesh"]["axes"], device_count)
    check_shapes(spec, mesh_axes)
    return mesh_axes
