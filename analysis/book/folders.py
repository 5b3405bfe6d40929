"""Where the project's YAML lives: ``conf/`` (the config groups, among them the hardware
catalogue the book's constants come from) and ``sweeps/``.

In a source checkout they are the repository's top-level folders, which users edit. A regular
install (``pip install .``, a wheel) carries copies inside the ``runner`` package:
``pyproject.toml`` maps ``runner/conf`` and ``runner/sweeps`` onto the two folders. Users who
install shardlab add their own config folder to Hydra's search path instead of editing these
(docs/configs.md, "Your own configs").
"""

from __future__ import annotations

from pathlib import Path

# site-packages (installed) or the repository root (a checkout, editable installs included)
_ROOT = Path(__file__).resolve().parents[2]


def project_folder(name: str) -> Path:
    """``conf`` or ``sweeps``: the installed copy inside ``runner/`` if there is one, else the
    checkout's top-level folder."""
    for candidate in (_ROOT / "runner" / name, _ROOT / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"shardlab's {name}/ folder is neither at {_ROOT / name} nor installed at "
        f"{_ROOT / 'runner' / name}; reinstall with pip install shardlab"
    )
