"""``analysis profile SWEEP`` takes one run folder: on a sweep's folder it names the traced ones."""

from __future__ import annotations

import json

from analysis.cli import main


def _sweep(root, traced: list[bool]):
    for i, t in enumerate(traced):
        d = root / f"{i:03d}_op.size_bytes={i + 1}KiB"
        d.mkdir(parents=True)
        files = {"xplane": "trace/plugins/profile/x/h.xplane.pb"} if t else {}
        (d / "result.json").write_text(json.dumps({"status": "ok", "files": files}))
    return root


def test_a_sweep_folder_names_its_traced_run_folders(tmp_path, capsys):
    root = _sweep(tmp_path / "sweep", [False, True, True, True, True])
    assert main(["profile", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    runs = ", ".join(str(root / f"{i:03d}_op.size_bytes={i + 1}KiB") for i in (1, 2, 3))
    assert err == f"error: {root} is a sweep folder: pass one of its run folders, one profile each: {runs} (and 1 more)"


def test_a_sweep_without_traces_says_so(tmp_path, capsys):
    root = _sweep(tmp_path / "sweep", [False, False])
    assert main(["profile", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {root} is a sweep folder and none of its 2 runs has a trace (trace.enabled=false?)"
