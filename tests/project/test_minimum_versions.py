"""pyproject.toml's lower bounds are what CI's minimum-versions run installs and tests (issue 37):
.ci/minimum-versions.txt pins every dependency of ``shardlab[test]`` at the bound declared."""

from __future__ import annotations

import tomllib

from packaging.requirements import Requirement
from packaging.version import Version


def _lower_bounds(requirements: list[str]) -> dict[str, Version]:
    out = {}
    for line in requirements:
        req = Requirement(line)
        (low,) = [Version(s.version) for s in req.specifier if s.operator == ">="]
        out[req.name.lower()] = low
    return out


def test_the_minimum_versions_file_pins_every_declared_lower_bound(repo_root):
    project = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]
    declared = _lower_bounds(project["dependencies"] + project["optional-dependencies"]["test"])
    pinned = {}
    for line in (repo_root / ".ci" / "minimum-versions.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pinned[name.strip().lower()] = Version(version)
    assert pinned == declared
    # the extras that name the same package say the same bound
    for extra in ("tensorboard", "dev"):
        for name, low in _lower_bounds(project["optional-dependencies"][extra]).items():
            assert declared.get(name, low) == low, (extra, name)
