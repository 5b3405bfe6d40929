"""The mutation check's copy of pyproject (tests/bench/mutation.py, ``narrow``): a run narrowed to
some modules names only them and their tests, and ``--fresh-process`` asks mutmut for a fresh
interpreter per mutant, leaving every other key of ``[tool.mutmut]`` and the file as they were."""

from __future__ import annotations

import importlib.util
import shutil
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _narrow():
    spec = importlib.util.spec_from_file_location("mutation_tool", REPO / "tests" / "bench" / "mutation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.narrow


def _section(path: Path) -> dict:
    return tomllib.loads(path.read_text())["tool"]["mutmut"]


def test_a_narrowed_fresh_process_run_names_its_modules_tests_and_isolation(tmp_path):
    copy = tmp_path / "pyproject.toml"
    shutil.copy(REPO / "pyproject.toml", copy)
    before = tomllib.loads(copy.read_text())
    _narrow()(copy, ["runner/worker/ceiling.py"], ["tests/runner/worker/test_meshes.py"], True)
    after = tomllib.loads(copy.read_text())
    mm = after["tool"]["mutmut"]
    assert (mm["only_mutate"], mm["pytest_add_cli_args_test_selection"]) == (
        ["runner/worker/ceiling.py"],
        ["tests/runner/worker/test_meshes.py"],
    )
    assert (mm["process_isolation"], mm["forkserver_warmup"]) == ("forkserver", "none")
    kept = {
        k: v
        for k, v in before["tool"]["mutmut"].items()
        if k not in ("only_mutate", "pytest_add_cli_args_test_selection")
    }
    assert {k: mm[k] for k in kept} == kept
    assert {k: v for k, v in after.items() if k != "tool"} == {k: v for k, v in before.items() if k != "tool"}


def test_fresh_process_alone_keeps_the_projects_modules_and_tests(tmp_path):
    copy = tmp_path / "pyproject.toml"
    shutil.copy(REPO / "pyproject.toml", copy)
    before = _section(copy)
    _narrow()(copy, None, None, True)
    assert _section(copy) == {**before, "process_isolation": "forkserver", "forkserver_warmup": "none"}
    shutil.copy(REPO / "pyproject.toml", copy)
    _narrow()(copy, None, None, False)
    assert _section(copy) == before


def test_every_module_and_test_the_check_names_exists():
    # a renamed test or module would leave the check quietly scoring less than it says
    import re

    mm = _section(REPO / "pyproject.toml")
    missing = [m for m in mm["only_mutate"] if not list(REPO.glob(m))]
    for entry in mm["pytest_add_cli_args_test_selection"]:
        path, _, name = entry.partition("::")
        text = (REPO / path).read_text() if (REPO / path).is_file() else ""
        if not text or (name and not re.search(rf"^def {re.escape(name)}\(", text, re.M)):
            missing.append(entry)
    assert missing == []
