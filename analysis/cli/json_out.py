"""The opening keys of every JSON object a command prints (``predict``, ``hardware``, ``hlo``,
``profile``; a
sweep's files carry the same through :func:`analysis.runs.rundir.stamp`): what it is, the version of
its layout and the shardlab that printed it. A script reading ``--json`` checks ``format`` and
``format_version`` and learns of a change from them, not from a missing key.

Each command's layout has its own version, raised when a key changes meaning or goes away (new
keys do not raise it); a renamed key keeps its old name beside the new one for one version.
"""

from __future__ import annotations

from analysis.runs.rundir import shardlab_version

# predict: 1 was the unversioned layout with "predicted_time_s"; 2 names it "time_s" and keeps
# "predicted_time_s" (the same number) until 3. hlo and profile: 1 was a bare list of records;
# 2 is an object with the records under "collectives"
FORMAT_VERSIONS = {"predict": 2, "hardware": 1, "hlo": 2, "profile": 2}


def versioned(kind: str, body: dict) -> dict:
    """``body`` opened by ``format`` (``shardlab.<kind>``), ``format_version`` and ``shardlab_version``."""
    if kind not in FORMAT_VERSIONS:
        raise ValueError(f"no JSON layout named {kind!r}; known: {', '.join(sorted(FORMAT_VERSIONS))}")
    head = {"format": f"shardlab.{kind}", "format_version": FORMAT_VERSIONS[kind]}
    head["shardlab_version"] = shardlab_version()
    return {**head, **{k: v for k, v in body.items() if k not in head}}
