"""The house's layering, read from the code's own imports (every import statement, at any
depth, so a lazy import cannot hide a circle):

* ``analysis`` never imports ``runner``;
* ``analysis.book`` imports nothing else of the project, and nothing heavy at module level;
* ``runner`` takes from ``analysis`` only the book, the run-folder layout, the trace and HLO
  readers and the timing statistics (and the report, once, at the end of a sweep);
* the runner's rooms follow its process boundary: ``runner.worker`` (the JAX process) never
  imports ``runner.sweep`` (the Hydra process), and ``runner.config`` (what both need: the
  schema, the spec the worker receives and its checks) imports neither;
* the analysis's rooms stand in order: ``analysis.runs`` (folders read) under
  ``analysis.statistics`` under ``analysis.profiling``, all three under ``analysis.sweep``,
  the report and the command line; at most 12 modules stand beside them at its top level;
* no module imports itself back through others (no circles);
* ``python -m runner`` starts without jax, pandas or matplotlib (they load in the worker and
  for the report);
* the runner imports at the top of its modules, but across one boundary, declared here once
  (``HEAVY``, ``SWEEP_SIDE_WHEN_CALLED``): what its processes load only when they need it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("runner", "analysis")
# -- the one deliberate boundary: what the runner imports inside a function, and only there ------
# Every other import stands at the top of its module, where a reader and the tools see it
# (test_the_runner_imports_at_the_top_but_across_the_boundary). Inside a function:
# * HEAVY, and any module of the project that imports one of them at its top: the Hydra process
#   starts without them, never loads JAX and loads the rest only when a sweep needs them (its later
#   rounds, its report: in the report's own process, once it has lowered its priority); the worker
#   imports JAX only once runner.config.jaxenv.start_jax has set the process's settings;
HEAVY = ("jax", "jaxlib", "numpy", "pandas", "matplotlib", "seaborn", "scipy")
# * the sweep side (Hydra), from the two modules every worker process imports again: the package
#   (``from runner import run``) and ``python -m runner`` (the worker's ``__mp_main__``; a Ctrl-C
#   while Hydra loads is answered there in two lines).
SWEEP_SIDE_WHEN_CALLED = {
    "runner": ("runner.sweep.point",),
    "runner.__main__": ("runner.sweep.app", "runner.sweep.pool"),
}
# the packages held to it (analysis joins once its own imports stand at the top)
IMPORTS_AT_THE_TOP = ("runner",)

# (analysis.runs.sweep_match: which point folder is which point, and how two sweeps differ - the runner
# refuses a folder holding another sweep with the words the report uses)
RUNNER_MAY_USE = (
    "analysis.book",
    "analysis.runs.rundir",
    "analysis.runs.record",
    "analysis.runs.sweep_match",
    "analysis.trace",
    "analysis.hlo",
    "analysis.runs.point_table",  # the worker writes each point's trace and HLO facts once, for the report
    "analysis.statistics.stats",
)
# the end of a sweep: its report (written by the sweep's report process where it can), and the gate on it
RUNNER_REPORT_CALLERS = ("runner.sweep.callbacks", "runner.sweep.report_process")
# the report, the gate on it, and the claims' verdicts it prints
REPORT_CALLER_MAY_USE = ("analysis.report", "analysis.sweep", "analysis.gate", "analysis.claims")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def imports(path: Path) -> list[tuple[str, bool]]:
    """``(module, at_module_level)`` for every import in the file; ``from a import b`` counts
    as ``a.b`` when that is a module of the project, else ``a``."""
    known = modules()
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    # imports under `if TYPE_CHECKING:` or in try/except at top level still count as top level
    for n in tree.body:
        for sub in ast.walk(n):
            if isinstance(sub, (ast.Import, ast.ImportFrom)) and not isinstance(
                n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)
            ):
                top.add(id(sub))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                out.append((full if full in known else node.module, id(node) in top))
    return out


def project_edges() -> dict[str, set[str]]:
    known = modules()
    return {m: {i for i, _ in imports(p) if i in known and i != m} for m, p in known.items()}


def test_analysis_never_imports_runner():
    bad = [
        (m, i)
        for m, p in modules().items()
        if m.startswith("analysis")
        for i, _ in imports(p)
        if i == "runner" or i.startswith("runner.")
    ]
    assert not bad, bad


def test_the_book_is_a_leaf_without_heavy_imports():
    for m, p in modules().items():
        if not m.startswith("analysis.book"):
            continue
        for i, top in imports(p):
            if i.split(".")[0] in PACKAGES:
                assert i.startswith("analysis.book"), f"{m} imports {i}"
            if i.split(".")[0] in ("pandas", "matplotlib", "seaborn"):
                pytest.fail(f"{m} imports {i}")
            if i.split(".")[0] in ("jax", "jaxlib"):
                assert not top, f"{m} imports {i} at module level (only inside a function)"


def test_runner_takes_only_the_shared_vocabulary_from_analysis():
    for m, p in modules().items():
        if not m.startswith("runner"):
            continue
        for i, _ in imports(p):
            if not (i == "analysis" or i.startswith("analysis.")):
                continue
            ok = any(i == a or i.startswith(a + ".") for a in RUNNER_MAY_USE)
            ok |= m in RUNNER_REPORT_CALLERS and any(i == a or i.startswith(a + ".") for a in REPORT_CALLER_MAY_USE)
            assert ok, f"{m} imports {i}"


# room -> the rooms of runner it must never import (at any depth of a function, lazily or not)
ROOMS_MUST_NOT_USE = {
    "runner.worker": ("runner.sweep",),
    "runner.config": ("runner.sweep", "runner.worker"),
    "runner.errors": ("runner.sweep", "runner.worker", "runner.config"),
    # the analysis's rooms: a sweep folder read, its statistics, profiles; the sweep, reports and
    # commands above them all
    "analysis.runs": ("analysis.statistics", "analysis.profiling", "analysis.sweep", "analysis.report", "analysis.cli"),
    "analysis.statistics": ("analysis.profiling", "analysis.sweep", "analysis.report", "analysis.cli"),
    "analysis.profiling": ("analysis.sweep", "analysis.report", "analysis.cli"),
}


def room_violations(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """``(importer, imported)`` for every import that crosses the rooms the wrong way."""
    bad = []
    for m, deps in edges.items():
        for room, banned in ROOMS_MUST_NOT_USE.items():
            if m == room or m.startswith(room + "."):
                bad += [(m, d) for d in deps for b in banned if d == b or d.startswith(b + ".")]
    return sorted(bad)


def test_the_worker_never_imports_the_sweep_side_and_config_neither():
    assert room_violations(project_edges()) == []


def test_the_room_check_finds_a_planted_import_across_the_boundary():
    edges = project_edges()
    edges["runner.worker.measure"] = edges["runner.worker.measure"] | {"runner.sweep.progress"}
    edges["runner.config.spec"] = edges["runner.config.spec"] | {"runner.worker.meshes"}
    edges["analysis.runs.summary"] = edges["analysis.runs.summary"] | {"analysis.statistics.fit"}
    assert room_violations(edges) == [
        ("analysis.runs.summary", "analysis.statistics.fit"),
        ("runner.config.spec", "runner.worker.meshes"),
        ("runner.worker.measure", "runner.sweep.progress"),
    ]


def test_every_runner_module_lives_in_a_room():
    loose = [m for m in modules() if m.startswith("runner.") and m.count(".") == 1]
    assert sorted(loose) == ["runner.__main__", "runner.config", "runner.errors", "runner.sweep", "runner.worker"]


def test_analysis_keeps_at_most_twelve_modules_at_its_top_level():
    loose = [m for m in modules() if m.startswith("analysis.") and m.count(".") == 1 and m != "analysis.__main__"]
    loose = [m for m in loose if not (ROOT / m.replace(".", "/") / "__init__.py").exists()]  # rooms aside
    assert len(loose) <= 12, sorted(loose)


def find_circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every set of modules that import one another round a loop (Tarjan's strongly connected
    components of more than one module)."""
    index, low, stack, on, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in list(edges):
        if v not in index:
            visit(v)
    return circles


