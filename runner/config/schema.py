"""Typed schemas for the YAML in ``conf/`` and the registration of ``sweeps/``.

YAML is the source of truth; these dataclasses only give it types, so OmegaConf rejects an
unknown key or a wrongly typed value while Hydra composes the config, before anything runs.
Value checks that need more than a type (allowed names, divisibility, units) live in
:mod:`runner.config.spec`.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf

from analysis.book.collectives import OPS as COLLECTIVES
from analysis.book.dtypes import PRECISIONS, RUN_DTYPES
from analysis.book.folders import project_folder
from analysis.book.hardware import YAML_KEYS, Calibration, ExpectedFactor, Hardware
from analysis.book.units import SizeError, format_size, parse_size
from analysis.runs.record import ESTIMATORS
from runner.config.matmul_plan import STRATEGIES
from runner.config.op_spec import KINDS, SHARDINGS


class Choice(str, Enum):
    """A config value from a fixed set, named as the YAML spells it. OmegaConf rejects any
    other value at composition, naming the key and the allowed values; being a ``str``, a
    member compares equal to its name and prints as it (``${op.name}`` in a folder name)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


def _choices(name: str, values) -> type[Choice]:
    return Choice(name, {v: v for v in values})


OpName = _choices("OpName", (*COLLECTIVES, *KINDS))  # the book's collectives, matmul, transformer_block, program
Sharding = _choices("Sharding", SHARDINGS)
DType = _choices("DType", RUN_DTYPES)
Precision = _choices("Precision", PRECISIONS)  # jax.lax.Precision of every matmul
Strategy = _choices("Strategy", STRATEGIES)
Estimator = _choices("Estimator", ("auto", *ESTIMATORS))  # timing estimators (imported is a record's, no choice)
Mode = _choices("Mode", ("none", "local", "auto"))  # distributed modes, see conf/distributed/
Kind = _choices("Kind", ("auto", "cpu", "tpu", "gpu"))  # hardware kinds

CONF_DIR = project_folder("conf")


# The hardware node's schema is not written here: it is the model's own reader, analysis.book.hardware.
# Hardware, retyped for OmegaConf (below), so that a hardware key is declared once and Hydra still
# refuses a wrongly typed value (hardware.link_bw_unidir_Bps=abc) before anything runs.

# How a hardware YAML spells what Hardware holds in a tuple (Hardware.from_dict reads it back).
_AS_YAML = {
    tuple[str, ...]: list[str],
    tuple[Calibration, ...]: list[dict[str, Any]],
    tuple[ExpectedFactor, ...]: dict[str, Any],  # expected: {source, inside: {...}, across: {...}, nccl}
}


def _schema_of(model: type, keys: tuple[str, ...], name: str, types: dict[str, Any]) -> type:
    """A dataclass OmegaConf can check with ``model``'s fields named in ``keys``, in its order:
    a tuple typed as the list or mapping YAML spells it as (:data:`_AS_YAML`), empty by default;
    a field without a default required (``MISSING``); ``types`` replaces a field's type (an
    enum of the allowed values). Every other type and default is the model's."""
    hints = typing.get_type_hints(model)
    out = []
    for f in dataclasses.fields(model):
        if f.name not in keys:
            continue
        typ = types.get(f.name) or _AS_YAML.get(hints[f.name], hints[f.name])
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            default = field(default=MISSING)
        elif hints[f.name] in _AS_YAML:
            if f.default != ():
                raise TypeError(f"{model.__name__}.{f.name}: a tuple field of the schema must default to ()")
            default = field(default_factory=typing.get_origin(typ))
        else:
            default = field(default=f.default, default_factory=f.default_factory)
        out.append((f.name, typ, default))
    doc = f"{model.__module__}.{model.__name__}'s YAML keys, typed for OmegaConf (by _schema_of)."
    return dataclasses.make_dataclass(name, out, namespace={"__module__": __name__, "__doc__": doc})


HardwareConf = _schema_of(Hardware, YAML_KEYS, "HardwareConf", types={"kind": Kind})  # Hardware's YAML keys


