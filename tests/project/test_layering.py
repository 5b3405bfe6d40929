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
* both packages import at the top of their modules, but across one boundary, declared here
  once (``DEFERRED``, ``SWEEP_SIDE_WHEN_CALLED``): what a light process (the Hydra process,
  ``python -m analysis`` reading its ``--help`` or a TAB) loads only when a function needs it;
* ``python -m runner`` starts, and ``python -m analysis`` reads a command's flags, without
  any of ``DEFERRED`` (JAX loads in the worker, pandas and matplotlib for the report).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("runner", "analysis")
# -- the one deliberate boundary: what may be imported inside a function, and only there -------
# Every other import stands at the top of its module, where a reader and the tools see it
# (test_imports_stand_at_the_top_but_across_the_boundary). The light processes load modules
# without what they defer: the Hydra process starts without JAX or pandas, never loads JAX and
# loads the rest only when a sweep needs them (its later rounds; its report, in the report's own
# process, once it has lowered its priority); ``python -m analysis`` answers ``--help``, and a
# TAB imports the one command's module to read its flags (analysis/cli/__init__.py), without
# them. The worker imports JAX only once runner.config.jaxenv.start_jax has set its settings.
# An import inside a function is on the boundary when it brings one of DEFERRED (directly,
# through a module of the project that imports it at its top, or through a package above it)
# that its module does not bring at its own top already.
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
# and the sweep side (Hydra), from the two modules every worker process imports again: the package
# (``from runner import run``) and ``python -m runner`` (the worker's ``__mp_main__``; a Ctrl-C
# while Hydra loads is answered there in two lines).
SWEEP_SIDE_WHEN_CALLED = {
    "runner": ("runner.sweep.point",),
    "runner.__main__": ("runner.sweep.app", "runner.sweep.pool"),
}
# the packages held to it
IMPORTS_AT_THE_TOP = ("runner", "analysis")

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
    """``(module, at_top)`` for every import in the file, at any depth (under ``if``, ``try`` or
    a class at module level counts as at the top, inside a function not); ``from a import b`` is
    ``a.b`` when that is a module of the project, else ``a``; a relative import is resolved."""
    known = modules()
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

    visit(ast.parse(path.read_text()), True)
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
    grown = True
    while grown:  # until no module brings more through the modules it imports
        grown = False
        for m, deps in tops.items():
            more = set().union(*(out.get(i, set()) for i in deps)) - out[m]
            out[m] |= more
            grown |= bool(more)
    return out


def off_the_boundary(found: dict[str, list[tuple[str, bool]]]) -> list[str]:
    """Every import inside a function of IMPORTS_AT_THE_TOP that defers nothing its module does not
    load already, and is not one of the runner's SWEEP_SIDE_WHEN_CALLED."""
    loads = brought(found)
    bad = set()
    for m, deps in found.items():
        if not any(m == p or m.startswith(p + ".") for p in IMPORTS_AT_THE_TOP):
            continue
        for i, top in deps:
            if top or any(i == s or i.startswith(s + ".") for s in SWEEP_SIDE_WHEN_CALLED.get(m, ())):
                continue
            defers = {d} if (d := deferred_of(i)) else loads.get(i, set())
            if not defers - loads[m]:
                bad.add(f"{m} imports {i} inside a function")
    return sorted(bad)


def all_imports() -> dict[str, list[tuple[str, bool]]]:
    return {m: imports(p) for m, p in modules().items()}


def test_imports_stand_at_the_top_but_across_the_boundary():
    assert off_the_boundary(all_imports()) == []


def test_the_boundary_check_finds_a_planted_import_inside_a_function():
    found = all_imports()
    plant = {
        # off: a light module into a light one; what its module has at its top already
        "runner.sweep.progress": [("analysis.book.units", False)],
        "runner.worker.timing": [("numpy", False)],
        "runner.sweep.folder": [("runner.sweep.app", False)],  # the sweep side, outside the two declared
        "analysis.runs.rundir": [("analysis.book.units", False), ("json", False)],
        "analysis.report.sweep_report": [("pandas", False)],
        "analysis.statistics.stats": [("scipy.special", False)],
        # on: JAX's modules, a module that imports numpy or pandas at its top, the report, the book
        # kept without JAX
        "runner.sweep.point": [("jax.numpy", False), ("runner.sweep.rounds", False)],
        "runner.sweep.callbacks": [("analysis.report.sweep_report", False)],
        "analysis.cli.report": [("analysis.sweep", False)],
        "analysis.book.units": [("jax.numpy", False)],
    }
    for m, extra in plant.items():
        found[m] = [*found[m], *extra]
    assert off_the_boundary(found) == [
        "analysis.report.sweep_report imports pandas inside a function",
        "analysis.runs.rundir imports analysis.book.units inside a function",
        "analysis.runs.rundir imports json inside a function",
        "analysis.statistics.stats imports scipy.special inside a function",
        "runner.sweep.folder imports runner.sweep.app inside a function",
        "runner.sweep.progress imports analysis.book.units inside a function",
        "runner.worker.timing imports numpy inside a function",
    ]


def loaded_on_import(*names: str) -> list[str]:
    """Which of DEFERRED a fresh Python has loaded once it has imported ``names``."""
    code = f"import sys, {', '.join(names)}; print(sorted(m for m in {DEFERRED!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_starting_the_runner_imports_no_jax_pandas_or_matplotlib():
    assert loaded_on_import("runner", "runner.__main__", "runner.sweep.callbacks", "runner.sweep.progress") == "[]"


def test_the_worker_starts_without_hydra():
    """What a worker imports before it says ready (runner.worker.serve) is on the way to a sweep's
    first point; Hydra's config store (0.11-0.12 s) is the app's, registered by runner.config.store."""
    code = (
        "import sys; import runner.worker.serve, runner.worker.point_cache, runner.worker.measure, "
        "runner.worker.point_round; print(sorted({m.split('.')[0] for m in sys.modules} & {'hydra'}))"
    )
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "[]"


def test_the_cli_starts_and_reads_a_commands_flags_without_heavy_imports():
    """``python -m analysis --help`` and a TAB after a command load none of DEFERRED; the command
    modules that need them import them inside ``main`` (on the boundary)."""
    light = ("analysis.cli.report", "analysis.cli.predict", "analysis.cli.view", "analysis.cli.calibrate")
    light += ("analysis.cli.hardware", "analysis.cli.profile", "analysis.cli.import_")
    assert loaded_on_import("analysis.cli", *light) == "[]"


def test_a_measured_point_brings_no_jax_into_the_main_process(tmp_path):
    """JAX lives in the worker: a result coming back (its phase timings included) must not
    import it into the main process, which would cost a sweep about a second and the memory."""
    code = (
        "import sys; from hydra import compose, initialize_config_dir; "
        "from runner.config.store import register_configs; "
        "register_configs(); from runner import run\n"
        f"with initialize_config_dir(config_dir={str(ROOT / 'conf')!r}, version_base='1.3'):\n"
        "    cfg = compose('config', overrides=['op.size_bytes=1KiB', 'timing.rounds=2', 'timing.budget_s=0.2'])\n"
        f"r = run(cfg, {str(tmp_path / 'p')!r})\n"
        "print(r['status'], sorted(m for m in ('jax', 'jaxlib') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip().splitlines()[-1] == "ok []", proc.stdout + proc.stderr[-2000:]
