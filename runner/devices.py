"""What ran: the environment record and the hardware entry that matches the devices."""
from __future__ import annotations

import functools
import platform
import socket

from omegaconf import OmegaConf

from runner.schema import REPO_ROOT
from runner.spec import ConfigError

HARDWARE_DIR = REPO_ROOT / "conf" / "hardware"


def environment(jax, devices) -> dict:
    """Versions, backend and devices: enough to tell two result folders apart."""
    import jaxlib

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
    }


@functools.lru_cache(maxsize=1)
def _entries() -> list[dict]:
    # Read once per worker: OmegaConf takes milliseconds a file, every point would pay it.
    return [OmegaConf.to_container(OmegaConf.load(p)) for p in sorted(HARDWARE_DIR.glob("*.yaml"))]


def resolve_hardware(hw: dict, devices) -> dict:
    """The hardware entry to record and predict with.

    ``auto`` picks the file whose ``device_kinds`` names the devices' kind (``cpu`` when JAX
    found no accelerator). A named entry must match the platform JAX found: predicting TPU
    times from a CPU run would compare nothing.
    """
    platform_ = devices[0].platform
    kind = devices[0].device_kind
    if hw["kind"] == "auto":
        wanted = "cpu" if platform_ == "cpu" else kind.lower()
        for entry in _entries():
            if entry.get("kind") != ("cpu" if platform_ == "cpu" else platform_):
                continue
            names = [k.lower() for k in entry.get("device_kinds", [])]
            if wanted in names or any(n in wanted for n in names if len(n) > 3):
                return entry
        return {"name": f"unknown_{platform_}", "kind": platform_, "device_kinds": [kind],
                "source": f"no conf/hardware entry names device kind {kind!r}; model constants unknown"}
    if hw["kind"] != platform_:
        raise ConfigError(f"hardware={hw['name']}: this entry is for {hw['kind']} devices but JAX found "
                          f"{len(devices)} {platform_} device(s) ({kind}); use hardware=auto "
                          f"or an entry of kind {platform_}")
    return hw
