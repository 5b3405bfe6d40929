"""The README and docs/ stay true: their links lead somewhere, their commands still compose,
their `python -m analysis` commands and flags exist, and the files they name are in the tree.

Each check was watched failing on a planted break: a link to a renamed page (docs/result.md), a
renamed anchor (#comparing), a mesh that no longer exists (mesh=xy_4x3), a sweep renamed
(+sweep=matmul_case), a hardware option misspelt in the list of groups (tpu_v5ee), an analysis
command misspelt (comparre) and a flag renamed (--dtypes), a moved source file (timings.py).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import re
import shlex
from pathlib import Path

import pytest

from analysis.cli import COMMANDS

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# Paths the docs name that a user's own command writes (calibrate's output), not files of the tree.
WRITTEN_BY_USERS = {"conf/hardware/cpu_mine.yaml"}


def rel(page: Path) -> str:
    return str(page.relative_to(REPO))


def bash_blocks(text: str) -> list[str]:
    """The commands of every ```bash block, continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"^ *```bash\n(.*?)^ *```", text, re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()  # a trailing comment
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def inline_code(text: str) -> list[str]:
    """Every `inline code` span outside fenced blocks (one may wrap onto the next line)."""
    outside = re.sub(r"^ *```.*?^ *```", "", text, flags=re.S | re.M)
    return [" ".join(span.split()) for span in re.findall(r"`([^`]+?)`", outside)]


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to '-'."""
    outside = re.sub(r"^ *```.*?^ *```", "", text, flags=re.S | re.M)
    return {
        re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", outside, re.M)
    }


def split_commands(command: str, program: str) -> list[list[str]]:
    """The argument lists of every ``program ...`` in a shell line (``a && b`` is two commands)."""
    command = re.sub(r"<(\w+)>", r"_\1_", command)  # <time> placeholders: the shell would redirect
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True  # words as the shell splits them
    commands, words = [], []
    for word in [*lexer, ";"]:
        if set(word) <= set(";&|"):
            commands.append(words)
            words = []
        else:
            words.append(word)
    head = program.split()
    return [words[len(head) :] for words in commands if words[: len(head)] == head]


def runner_commands(page: Path) -> list[tuple[str, list[str]]]:
    """``(line, overrides)`` for each ``python -m runner`` / ``shardlab`` command the page shows
    in a bash block or as inline code (placeholders such as ``...`` left out)."""
    text = page.read_text()
    found = []
    for line in bash_blocks(text) + inline_code(text):
        if "..." in line or "my_conf" in line:
            continue
        for program in ("python -m runner", "shardlab"):
            if program not in line:
                continue
            for args in split_commands(line, program):
                found.append((line, args))
    return found


def test_every_relative_link_and_anchor_leads_somewhere():
    broken = []
    for page in PAGES:
        text = page.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{rel(page)}: {target} (no file {path})")
            elif anchor and dest.suffix == ".md" and anchor not in heading_anchors(dest.read_text()):
                broken.append(f"{rel(page)}: {target} (no heading #{anchor} in {dest.name})")
    assert broken == []


def test_every_runner_command_shown_composes(compose_cfg):
    shown = [(page, line, args) for page in PAGES for line, args in runner_commands(page)]
    assert len(shown) >= 25, "the README and docs show the runner's commands"
    try:
        has_submitit = importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is not None
    except ModuleNotFoundError:  # no hydra_plugins namespace at all
        has_submitit = False
    failures = []
    for page, line, args in shown:
        if "--help" in args or "--shell-completion" in args:
            continue
        overrides = []
        skip = False
        for word in args:
            if word in ("-m", "--multirun", "--cfg", "job"):
                continue
            if word.startswith("-"):
                skip = True  # another flag of Hydra's: nothing to compose
                break
            if not has_submitit and (word.startswith("hydra/launcher=submitit") or word.startswith("hydra.launcher.")):
                continue  # the [cluster] extra's launcher: its options exist only once installed
            overrides.append(word)
        if skip:
            continue
        try:
            compose_cfg(overrides, return_hydra_config=True)
        except Exception as err:  # noqa: BLE001 - every composition error is the finding
            failures.append(f"{rel(page)}: {line}\n    {type(err).__name__}: {str(err).splitlines()[0]}")
    assert failures == []


def analysis_commands(page: Path) -> list[tuple[str, list[str], bool]]:
    """``(line, args, from_bash)`` for each ``python -m analysis`` / ``shardlab-analysis`` command."""
    text = page.read_text()
    found = []
    for lines, from_bash in ((bash_blocks(text), True), (inline_code(text), False)):
        for line in lines:
            for program in ("python -m analysis", "shardlab-analysis"):
                if program not in line or f"register-python-argcomplete {program}" in line:
                    continue  # (the completion line names the program, it does not run it)
                if not from_bash:  # inline: [--options] and | alternatives, only the command name counts
                    name = line.split(program, 1)[1].split()
                    if name and name[0] != "COMMAND":  # `shardlab-analysis COMMAND ...`: the placeholder
                        found.append((line, name[:1], False))
                    continue
                for args in split_commands(line, program):
                    found.append((line, args, True))
    return found


def test_every_analysis_command_shown_exists_with_its_options():
    shown = [(page, *cmd) for page in PAGES for cmd in analysis_commands(page)]
    assert len(shown) >= 20
    failures = []
    for page, line, args, from_bash in shown:
        if not args or args[0] not in COMMANDS:
            failures.append(f"{rel(page)}: {line} (commands: {', '.join(COMMANDS)})")
            continue
        if not from_bash or "--help" in args:
            continue
        parser = argparse.ArgumentParser(prog=args[0], exit_on_error=False, allow_abbrev=False)
        importlib.import_module(COMMANDS[args[0]][0]).add_arguments(parser)
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said):
                parser.parse_args(args[1:])
        except (argparse.ArgumentError, SystemExit) as err:
            why = said.getvalue().strip().splitlines()[-1:] or [str(err)]
            failures.append(f"{rel(page)}: {line} ({why[0]})")
    assert failures == []


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_repo_file_named_exists(page):
    named = set()
    for code in inline_code(page.read_text()):
        for path in re.findall(r"(?<![\w./])((?:runner|analysis|conf|sweeps|tests|docs|\.ci)/[\w./*<>-]*)", code):
            if re.search(r"[A-Z]{3,}|<|\*", path) or path in WRITTEN_BY_USERS:
                continue  # a placeholder (conf/op/NAME.yaml) or what a user's command writes
            named.add(path.rstrip("/."))
    missing = sorted(p for p in named if not (REPO / p).exists())
    assert missing == []


# Options the docs name on purpose though no file holds them: a user's own entry, calibrate's
# output, and the bad value that shows Hydra's error.
NOT_OPTIONS = {"my_chip", "cpu_mine", "nosuch", "nonsense", "NAME"}


def test_every_group_option_named_exists():
    """`+sweep=NAME`, `hardware=NAME`, `mesh=`, `op=`, `distributed=`, `timing=`, `+claim=` anywhere in the
    pages, and the options listed in docs/configs.md's paragraph of config groups."""
    named = set()
    for page in PAGES:
        for code in inline_code(page.read_text()) + bash_blocks(page.read_text()):
            named |= set(re.findall(r"(?<![\w.])\+?(sweep|claim|hardware|mesh|op|distributed|timing)=(\w+)", code))
    groups = (REPO / "docs" / "configs.md").read_text().split("Config groups and their options:", 1)[1]
    groups = groups.split("`claim` is internal", 1)[0]
    for group, segment in zip(("hardware", "mesh", "op"), re.split(r"`(?:mesh|op)` =", groups)):
        for word in re.findall(r"`([a-z][a-z0-9_]*)`", segment):
            if word != group and (group != "op" or re.match(r"^(all_|reduce_|matmul$|mm_)", word)):
                named.add((group, word))
    assert len(named) >= 40
    missing = sorted(
        f"{group}={option}"
        for group, option in named
        if option not in NOT_OPTIONS
        and not (REPO / ("sweeps" if group == "sweep" else f"conf/{group}") / f"{option}.yaml").is_file()
    )
    assert missing == []
