"""How the user started shardlab, and the commands it prints, quoted so that they can be pasted
back: for the POSIX shell (spaces, unicode, quotes, ``$(...)`` in a path) and, inside an
override, for Hydra's grammar (commas, quotes, ``${``)."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path


def this_command() -> str:
    """``shardlab`` when started by the console script, else ``python -m runner``."""
    return "shardlab" if Path(sys.argv[0]).name == "shardlab" else "python -m runner"


_HYDRA_PLAIN = re.compile(r"[A-Za-z0-9_./+:@%-]+")
_SHELL_SPECIAL = re.compile(r'[$`"\\!\n]')  # what is live inside the shell's double quotes


def shell_word(text: str) -> str:
    """``text`` as one shell word: as it is when nothing in it is special, in double quotes when
    only its spaces or single quotes are (a Hydra-quoted override stays readable), else in
    single quotes (``shlex.quote``)."""
    if text and shlex.quote(text) == text:
        return text
    return f'"{text}"' if not _SHELL_SPECIAL.search(text) else shlex.quote(text)


def hydra_quote(value: str) -> str:
    """``value`` as one quoted string of Hydra's override grammar: a comma, a space or a
    bracket stays part of it (unquoted, ``a,b`` is a sweep over two values), a quote and the
    backslashes before it or at the end are escaped, and ``${`` is kept literal (OmegaConf
    would resolve it)."""
    if _HYDRA_PLAIN.fullmatch(value):  # a plain path reads back as itself: printed as it is
        return value
    text = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", value)
    text = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, text)
    text = re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", text)  # OmegaConf's escape
    return "'" + text + "'"


def override(key: str, value: str) -> str:
    """``key=value`` as one shell word Hydra reads back as exactly ``value``."""
    return shell_word(f"{key}={hydra_quote(value)}")


def resume_command(sweep_dir: str, argv: list[str]) -> str:
    """The command that finishes a sweep: the same arguments (``-m`` too), its folder, resume."""
    args = [a for a in argv if not a.startswith(("hydra.sweep.dir=", "resume="))]
    return " ".join([this_command(), *map(shlex.quote, args), override("hydra.sweep.dir", sweep_dir), "resume=true"])


def analysis_command(verb: str, folder: str, *options: str) -> str:
    """``python -m analysis VERB FOLDER [OPTIONS]`` with the folder quoted for the shell."""
    return " ".join(["python -m analysis", verb, shell_word(folder), *options])
