"""The install command shardlab names when JAX came up on the CPU is the README's, word for word."""

from __future__ import annotations

import re

import pytest

from runner.errors import PlatformError
from runner.sweep.point import INSTALL, check_platform


def readme_install_lines(repo_root) -> dict[str, list[str]]:
    """The README's install table: ``{"TPU VM": ['pip install -e ".[tpu]"'], ...}``."""
    table = {}
    for line in (repo_root / "README.md").read_text().splitlines():
        m = re.match(r"^\| ([^|]+?) \| (.+) \|$", line)
        if m and "`pip install" in m.group(2):
            table[m.group(1)] = re.findall(r"`(pip install [^`]+)`", m.group(2))
    return table


def test_the_error_names_the_readmes_install_commands(repo_root):
    table = readme_install_lines(repo_root)
    assert table["TPU VM"] == ['pip install -e ".[tpu]"']
    assert INSTALL["tpu"] == table["TPU VM"][0]
    gpu = table["NVIDIA GPU, CUDA 12 / 13"]
    assert gpu == ['pip install -e ".[cuda12]"', 'pip install -e ".[cuda13]"']
    assert all(cmd in INSTALL["gpu"] for cmd in gpu) and "jax[" not in INSTALL["gpu"]


@pytest.mark.parametrize("kind,want", [("tpu", 'with pip install -e ".[tpu]", or use'), ("gpu", '".[cuda12]"')])
def test_an_accelerator_config_on_a_cpu_jax_says_it(kind, want):
    spec = {"hardware": {"kind": kind, "name": "h100" if kind == "gpu" else "tpu_v5e"}}
    with pytest.raises(PlatformError) as err:
        check_platform(spec, {"backend": "cpu", "device_count": 8, "device_kind": "cpu"})
    assert want in str(err.value) and "JAX came up on cpu" in str(err.value)