def hardware_record(entry: dict, node: dict) -> dict:
    """What a ``hardware=auto`` run records in ``result.json`` and predicts with: every key of
    :class:`HardwareConf`, from ``entry`` (the catalogue entry the devices resolved to), with
    what the composed ``node`` sets beyond its name and kind laid over it, so that
    ``hardware.hop_latency_s=...`` on the command line reaches the model. (An ``auto`` node
    holds the schema's defaults elsewhere: a key still at its default was not set.)"""
    defaults = {
        f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        for f in dataclasses.fields(HardwareConf)
        if f.default is not MISSING
    }
    out = {**entry, **{k: v for k, v in defaults.items() if k not in entry}}
    for key, value in node.items():
        if key in defaults and key not in ("name", "kind") and value != defaults[key]:
            out[key] = _merged(out.get(key), value)
    return out


def _merged(base: Any, over: Any) -> Any:
    # as Hydra merges a dict override into a named entry's dict (flops_per_s.float32=...)
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: _merged(base.get(k), v) for k, v in over.items()}}
    return over


@dataclass
class MeshConf:
    name: str = MISSING
    axes: dict[str, int] = MISSING  # axis name -> size; -1 = all the devices left
    # "2x4": axes X=2, Y=4 (then Z, W, ...), replacing `axes`: a new shape from the command
    # line (a dict override can only change the axes a mesh file already has)
    shape: str | None = None


@dataclass
class OpConf:
    name: OpName = MISSING
    # collectives:
    axes: list[str] = field(default_factory=lambda: ["X"])
    size_bytes: Any = None  # int or a string with a unit: "16MiB", "1KiB", "4096"
    grad: bool = False  # all_gather / reduce_scatter: run jax.grad through it (the backward pass)
    # matmul:
    expr: str | None = None  # the book's notation, e.g. "A[I, J_X] * B[J_X, K] -> C[I, K]"
    # global size of each dim, e.g. {I: 1024}; null by default so that `op.dims={...}` sets new
    # keys (a dict override merges into an existing dict, which refuses keys it lacks)
    dims: Any = None  # a dict (Any: a typed dict node holding null cannot take a dict override)
    strategy: Strategy = Strategy.auto  # see runner/config/matmul_plan.py
    # transformer_block (runner/worker/programs/block.py): FSDP, tensor parallel, or both
    sharding: Sharding = Sharding.fsdp
    # program (runner/worker/programs/user.py): a user's function and its arguments in the book's
    # notation, sized by op.dims
    target: str | None = None
    inputs: list[str] = field(default_factory=list)


@dataclass
class TimingConf:
    estimator: Estimator = Estimator.auto  # the estimator the tables and fits use
    rounds: int = 5  # rounds per point at most (2 when they agree); a sweep interleaves them, shuffled
    seed: int = 0  # of the rounds' shuffles and the intervals' bootstrap
    warmup_min_iters: int = 3
    warmup_max_s: float = 2.0
    min_iters: int = 5
    max_iters: int = 2000
    target_rel_ci: float = 0.05  # stop a round once its median's 95% CI is within +-5% of it
    budget_s: float = 0.25  # per point and round, timed iterations only
    later_budget_s: float = 0.1  # the same in a later round (2 on): the spread between rounds sets the interval
    iters_per_sample: int = 1
    loop: bool = True  # also time the program repeated K times in one call (the loop estimator)
    loop_target_s: float = 0.02  # K is chosen so one loop call takes about this long
    loop_max_samples: int = 30
    # where the step is the source (CPU): no loop cross-check once round 1's step takes this long
    loop_check_below_s: float | None = 0.02
    ceiling: bool = True  # CPU: measure the copy-curve ceiling (false: none); TPU/GPU: the roofline stays


@dataclass
class TraceConf:
    enabled: bool = True
    iters: int = 10
    max_s: float = 0.5  # trace no step that would end after this long (at least 2 steps)
    # traced steps where the trace is for inspection only (the estimator is not device); None: iters
    inspect_iters: int | None = None
    # max_s there (the estimator is not device): its device times are no headline (CPU under auto)
    inspect_max_s: float = 0.1
    gpu_command_buffers: bool = False  # false: XLA's GPU command buffers off, so every op has its own time
    python_tracer_level: int = 0
    host_tracer_level: int | None = None  # None: per backend, see conf/config.yaml


@dataclass
class DistributedConf:
    mode: Mode = Mode.none
    num_processes: int | None = None
    devices_per_process: int | None = None
    process_id: int | None = None
    coordinator_address: str | None = None  # "host:port" of process 0
    cross_process_axis: str | None = None  # a mesh axis laid across the processes
    timeout_s: float = 60.0  # how long processes may wait for each other (join, finish a point)


