"""The worker's environment: the CPU backend's malloc settings only where the worker will run
JAX on the CPU, decided from the configured hardware before the worker starts."""

from __future__ import annotations

import pytest

from runner.config import jaxenv
from runner.config.jaxenv import MALLOC_ENV, cpu_backend, process_env
from runner.config.spec import build_spec


@pytest.fixture
def no_caller_malloc(monkeypatch):
    for key in MALLOC_ENV:  # the caller's own settings would win over ours
        monkeypatch.delenv(key, raising=False)


def _env(compose_cfg, *overrides) -> dict:
    spec = build_spec(compose_cfg(list(overrides)))
    return process_env(spec["hardware"], spec["distributed"])


@pytest.mark.parametrize("hardware", ["tpu_v5e", "tpu_v6e", "h100", "mi300x"])
def test_a_tpu_or_gpu_worker_gets_none_of_the_cpu_malloc_settings(compose_cfg, no_caller_malloc, hardware):
    env = _env(compose_cfg, f"hardware={hardware}")
    assert not [k for k in env if k.startswith("MALLOC_")]


def test_a_cpu_worker_gets_all_of_them(compose_cfg, no_caller_malloc):
    for overrides in (["hardware=cpu"], ["distributed=local"]):
        env = _env(compose_cfg, *overrides)
        assert {k: env[k] for k in MALLOC_ENV} == MALLOC_ENV
        assert env["MALLOC_ARENA_MAX"] == "1"


def test_hardware_auto_follows_jax_platforms_then_what_is_installed(monkeypatch, no_caller_malloc):
    auto = {"name": "auto", "kind": "auto"}
    monkeypatch.setenv("JAX_PLATFORMS", "cuda,cpu")
    assert not cpu_backend(auto) and "MALLOC_ARENA_MAX" not in process_env(auto)
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert cpu_backend(auto) and process_env(auto)["MALLOC_ARENA_MAX"] == "1"
    monkeypatch.delenv("JAX_PLATFORMS")
    monkeypatch.setattr(jaxenv, "_accelerator_installed", lambda: True)  # libtpu or a PJRT plugin
    assert not cpu_backend(auto) and "MALLOC_ARENA_MAX" not in process_env(auto)
    monkeypatch.setattr(jaxenv, "_accelerator_installed", lambda: False)
    assert cpu_backend(auto) and process_env(auto)["MALLOC_ARENA_MAX"] == "1"


def test_an_installed_tpu_runtime_or_plugin_counts_as_an_accelerator(monkeypatch, tmp_path):
    (tmp_path / "jax_plugins" / "xla_cuda12").mkdir(parents=True)  # the namespace package jax scans
    (tmp_path / "jax_plugins" / "xla_cuda12" / "__init__.py").write_text("")
    assert not jaxenv._accelerator_installed()  # this machine: none
    monkeypatch.syspath_prepend(str(tmp_path))
    assert jaxenv._accelerator_installed()
