"""Process-wide JAX state, set in one place, before JAX is imported.

XLA reads the virtual CPU device count and the platform from the environment once, when
JAX starts, and ``jax.distributed.initialize`` must run before anything touches a device,
so the worker process calls :func:`start_jax` first thing and never changes them
afterwards. A spec that needs other process-wide settings gets a fresh worker
(:func:`process_env` is the key the worker pool compares).

Multi-process runs (``distributed=local`` or ``auto``) travel in the same environment, under
the ``SHARDLAB_DIST_*`` names below; :func:`start_jax` turns them into
``jax.distributed.initialize`` before returning JAX.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import pkgutil
import re
import signal
import sys
from pathlib import Path

from runner.errors import ConfigError

DEFAULT_CPU_DEVICES = 8
CACHE_DIR = Path(os.environ.get("SHARDLAB_CACHE_DIR", Path.home() / ".cache" / "shardlab" / "jax"))

# How a worker learns its part in a multi-process run (set by process_env and, per process,
# by runner.sweep.distributed.ProcessGroup). Absent or "none": a single process, as before.
MODE_ENV = "SHARDLAB_DIST_MODE"  # none | local | auto
NUM_PROCESSES_ENV = "SHARDLAB_DIST_NUM_PROCESSES"
PROCESS_ID_ENV = "SHARDLAB_DIST_PROCESS_ID"
COORDINATOR_ENV = "SHARDLAB_DIST_COORDINATOR"
TIMEOUT_ENV = "SHARDLAB_DIST_TIMEOUT_S"
_DEVICE_COUNT_FLAG = re.compile(r"--xla_force_host_platform_device_count=\S*")
# glibc's malloc serves buffers of 32 MiB and more with mmap and hands them back to the OS
# when freed, so every step faulted its output in again: 58k minor faults per step for a
# 32 MiB AllGather against 5.5k at 16 MiB, 75 ms a step against 15 ms with a higher mmap
# threshold. That alone left 64 MiB at 131k faults (every output page, every step) and
# 186 ms: XLA's device threads allocate from per-thread arenas, whose heaps stop at 64 MiB,
# so a 64 MiB buffer still came from mmap. One arena and a 1 GiB top pad: 7k faults and
# 28 ms, 54 ms at 128 MiB (glibc 2.36, jax 0.10.2). glibc reads these once, when the process
# starts, so the worker is started with them - on the CPU backend only (:func:`cpu_backend`):
# TPU and GPU buffers live in device memory, and one arena would serialise the host threads
# that feed the device for nothing.
MALLOC_ENV = {
    "MALLOC_MMAP_THRESHOLD_": "1073741824",
    "MALLOC_TRIM_THRESHOLD_": "4294967296",
    "MALLOC_TOP_PAD_": "1073741824",
    "MALLOC_ARENA_MAX": "1",
}


def process_env(hardware: dict, distributed: dict | None = None, command_buffers: bool = False) -> dict[str, str]:
    """The environment a worker for ``hardware`` (and ``distributed``) must start JAX with;
    ``command_buffers`` keeps XLA's GPU command buffers on (``trace.gpu_command_buffers``)."""
    dist = distributed or {"mode": "none"}
    flags = os.environ.get("XLA_FLAGS", "")
    if dist["mode"] == "local":
        # Each local process gets its share of the mesh, whatever the caller's flags said.
        flags = _DEVICE_COUNT_FLAG.sub("", flags).strip()
        count = dist["devices_per_process"]
    else:
        count = hardware.get("device_count") or DEFAULT_CPU_DEVICES
    if not command_buffers and "xla_gpu_enable_command_buffer" not in flags:
        # On GPU, XLA runs runs of fusions and GEMMs as CUDA graphs whose kernels the trace
        # attributes to command_buffer_N, losing per-op times and compute/collective overlap.
        # An empty list turns command buffers off (harmless on CPU and TPU).
        flags = f"{flags} --xla_gpu_enable_command_buffer=".strip()
    if "xla_force_host_platform_device_count" not in flags:
        # Harmless on TPU/GPU hosts: it only shapes the CPU backend, which JAX then does not pick.
        flags = f"{flags} --xla_force_host_platform_device_count={count}".strip()
    env = {"XLA_FLAGS": flags}
    # the caller's own malloc settings win
    if cpu_backend(hardware, dist) and not any(k in os.environ for k in MALLOC_ENV):
        env.update(MALLOC_ENV)
    if hardware["kind"] == "cpu" or dist["mode"] == "local":
        env["JAX_PLATFORMS"] = "cpu"
    elif os.environ.get("JAX_PLATFORMS"):
        env["JAX_PLATFORMS"] = os.environ["JAX_PLATFORMS"]
    if dist["mode"] != "none":
        env[MODE_ENV] = dist["mode"]
        env[TIMEOUT_ENV] = str(int(dist["timeout_s"]))
        for key, name in (
            (NUM_PROCESSES_ENV, "num_processes"),
            (PROCESS_ID_ENV, "process_id"),
            (COORDINATOR_ENV, "coordinator_address"),
        ):
            if dist.get(name) is not None:
                env[key] = str(dist[name])
    return env


# What makes JAX pick an accelerator when JAX_PLATFORMS does not say: the TPU runtime, or a
# PJRT plugin (jax-cuda*-plugin, jax-rocm*-plugin) under the `jax_plugins` namespace package or
# entry point, as jax._src.xla_bridge discovers them.
_TPU_RUNTIME = "libtpu"
_PLUGIN_NAMESPACE = "jax_plugins"


