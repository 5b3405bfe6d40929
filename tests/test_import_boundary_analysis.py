"""analysis/ imports at the top of its modules, but across one boundary, declared here once
(``DEFERRED``): what a light process may load only when a function needs it.

The light processes are the runner's Hydra process, which loads a few analysis modules at its
start (the book, the run-folder layout, the trace and HLO readers, the statistics, the report's
face), and ``python -m analysis`` before a command runs: its ``--help``, and a TAB, which
imports the one command's module to read its flags (analysis/cli/__init__.py imports a command's
module only then, or when the command runs). An import inside a function is on the boundary when
it brings one of ``DEFERRED`` (directly, or through a module of the project that imports it at
its top) that its module does not bring at its own top already; every other import stands at the
top, where a reader and the tools see it.

(To be merged with tests/test_layering.py's ``HEAVY`` boundary for the runner.)
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "analysis"

# -- the one deliberate boundary: what analysis imports inside a function, and only there --------
DEFERRED = (
    # heavy: the Hydra process and `python -m analysis --help` / TAB start without them
    "jax",
    "jaxlib",
    "numpy",
    "pandas",
    "matplotlib",
    "seaborn",
    "scipy",
    # optional extras: their absence is a line of advice where they are used, not an ImportError
    "tensorboard",  # the report's TensorBoard export (~0.2 s of protos): the `tensorboard` extra
    "xprof",  # `python -m analysis view`: the `xprof` extra, with its server's cheroot and werkzeug
    "cheroot",
    "werkzeug",
    "argcomplete",  # tab completion, when installed
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in (ROOT / PACKAGE).rglob("*.py")}


def imports(path: Path, known: set[str]) -> list[tuple[str, bool]]:
    """``(module, at_top)`` for every import in the file (at any depth; under ``if`` or
    ``try`` at module level counts as at the top); ``from a import b`` is ``a.b`` when that is a
    module of the project, else ``a``; a relative import is resolved."""
    tree = ast.parse(path.read_text())
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    out = []

    def visit(node: ast.AST, at_top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                out.extend((a.name, at_top) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join([*package[: len(package) - child.level + 1], *filter(None, [base])])
                for a in child.names:
                    full = f"{base}.{a.name}"
                    out.append((full if full in known else base, at_top))
            visit(child, at_top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, True)
    return out


def all_imports() -> dict[str, list[tuple[str, bool]]]:
    found = modules()
    return {m: imports(p, set(found)) for m, p in found.items()}


def deferred_of(name: str) -> str | None:
    return next((d for d in DEFERRED if name == d or name.startswith(d + ".")), None)


def brought(found: dict[str, list[tuple[str, bool]]]) -> dict[str, set[str]]:
    """For each module of the project, the ``DEFERRED`` packages importing it loads: at its top,
    through another module's top, or through a package above it (``a.b`` runs ``a/__init__.py``)."""
    tops = {}
    for m, deps in found.items():
        parts = m.split(".")
        tops[m] = {i for i, top in deps if top} | {".".join(parts[:k]) for k in range(1, len(parts))}
    out = {m: {d for i in deps if (d := deferred_of(i))} for m, deps in tops.items()}
    while True:
        grown = False
        for m, deps in tops.items():
            more = set().union(*(out.get(i, set()) for i in deps)) - out[m]
            if more:
                out[m] |= more
                grown = True
        if not grown:
            return out


def off_the_boundary(found: dict[str, list[tuple[str, bool]]]) -> list[str]:
    """Every import inside a function that defers nothing its module does not load already."""
    loads = brought(found)
    bad = []
    for m, deps in found.items():
        for i, top in deps:
            if top:
                continue
            defers = {d} if (d := deferred_of(i)) else loads.get(i, set())
            if not defers - loads[m]:
                bad.append(f"{m} imports {i} inside a function")
    return sorted(set(bad))


def test_analysis_imports_at_the_top_but_across_the_boundary():
    assert off_the_boundary(all_imports()) == []


def test_the_boundary_check_finds_a_planted_import_inside_a_function():
    found = all_imports()
    plant = {
        "analysis.runs.rundir": [("analysis.book.units", False), ("json", False)],  # light in light: off
        "analysis.report.sweep_report": [("pandas", False)],  # pandas is at its top already: off
        "analysis.cli.report": [("analysis.sweep", False)],  # pandas for a light command module: on
        "analysis.statistics.stats": [("scipy.special", False)],  # scipy is at its top (the runner's rule): off
        "analysis.book.units": [("jax.numpy", False)],  # the book stays without JAX: on
    }
    for m, extra in plant.items():
        found[m] = [*found[m], *extra]
    assert off_the_boundary(found) == [
        "analysis.report.sweep_report imports pandas inside a function",
        "analysis.runs.rundir imports analysis.book.units inside a function",
        "analysis.runs.rundir imports json inside a function",
        "analysis.statistics.stats imports scipy.special inside a function",
    ]


def test_the_cli_starts_and_reads_a_commands_flags_without_heavy_imports():
    """``python -m analysis --help`` and a TAB after a command load none of the heavy ones; the
    modules that need them import them inside ``main`` (on the boundary above)."""
    light = ("analysis.cli.report", "analysis.cli.predict", "analysis.cli.view", "analysis.cli.calibrate")
    light += ("analysis.cli.hardware", "analysis.cli.profile", "analysis.cli.import_")
    heavy = ("jax", "pandas", "matplotlib", "seaborn", "scipy", "tensorboard", "xprof")
    code = f"import sys, analysis.cli, {', '.join(light)}; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
