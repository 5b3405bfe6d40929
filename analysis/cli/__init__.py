"""The command line of the analysis package: ``python -m analysis <command> ...``.

One module per command, each with ``add_arguments(parser)`` and ``main(args) -> int``; this
file only wires them together, importing a module only when its command runs (so
``predict`` does not pay for pandas or matplotlib). Every command reports bad input as one
line ``error: ...`` on stderr and exits 2 (:func:`analysis.cli.options.fail`).

May import: all of :mod:`analysis` (never :mod:`runner`), at the top of a module; what brings
pandas, matplotlib, scipy or JAX only inside the function that needs it, as a TAB imports a
command's module to read its flags (the boundary: tests/project/test_layering.py).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

COMMANDS = {
    "report": ("analysis.cli.report", "rebuild the report of a multirun (or run) folder from disk"),
    "predict": ("analysis.cli.predict", "the scaling book's prediction for a collective or matmul"),
    "hlo": ("analysis.cli.hlo", "list the collectives in an HLO text file"),
    "view": ("analysis.cli.view", "open a folder's traces in XProf, bound to 127.0.0.1"),
    "compare": ("analysis.cli.compare", "compare two or more sweeps that share points"),
    "calibrate": ("analysis.cli.calibrate", "fit W and T_min to a sweep and write a hardware entry"),
    "hardware": ("analysis.cli.hardware", "list the hardware catalogue, or show which entry a device kind resolves to"),
    "profile": ("analysis.cli.profile", "what each collective of a profiled program cost, hidden or exposed"),
    "import": ("analysis.cli.import_", "read nccl-tests / accelerator-microbenchmarks output into a sweep folder"),
}


def _complete(parser: argparse.ArgumentParser, subs: dict[str, argparse.ArgumentParser]) -> None:
    """Answer a shell's tab completion through argcomplete's protocol (enabled by
    ``eval "$(register-python-argcomplete shardlab-analysis)"``) and exit; without argcomplete
    installed, return. Only the command on the line gets its options: a TAB imports one
    command's module, not all of them."""
    try:
        import argcomplete
    except ImportError:
        return
    line = os.environ.get("COMP_LINE", "")[: int(os.environ.get("COMP_POINT") or 1 << 30)]
    # _ARGCOMPLETE counts the words before the arguments: 1 for the script, 3 for python -m analysis
    args = line.split()[int(os.environ.get("_ARGCOMPLETE") or 1) :]
    if args and args[0] in subs and (len(args) > 1 or line[-1:].isspace()):
        module = importlib.import_module(COMMANDS[args[0]][0])
        module.add_arguments(subs[args[0]])
        subs[args[0]].add_argument("-h", "--help", action="help", help="show this help message and exit")
    argcomplete.autocomplete(parser)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: the process's), run the command, return its exit status."""
    argv = sys.argv[1:] if argv is None else argv
    prog = "shardlab-analysis" if Path(sys.argv[0]).name == "shardlab-analysis" else "python -m analysis"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    subs = {name: sub.add_parser(name, help=help_text, add_help=False) for name, (_, help_text) in COMMANDS.items()}
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for tab completions: answer and exit
        _complete(parser, subs)
    if not argv or argv[0] not in COMMANDS:
        parser.parse_args(argv)  # prints usage / the allowed commands and exits 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    cmd_parser = argparse.ArgumentParser(prog=f"{prog} {argv[0]}", description=COMMANDS[argv[0]][1])
    module.add_arguments(cmd_parser)
    args = cmd_parser.parse_args(argv[1:])
    try:
        return module.main(args)
    except BrokenPipeError:
        # the reader went away (``... | head``): what it wanted was printed; say nothing more.
        # Python would print a traceback, then a second one flushing stdout at exit: point
        # stdout at /dev/null first, and exit as a command killed by SIGPIPE does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        # A Ctrl-C that ended code run from a string (dataclasses build methods so) stays marked
        # "unhandled" in CPython, and ``python -m analysis`` would then die by SIGINT instead of
        # exiting 130: running string code clears the mark (see runner/sweep/ctrl_c.py).
        exec("", {})
        print("\ninterrupted", file=sys.stderr)
        return 130