@dataclass
class CheckConf:
    """Acceptance checks on a sweep's numbers, applied after its report is written."""

    # fail the sweep (exit 3) when a family's average bus bandwidth is below this, in GB/s
    # (decimal, as nccl-tests' check_avg_bw); None: no bar
    min_busbw_GBps: float | None = None


@dataclass
class SizesConf:
    """A geometric range of sizes for a sweep: ``min``, ``min*factor``, ... up to ``max``.
    The ``*_sizes`` sweeps hand it to ``op.size_bytes`` through the ``geometric`` resolver,
    so ``sizes.max=1GiB`` on the command line sweeps every power of two up to 1 GiB."""

    min: Any = "1KiB"
    max: Any = "64MiB"
    factor: int = 2


@dataclass
class Config:
    hardware: HardwareConf = MISSING
    mesh: MeshConf = MISSING
    op: OpConf = MISSING
    distributed: DistributedConf = field(default_factory=DistributedConf)
    dtype: DType = DType.float32
    precision: Precision = Precision.default  # of the matmuls (op=matmul, transformer_block)
    timing: TimingConf = field(default_factory=TimingConf)
    trace: TraceConf = field(default_factory=TraceConf)
    timeout_s: float = 600.0  # a sweep point that runs longer is killed and recorded as failed
    check_result: bool = True
    resume: bool = False  # in a multirun: keep points whose result.json is ok for this config
    overwrite: bool = False  # measure again into a folder that holds results, replacing them
    sizes: SizesConf = field(default_factory=SizesConf)  # read only by sweeps (see SizesConf)
    check: CheckConf = field(default_factory=CheckConf)


# Keys that have a new name: the old key -> (the new key, what it allows). *source* is a
# hardware entry's citation; the choice of timing estimator was timing.source (result.json format_version 1).
RENAMED = {"timing.source": ("timing.estimator", "auto, " + ", ".join(ESTIMATORS[:-1]) + " or " + ESTIMATORS[-1])}


def renamed(key: str, value: Any) -> str:
    """The one line that refuses ``key`` (a key of :data:`RENAMED`) and names its new key."""
    new, allowed = RENAMED[key]
    return f"{key} is now {new} ({allowed}): use {new}={value}"


def renamed_override(overrides: list[str]) -> str | None:
    """The line refusing the first command-line override (``timing.source=step,loop``,
    ``+timing.source=loop``) of a key that was renamed, or None."""
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key in RENAMED:
            return renamed(key, value)
    return None


def unknown_key(cfg: DictConfig, prefix: str = "") -> str | None:
    """The first key of ``cfg`` that its schema does not have, with the keys it does, or None.

    Hydra's ``+key=value`` adds a key even to a typed config (``+op.sise_bytes=1KiB`` is
    accepted, and the default size would run); this refuses it before anything runs. A key
    that was renamed (:data:`RENAMED`) is refused with its new name."""
    kind = OmegaConf.get_type(cfg)
    if dataclasses.is_dataclass(kind):
        names = [f.name for f in dataclasses.fields(kind)]
        for key in cfg.keys():
            if f"{prefix}{key}" in RENAMED:
                return renamed(f"{prefix}{key}", cfg._get_node(key)._value())
            if key not in names:
                where = prefix.rstrip(".") or "the config"
                return f"{prefix}{key}: {where} has no such key; its keys are {', '.join(names)}"
    for key in cfg.keys():
        node = cfg._get_node(key)
        if isinstance(node, DictConfig) and dataclasses.is_dataclass(OmegaConf.get_type(node)):
            found = unknown_key(node, f"{prefix}{key}.")
            if found:
                return found
    return None


def geometric(low: Any, high: Any, factor: Any = 2) -> str:
    """``${geometric:1KiB,64MiB,2}`` -> ``"1KiB,2KiB,...,64MiB"``: a sweep list (each size
    spelled exactly, as :func:`format_size` writes it)."""
    lo, hi = parse_size(low, "sizes.min"), parse_size(high, "sizes.max")
    if int(factor) < 2 or int(factor) != float(factor):
        raise SizeError(f"sizes.factor={factor!r}: must be a whole number >= 2")
    if hi < lo:
        raise SizeError(f"sizes.max={high!r} is below sizes.min={low!r}")
    out, v = [], lo
    while v <= hi:
        out.append(format_size(v))
        v *= int(factor)
    return ",".join(out)
