"""Shared test setup.

Tests that import JAX themselves need 8 CPU devices, and XLA reads that once, when JAX
starts: set it here, before any test module imports jax. (The runner's own worker process
sets it independently, in runner.config.jaxenv.)
"""

from __future__ import annotations

import os
import signal

# A shell that starts a job in the background without job control (`cmd &` in a script, nohup)
# has it ignore SIGINT, and a Python started so never installs its Ctrl-C handler: every program a
# test starts would then ignore the SIGINT the test sends it (the viewer's and the sweep's Ctrl-C
# tests hung until their timeouts, and the viewers stayed up). Caught here, SIGINT reaches the
# programs the tests start as its default again (a handler does not survive exec).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The CPU copy ceiling is cached per machine (runner.worker.copy_curve, ~/.cache/shardlab/ceiling):
# tests keep theirs in a folder of this test session, measured once and removed at the end,
# so no test reads or writes a machine-wide path.
if "SHARDLAB_CEILING_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["SHARDLAB_CEILING_DIR"] = tempfile.mkdtemp(prefix="shardlab-test-ceiling-")
    atexit.register(shutil.rmtree, os.environ["SHARDLAB_CEILING_DIR"], True)
# Workers' start-up logs (runner.sweep.workers, else the system's temp folder) likewise go to a folder
# of this session: a test that counts them never sees another shardlab's.
if "SHARDLAB_WORKER_LOG_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["SHARDLAB_WORKER_LOG_DIR"] = tempfile.mkdtemp(prefix="shardlab-test-worker-logs-")
    atexit.register(shutil.rmtree, os.environ["SHARDLAB_WORKER_LOG_DIR"], True)

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from runner.config.store import register_configs  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]  # the checkout
# the tests' shared helpers (shardlab_cli, hlo_samples, small_sweep, xspace_bytes, ...) import
# by their names from every folder of tests/: the test files are imported with
# --import-mode=importlib (pyproject.toml), which puts no folder of theirs on sys.path
HELPERS = str(Path(__file__).resolve().parent / "helpers")
if HELPERS not in sys.path:
    sys.path.insert(0, HELPERS)

CONF_DIR = str(REPO_ROOT / "conf")


@pytest.fixture(scope="session")
def compose_cfg():
    """``compose_cfg(["op=all_reduce", ...])`` -> the composed config, as ``python -m runner`` sees it."""
    register_configs()

    def _compose(overrides=(), return_hydra_config=False):
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            return compose(config_name="config", overrides=list(overrides), return_hydra_config=return_hydra_config)

    return _compose


@pytest.fixture(autouse=True)
def _fresh_caches():
    """Each test computes from scratch: a cached parse or binomial table from an earlier test
    would hide a bug planted after it was filled (the mutation check runs many tests in one
    process)."""
    from analysis.hlo.groups import parse_groups
    from analysis.statistics.stats import median_ci_ranks

    parse_groups.cache_clear()
    median_ci_ranks.cache_clear()


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def cpu_collectives_hlo() -> dict:
    """Compiled HLO text of five shard_map collectives on a 4x2 CPU mesh, compiled once per
    session in a fresh JAX process (see ``hlo_samples.compile_cpu_collectives``)."""
    from hlo_samples import compile_cpu_collectives

    return compile_cpu_collectives()


@pytest.fixture(scope="session")
def tiny_sweeps(tmp_path_factory) -> dict[str, Path]:
    """Two tiny real sweeps that differ only in dtype: AllGather and AllReduce over X at 4 sizes,
    untraced, with a small timing budget (about 10 s each). ``{"float32": dir, "bfloat16": dir}``."""
    from shardlab_cli import runner

    root = tmp_path_factory.mktemp("tiny_sweeps")
    fast = [
        "timing.rounds=1",
        "timing.budget_s=0.2",
        "timing.min_iters=5",
        "timing.warmup_max_s=0.5",
        "trace.enabled=false",
    ]
    dirs = {}
    for dtype in ("float32", "bfloat16"):
        dirs[dtype] = root / dtype
        runner(
            "+sweep=collectives_sizes",
            "op=all_gather,all_reduce",
            "op.size_bytes=4KiB,32KiB,256KiB,2MiB",
            f"dtype={dtype}",
            *fast,
            f"hydra.sweep.dir={dirs[dtype]}",
            expect=0,
        )
    return dirs
