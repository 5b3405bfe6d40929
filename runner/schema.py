"""Typed schemas for the YAML in ``conf/`` and the registration of ``sweeps/``.

YAML is the source of truth; these dataclasses only give it types, so OmegaConf rejects an
unknown key or a wrongly typed value while Hydra composes the config, before anything runs.
Value checks that need more than a type (allowed names, divisibility, units) live in
:mod:`runner.spec`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

REPO_ROOT = Path(__file__).resolve().parents[1]
SWEEPS_DIR = REPO_ROOT / "sweeps"


@dataclass
class HardwareConf:
    name: str = MISSING
    kind: str = MISSING  # auto | cpu | tpu | gpu
    device_kinds: list[str] = field(default_factory=list)
    device_count: Optional[int] = None
    interconnect: Optional[str] = None  # torus | switch | host
    wraparound: Optional[str] = None  # always | never | multiple_of_4 | only_16
    topology: Optional[str] = None  # physical slice shape, e.g. "4x4x4"; None = each mesh axis its own
    link_bw_unidir_Bps: Optional[float] = None
    link_bw_bidir_Bps: Optional[float] = None
    hop_latency_s: Optional[float] = None
    hbm_bw_Bps: Optional[float] = None
    flops_per_s: dict[str, float] = field(default_factory=dict)
    device_kind_patterns: list[str] = field(default_factory=list)  # anchored regexes (analysis.book.hardware)
    memory_bytes: Optional[float] = None  # HBM capacity per JAX device
    domain_size: Optional[int] = None  # devices in one fast domain: NVLink domain, TPU pod/slice limit
    node_bw_unidir_Bps: Optional[float] = None  # per GPU, to GPUs of its node outside its NVLink domain (PCIe)
    scaleout_network: Optional[str] = None  # beyond a domain, e.g. "InfiniBand NDR", "DCN"
    scaleout_bw_unidir_Bps: Optional[float] = None  # per device, one direction
    scaleout_latency_s: Optional[float] = None
    source: str = ""
    # measured W and T_min per collective, written by `python -m analysis calibrate`
    calibrated: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class MeshConf:
    name: str = MISSING
    axes: dict[str, int] = MISSING  # axis name -> size; -1 = all the devices left
    # "2x4": axes X=2, Y=4 (then Z, W, ...), replacing `axes`: a new shape from the command
    # line (a dict override can only change the axes a mesh file already has)
    shape: Optional[str] = None


@dataclass
class OpConf:
    name: str = MISSING  # all_gather | reduce_scatter | all_reduce | all_to_all | matmul
    # collectives:
    axes: list[str] = field(default_factory=lambda: ["X"])
    size_bytes: Any = None  # int or a string with a unit: "16MiB", "1KiB", "4096"
    grad: bool = False  # all_gather / reduce_scatter: run jax.grad through it (the backward pass)
    # matmul:
    expr: Optional[str] = None  # the book's notation, e.g. "A[I, J_X] * B[J_X, K] -> C[I, K]"
    dims: dict[str, int] = field(default_factory=dict)  # global size of each dim, e.g. {I: 1024}
    strategy: str = "auto"  # see runner/matmul_plan.py STRATEGIES


@dataclass
class TimingConf:
    source: str = "auto"  # estimator the tables and fits use: auto | step | loop | device
    rounds: int = 5  # rounds per point; a sweep interleaves them, shuffled, over its points
    seed: int = 0  # of the rounds' shuffles and the intervals' bootstrap
    warmup_min_iters: int = 3
    warmup_max_s: float = 2.0
    min_iters: int = 10
    max_iters: int = 2000
    target_rel_ci: float = 0.05  # stop a round once its median's 95% CI is within +-5% of it
    budget_s: float = 1.0  # per point and round, timed iterations only
    iters_per_sample: int = 1
    loop: bool = True  # also time the program repeated K times in one call (the loop estimator)
    loop_target_s: float = 0.02  # K is chosen so one loop call takes about this long
    loop_max_samples: int = 30


@dataclass
class TraceConf:
    enabled: bool = True
    iters: int = 10
    max_s: float = 2.0  # stop tracing after this long (at least 2 steps)
    gpu_command_buffers: bool = False  # false: XLA's GPU command buffers off, so every op has its own time
    python_tracer_level: int = 0
    host_tracer_level: Optional[int] = None  # None: per backend, see conf/config.yaml


@dataclass
class DistributedConf:
    mode: str = "none"  # none | local | auto (see conf/distributed/)
    num_processes: Optional[int] = None
    devices_per_process: Optional[int] = None
    process_id: Optional[int] = None
    coordinator_address: Optional[str] = None  # "host:port" of process 0
    cross_process_axis: Optional[str] = None  # a mesh axis laid across the processes
    timeout_s: float = 60.0  # how long processes may wait for each other (join, finish a point)


@dataclass
class Config:
    hardware: HardwareConf = MISSING
    mesh: MeshConf = MISSING
    op: OpConf = MISSING
    distributed: DistributedConf = field(default_factory=DistributedConf)
    dtype: str = "float32"
    timing: TimingConf = field(default_factory=TimingConf)
    trace: TraceConf = field(default_factory=TraceConf)
    timeout_s: float = 600.0  # a sweep point that runs longer is killed and recorded as failed
    check_result: bool = True
    resume: bool = False  # in a multirun: keep points whose result.json is ok for this config


def register_configs() -> None:
    """Register the schema and every ``sweeps/*.yaml`` as ``+sweep=NAME`` (global package)."""
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    for path in sorted(SWEEPS_DIR.glob("*.yaml")):
        cs.store(group="sweep", name=path.stem, node=OmegaConf.load(path), package="_global_")