def _accelerator_installed() -> bool:
    """Whether a TPU runtime or a PJRT accelerator plugin is installed (nothing is imported).
    Looked up once per ``sys.path``: a sweep asks at every round of every point, and reading
    the installed packages' entry points took 25-50 ms a call here."""
    return _accelerator_on(tuple(sys.path))


@functools.lru_cache(maxsize=8)
def _accelerator_on(path: tuple[str, ...]) -> bool:
    if importlib.util.find_spec(_TPU_RUNTIME) is not None:
        return True
    if importlib.metadata.entry_points(group=_PLUGIN_NAMESPACE):
        return True
    namespace = importlib.util.find_spec(_PLUGIN_NAMESPACE)
    if namespace is None or not namespace.submodule_search_locations:
        return False
    return any(True for _ in pkgutil.iter_modules(list(namespace.submodule_search_locations)))


def cpu_backend(hardware: dict, distributed: dict | None = None) -> bool:
    """Whether a worker for ``hardware`` will run JAX on the CPU backend, decided before it
    starts (glibc reads the malloc settings only then): ``distributed=local`` and
    ``hardware=cpu`` are CPU, a TPU or GPU entry is not; ``hardware=auto`` follows
    ``JAX_PLATFORMS`` (its first platform) where set, else whether an accelerator runtime is
    installed for JAX to find."""
    if (distributed or {}).get("mode") == "local" or hardware.get("kind") == "cpu":
        return True
    if hardware.get("kind") not in (None, "auto"):
        return False
    platforms = os.environ.get("JAX_PLATFORMS", "").strip()
    if platforms:
        return platforms.split(",")[0].strip() == "cpu"
    return not _accelerator_installed()


def start_jax(env: dict[str, str]):
    """Apply ``env``, import JAX, enable the persistent compilation cache, join the other
    processes if ``env`` says so; return the module."""
    if "jax" in sys.modules:
        raise RuntimeError("start_jax must run before anything imports jax in this process")
    os.environ.update(env)
    import jax

    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(CACHE_DIR))
    # Cache even the small, fast compiles of collectives: a repeated sweep then skips them.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    _start_distributed(jax, env)
    return jax


def _start_distributed(jax, env: dict[str, str]) -> None:
    """``jax.distributed.initialize`` for ``local`` and ``auto``; nothing for ``none``.

    ``timeout_s`` bounds the wait for the other processes to join (JAX aborts this process
    when it runs out, which the parent reports) and the wait for them at shutdown.
    """
    mode = env.get(MODE_ENV, "none")
    if mode == "none":
        return
    timeout_s = int(env[TIMEOUT_ENV])
    limits = {"initialization_timeout": timeout_s, "shutdown_timeout_seconds": timeout_s}
    if mode == "local":
        coordinator = env[COORDINATOR_ENV]
        # CPU collectives between processes go through gloo over TCP (the default CPU collectives
        # are in-process only; with gloo, 2 processes x 4 devices gave a correct 8-device psum).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        # Bind the coordinator to 127.0.0.1 only; by default it listens on every interface.
        jax.distributed.initialize(
            coordinator,
            num_processes=int(env[NUM_PROCESSES_ENV]),
            process_id=int(env[PROCESS_ID_ENV]),
            coordinator_bind_address=coordinator,
            **limits,
        )
        _gloo_on_loopback()
    else:
        # auto: a cluster (TPU pod slice, SLURM, Open MPI) tells JAX who and where it is;
        # values from the config, when given, take precedence over detection.
        given = {
            "coordinator_address": env.get(COORDINATOR_ENV),
            "num_processes": int(env[NUM_PROCESSES_ENV]) if NUM_PROCESSES_ENV in env else None,
            "process_id": int(env[PROCESS_ID_ENV]) if PROCESS_ID_ENV in env else None,
        }
        try:
            jax.distributed.initialize(**{k: v for k, v in given.items() if v is not None}, **limits)
        except ValueError as exc:
            if "coordinator_address" not in str(exc):
                raise
            raise ConfigError(
                "distributed=auto found no cluster to join (JAX: coordinator_address should be defined): run it "
                "under SLURM, Open MPI or on a TPU pod slice, or give distributed.coordinator_address, "
                "distributed.num_processes and distributed.process_id; distributed=none runs on this host alone"
            ) from None
    # initialize() installs JAX's preemption notifier, which catches SIGTERM and carries on; a
    # worker must still end when its parent terminates it (multiprocessing does so at exit).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _gloo_on_loopback() -> None:
    """Make gloo listen on 127.0.0.1 rather than on the address the host name resolves to.

    Anything shardlab launches listens on loopback only, but JAX's CPU
    backend creates gloo without a host name, so gloo binds to whatever ``gethostname()``
    resolves to. JAX has no public option for it: replace the CPU backend factory (private
    API) before the backend exists. If JAX's internals changed, keep its default.
    """
    try:
        from jax._src import distributed, xla_bridge
        from jax._src.lib import _jax

        def cpu_client_on_loopback():
            collectives = _jax.make_gloo_tcp_collectives(
                distributed_client=distributed.global_state.client, hostname="127.0.0.1"
            )
            return xla_bridge.make_cpu_client(collectives=collectives)

        xla_bridge.register_backend_factory("cpu", cpu_client_on_loopback, priority=0, fail_quietly=False)
    except (ImportError, AttributeError, TypeError, RuntimeError) as exc:
        print(f"shardlab: could not bind gloo to 127.0.0.1 ({exc}); using JAX's default", flush=True)