def test_no_import_circles():
    assert find_circles(project_edges()) == []


def test_the_circle_finder_finds_a_planted_circle():
    edges = project_edges()
    edges["analysis.book.units"] = edges["analysis.book.units"] | {"analysis.report.compare_report"}
    # report.compare_report imports book.units: planting the way back closes a circle
    assert any({"analysis.book.units", "analysis.report.compare_report"} <= set(c) for c in find_circles(edges))
    assert find_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def heavy_modules(found: dict[str, list[tuple[str, bool]]]) -> set[str]:
    """The modules of the project that bring one of HEAVY with them: at their top, through
    another module, or through a package above them (importing ``a.b`` runs ``a/__init__.py``)."""

    def above(m: str) -> list[str]:
        parts = m.split(".")
        return [".".join(parts[:k]) for k in range(1, len(parts))]

    at_top = {m: {i for i, top in deps if top} | set(above(m)) for m, deps in found.items()}
    heavy = {m for m, deps in at_top.items() if any(i.split(".")[0] in HEAVY for i in deps)}
    while grown := {m for m, deps in at_top.items() if m not in heavy and deps & heavy}:
        heavy |= grown
    return heavy


def off_the_boundary(found: dict[str, list[tuple[str, bool]]]) -> list[str]:
    """Every import inside a function of IMPORTS_AT_THE_TOP that the boundary does not call for:
    of a light module, or in a module that has brought the heavy ones at its top already."""
    heavy = heavy_modules(found)
    bad = []
    for m, deps in found.items():
        if not any(m == p or m.startswith(p + ".") for p in IMPORTS_AT_THE_TOP):
            continue
        for i, top in deps:
            if top:
                continue
            deferred = i.split(".")[0] in HEAVY or i in heavy
            if deferred and m not in heavy:
                continue
            if any(i == s or i.startswith(s + ".") for s in SWEEP_SIDE_WHEN_CALLED.get(m, ())):
                continue
            bad.append(f"{m} imports {i} inside a function")
    return sorted(bad)


