"""What ran: the environment record and the hardware entry that matches the devices."""

from __future__ import annotations

import os
import platform
import socket

import jaxlib

from analysis.book.device_kinds import resolve_auto
from runner.config.schema import hardware_record
from runner.errors import ConfigError


def environment(jax, devices) -> dict:
    """Versions, backend and devices: enough to tell two result folders apart."""
    return {
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib.__version__,
        "python_version": platform.python_version(),
        "backend": jax.default_backend(),
        "device_kind": devices[0].device_kind,
        "device_count": len(devices),
        "local_device_count": jax.local_device_count(),
        "process_count": jax.process_count(),
        "process_index": jax.process_index(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "malloc_env": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")},
        # every setting that changes what XLA, JAX, libtpu or NCCL do
        "env": {
            k: v
            for k, v in sorted(os.environ.items())
            if k in ("XLA_FLAGS", "LIBTPU_INIT_ARGS", "TPU_TOPOLOGY", "CUDA_VISIBLE_DEVICES", "TF_CPP_MIN_LOG_LEVEL")
            or k.startswith(("JAX_", "NCCL_", "XLA_PYTHON_CLIENT_", "TPU_", "LIBTPU_"))
        },
    }


def resolve_hardware(hw: dict, devices) -> dict:
    """The hardware entry to record and predict with.

    ``auto`` picks the file whose ``device_kinds`` names the devices' kind (``cpu`` when JAX
    found no accelerator), with the composed node's own ``hardware.X=...`` values over it.
    A named entry must match the platform JAX found: predicting TPU times from a CPU run
    would compare nothing.
    """
    platform_ = devices[0].platform
    kind = devices[0].device_kind
    if hw["kind"] == "auto":  # the entry that covers the devices, under the node's hardware.X=... overrides
        return hardware_record(resolve_auto(platform_, kind), hw)
    if hw["kind"] != platform_:
        raise ConfigError(
            f"hardware={hw['name']}: this entry is for {hw['kind']} devices but JAX found "
            f"{len(devices)} {platform_} device(s) ({kind}); use hardware=auto "
            f"or an entry of kind {platform_}"
        )
    return hw
