"""Process-wide JAX state, set in one place, before JAX is imported.

XLA reads the virtual CPU device count and the platform from the environment once, when
JAX starts, so the worker process calls :func:`start_jax` first thing and never changes
them afterwards. A spec that needs other process-wide settings gets a fresh worker
(:func:`process_env` is the key the worker pool compares).
"""
from __future__ import annotations

import os
from pathlib import Path

DEFAULT_CPU_DEVICES = 8
CACHE_DIR = Path(os.environ.get("SHARDLAB_CACHE_DIR", Path.home() / ".cache" / "shardlab" / "jax"))


def process_env(hardware: dict) -> dict[str, str]:
    """The environment a worker for ``hardware`` must start JAX with."""
    count = hardware.get("device_count") or DEFAULT_CPU_DEVICES
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        # Harmless on TPU/GPU hosts: it only shapes the CPU backend, which JAX then does not pick.
        flags = f"{flags} --xla_force_host_platform_device_count={count}".strip()
    env = {"XLA_FLAGS": flags}
    if hardware["kind"] == "cpu":
        env["JAX_PLATFORMS"] = "cpu"
    elif os.environ.get("JAX_PLATFORMS"):
        env["JAX_PLATFORMS"] = os.environ["JAX_PLATFORMS"]
    return env


def start_jax(env: dict[str, str]):
    """Apply ``env``, import JAX, enable the persistent compilation cache; return the module."""
    import sys

    if "jax" in sys.modules:
        raise RuntimeError("start_jax must run before anything imports jax in this process")
    os.environ.update(env)
    import jax

    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(CACHE_DIR))
    # Cache even the small, fast compiles of collectives: a repeated sweep then skips them.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return jax