def all_imports() -> dict[str, list[tuple[str, bool]]]:
    return {m: imports(p) for m, p in modules().items()}


def test_the_runner_imports_at_the_top_but_across_the_boundary():
    assert off_the_boundary(all_imports()) == []


def test_the_boundary_check_finds_a_planted_import_inside_a_function():
    found = all_imports()
    found["runner.sweep.progress"] = [*found["runner.sweep.progress"], ("analysis.book.units", False)]
    found["runner.worker.timing"] = [*found["runner.worker.timing"], ("numpy", False)]  # numpy is at its top
    found["runner.sweep.folder"] = [*found["runner.sweep.folder"], ("runner.sweep.app", False)]
    # across the boundary: JAX's modules, a module that imports numpy at its top, the report
    found["runner.sweep.point"] = [*found["runner.sweep.point"], ("jax.numpy", False), ("runner.sweep.rounds", False)]
    found["runner.sweep.callbacks"] = [*found["runner.sweep.callbacks"], ("analysis.report.sweep_report", False)]
    assert off_the_boundary(found) == [
        "runner.sweep.folder imports runner.sweep.app inside a function",
        "runner.sweep.progress imports analysis.book.units inside a function",
        "runner.worker.timing imports numpy inside a function",
    ]


def test_starting_the_runner_imports_no_jax_pandas_or_matplotlib():
    code = (
        "import sys, runner, runner.__main__, runner.sweep.callbacks, runner.sweep.progress; "
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_a_measured_point_brings_no_jax_into_the_main_process(tmp_path):
    """JAX lives in the worker: a result coming back (its phase timings included) must not
    import it into the main process, which would cost a sweep about a second and the memory."""
    code = (
        "import sys; from hydra import compose, initialize_config_dir; "
        "from runner.config.schema import register_configs; "
        "register_configs(); from runner import run\n"
        f"with initialize_config_dir(config_dir={str(ROOT / 'conf')!r}, version_base='1.3'):\n"
        "    cfg = compose('config', overrides=['op.size_bytes=1KiB', 'timing.rounds=2', 'timing.budget_s=0.2'])\n"
        f"r = run(cfg, {str(tmp_path / 'p')!r})\n"
        "print(r['status'], sorted(m for m in ('jax', 'jaxlib') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip().splitlines()[-1] == "ok []", proc.stdout + proc.stderr[-2000:]
