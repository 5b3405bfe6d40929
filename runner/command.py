"""How the user started shardlab, so that the commands it prints can be pasted back."""

from __future__ import annotations

import sys
from pathlib import Path


def this_command() -> str:
    """``shardlab`` when started by the console script, else ``python -m runner``."""
    return "shardlab" if Path(sys.argv[0]).name == "shardlab" else "python -m runner"
