"""Mutation check of the measuring core: plant small bugs one at a time, run the tests that
cover each, and count the bugs no test notices.

    pip install -e ".[dev]"
    python tests/bench/mutation.py [--children 2] [--keep DIR]
    python tests/bench/mutation.py --only analysis/gate.py --tests tests/analysis/test_gate.py \
        tests/project/test_packaging.py
    python tests/bench/mutation.py --fresh-process --only runner/worker/ceiling.py --tests ...

mutmut (configured under ``[tool.mutmut]`` in pyproject.toml: which files, which tests) runs
in a copy of the checkout, so the working tree is never touched. Prints one row per module:
mutants killed, survived, timed out, and not covered by the selected tests, and the score
``killed / (killed + survived)``; writes every survivor's diff to ``survivors.txt`` in the
copy (``--keep`` keeps it). Not part of CI: on 2 cores everything but the HLO reader takes
about 20 minutes, the HLO reader's ~1000 mutants about two hours more. ``--only`` (files to
mutate) and ``--tests`` (the tests that cover them) check a few modules in a bounded time:
they replace ``only_mutate`` and the test selection in the copy's pyproject, never in the
checkout. Each run prints its wall time.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def copy_checkout(dest: Path) -> None:
    """The tracked and untracked-but-not-ignored files of the checkout, as they are now."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in files:
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


# mutmut's default isolation forks its own process once the tests are loaded; a fork of a
# process that has run JAX hangs in the next JAX call, so a module whose tests run JAX programs
# (the ceiling's device_copy) showed every mutant as a timeout. forkserver starts each child
# from a fresh interpreter (and "none": without importing the tests first).
FRESH_PROCESS = {"process_isolation": "forkserver", "forkserver_warmup": "none"}


def narrow(pyproject: Path, only: list[str] | None, tests: list[str] | None, fresh: bool = False) -> None:
    """Point the copy's ``[tool.mutmut]`` at ``only`` (and its tests at ``tests``), so a run
    covers those modules alone, and with ``fresh`` test each mutant in a fresh process
    (:data:`FRESH_PROCESS`); every other key stays as the checkout has it."""
    text = pyproject.read_text()
    head, sep, rest = text.partition("[tool.mutmut]")
    if not sep:
        raise SystemExit("error: pyproject.toml has no [tool.mutmut] section")
    body, nxt, tail = rest.partition("\n[")  # the section runs to the next table
    keys: dict = {"only_mutate": only} if only else {}
    if tests:
        keys["pytest_add_cli_args_test_selection"] = tests
    if fresh:
        keys.update(FRESH_PROCESS)
    # drop the keys being replaced (values may span several lines), then add them back
    kept, skip = [], False
    for line in body.splitlines():
        key = line.split("=", 1)[0].strip()
        if key in keys:
            skip = not line.rstrip().endswith("]")
            continue
        if skip:
            skip = not line.rstrip().endswith("]")
            continue
        kept.append(line)
    new = "\n".join(kept).rstrip("\n") + "\n" + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in keys.items())
    pyproject.write_text(head + sep + new + (nxt + tail if nxt else ""))


def module_of(mutant: str) -> str:
    """``analysis.statistics.stats.x_summarize__mutmut_3`` -> ``analysis.statistics.stats``."""
    head = mutant.split("__mutmut_")[0]
    return ".".join(p for p in head.split(".") if not p.startswith("x_") and "ǁ" not in p)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=2, help="mutants tested at once (default 2)")
    parser.add_argument("--keep", type=Path, default=None, help="run in this folder and keep it")
    parser.add_argument("--only", nargs="+", default=None, help="mutate only these files (default: pyproject's list)")
    parser.add_argument("--tests", nargs="+", default=None, help="with --only: the test files that cover them")
    parser.add_argument(
        "--fresh-process",
        action="store_true",
        help="test each mutant in a fresh process (mutmut's forkserver), for tests that run JAX programs",
    )
    args = parser.parse_args()
    if args.tests and not args.only:
        parser.error("--tests needs --only (the pyproject's selection goes with its own files)")
    t0 = time.monotonic()
    work = args.keep or Path(tempfile.mkdtemp(prefix="shardlab-mutation-"))
    work.mkdir(parents=True, exist_ok=True)
    # mutmut keeps its results in mutants/ and reuses them: an earlier run's (of other code)
    # would be counted again
    shutil.rmtree(work / "mutants", ignore_errors=True)
    copy_checkout(work)
    # mutmut runs the tests from work/mutants/tests: the real TPU/GPU traces that
    # tests/analysis/trace/test_xplane_real_traces.py reads from ../shared/traces are then looked for in work/shared
    shared = REPO.parent / "shared"
    if shared.is_dir() and not (work / "shared").exists():
        (work / "shared").symlink_to(shared)
    if args.only or args.fresh_process:
        narrow(work / "pyproject.toml", args.only, args.tests, args.fresh_process)
    # the HLO tests compile five collectives in a fresh JAX process: once for the whole run,
    # not once per mutant (tests/helpers/hlo_samples.py)
    env = dict(os.environ, SHARDLAB_HLO_SAMPLES_CACHE=str(work / "hlo_samples.json"))
    run = subprocess.run(
        [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.children)],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
    )
    if run.returncode:
        print(run.stdout[-3000:], run.stderr[-3000:], file=sys.stderr)
        return run.returncode
    results = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=work, capture_output=True, text=True
    ).stdout
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    survivors = []
    for line in results.splitlines():
        m = re.match(r"\s*(\S+): (.+)$", line)
        if not m:
            continue
        name, status = m.groups()
        counts[module_of(name)][status] += 1
        if status == "survived":
            survivors.append(name)
    print(f"{'module':<40} {'killed':>7} {'survived':>9} {'timeout':>8} {'no tests':>9} {'score':>6}")
    total = collections.Counter()
    for mod in sorted(counts):
        c = counts[mod]
        total.update(c)
        done = c["killed"] + c["survived"]
        print(
            f"{mod:<40} {c['killed']:>7} {c['survived']:>9} {c['timeout']:>8} {c['no tests']:>9} "
            f"{c['killed'] / done if done else float('nan'):>6.2f}"
        )
    done = total["killed"] + total["survived"]
    print(
        f"{'all':<40} {total['killed']:>7} {total['survived']:>9} {total['timeout']:>8} {total['no tests']:>9} "
        f"{total['killed'] / done if done else float('nan'):>6.2f}"
    )
    with open(work / "survivors.txt", "w") as f:
        for name in survivors:
            diff = subprocess.run(
                [sys.executable, "-m", "mutmut", "show", name], cwd=work, capture_output=True, text=True
            ).stdout
            f.write(f"== {name}\n{diff}\n")
    print(f"survivors' diffs: {work / 'survivors.txt'}")
    print(f"wall time: {(time.monotonic() - t0) / 60:.1f} min with {args.children} children")
    if args.keep is None:
        print(f"(the copy is left in {work}; delete it when done)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
