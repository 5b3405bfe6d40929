"""shardlab on a real GPU or TPU (marker ``accelerator``; skipped where JAX finds none).

The test suite's own JAX runs on the CPU (tests/conftest.py sets ``JAX_PLATFORMS=cpu``), so
these tests neither import JAX nor ask it: a fresh process with an environment that does not
force the CPU says which backend it gets, and shardlab runs in such processes, as a user runs
it, through ``tests/helpers/shardlab_cli.py``. The steps are those of ``bash tests/accelerator/run.sh``
(``accelerator_check.py``), run once for the module: the default sweep with 2 rounds, an 8192^3
bfloat16 matmul with the result check on, the README's program with ``analysis profile``.
Run them alone with ``pytest -m accelerator``; on one H200 they take about 2 minutes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# the script beside this file (tests are imported with --import-mode=importlib: no folder of
# theirs is on sys.path)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from accelerator_check import ACCELERATOR, AGREE_WITHIN, ESTIMATORS, RATE_RANGE, accelerator_env, detect, run_all

pytestmark = pytest.mark.accelerator


@pytest.fixture(scope="module")
def device():
    found = detect(accelerator_env())
    if found["backend"] in ("cpu", "none"):
        why = f" ({found['error']})" if found.get("error") else ""
        pytest.skip(f"no GPU or TPU: a JAX process that does not force the CPU gets {found['backend']!r}{why}")
    return found


@pytest.fixture(scope="module")
def checked(device, tmp_path_factory):
    return run_all(tmp_path_factory.mktemp("accelerator"), accelerator_env(), ACCELERATOR, device)


def test_the_default_sweep_ends_with_its_report(checked):
    sweep = checked["sweep"]
    assert sweep["exit"] == 0, f"see {checked['out']}/logs/sweep.log"
    assert sweep["points"] == 17 and sweep["ok"] == 17  # 1 KiB to 64 MiB
    assert sweep["report_exists"], sweep["report"]


def test_the_big_bf16_matmul_passes_its_check_near_the_published_rate(checked):
    mm = checked["matmul"]
    assert mm["exit"] == 0 and mm["status"] == "ok", f"{mm.get('error')}; see {checked['out']}/logs/matmul.log"
    assert mm["check"]["passed"] is True
    assert mm["check_s"] is not None  # the check's cost, recorded
    assert mm["published_tflops"], f"no published bfloat16 rate for hardware {mm['hardware']!r} (conf/hardware)"
    share = mm["tflops_per_chip"]["device"] / mm["published_tflops"]
    assert RATE_RANGE[0] <= share <= RATE_RANGE[1], (
        f"device estimator {mm['tflops_per_chip']['device']:.0f} TFLOP/s per chip, "
        f"{share:.0%} of the published {mm['published_tflops']:.0f}"
    )


def test_the_three_estimators_are_there_and_agree(checked):
    medians = checked["matmul"]["median_s"]
    assert sorted(k for k, v in medians.items() if v) == sorted(ESTIMATORS), medians
    assert max(medians.values()) / min(medians.values()) <= AGREE_WITHIN, medians
    assert checked["matmul"]["estimator"] == "device"  # the default on TPU and GPU


def test_the_readme_program_profiles(checked):
    prog = checked["program"]
    assert prog["exit"] == 0, f"see {checked['out']}/logs/program.log"
    assert prog["profile_exit"] == 0 and prog["profile_json_exit"] == 0, f"see {checked['out']}/program/profile.txt"
    # its collectives where the mesh spans several chips; on one chip, where the step's time went
    assert prog["collectives"] or prog["categories"], prog
    if checked["device"]["devices"] == 1:
        assert prog["collectives"] == [] and prog["categories"], prog
