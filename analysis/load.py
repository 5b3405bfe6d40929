"""Finding and reading run folders. Everything the analysis knows comes through here."""
from __future__ import annotations

import json
from pathlib import Path

RESULT_NAME = "result.json"


def job_dirs(root: str | Path) -> list[Path]:
    """The run folders under ``root`` (``root`` itself if it is one), in job-number order."""
    root = Path(root)
    if (root / RESULT_NAME).is_file():
        return [root]
    dirs = [p.parent for p in root.glob(f"*/{RESULT_NAME}")]

    def key(p: Path):
        head = p.name.split("_", 1)[0]
        return (0, int(head), p.name) if head.isdigit() else (1, 0, p.name)

    return sorted(dirs, key=key)


def read_result(job_dir: Path) -> dict:
    """A job's result.json, with ``job`` (folder name) and ``job_dir`` added.

    A missing or unreadable file becomes a failed record that says why, so one damaged
    folder never stops a report.
    """
    path = Path(job_dir) / RESULT_NAME
    try:
        result = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        result = {"status": "failed", "error_type": "UnreadableResult", "error": f"{path}: {exc}"}
    result["job"] = Path(job_dir).name
    result["job_dir"] = str(job_dir)
    return result


def read_results(root: str | Path) -> list[dict]:
    """Every job's result under ``root``."""
    return [read_result(d) for d in job_dirs(root)]
