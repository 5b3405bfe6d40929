"""``python -m analysis view`` serves a run's traces on loopback and nowhere else."""
from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from runner import run


def _listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state that process ``pid`` holds."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with open(table) as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                local, state, inode = parts[1], parts[3], parts[9]
                if state == "0A" and inode in inodes:  # 0A = LISTEN
                    addr, port = local.split(":")
                    found.append((addr, int(port, 16)))
    return found


def _get(url: str):
    body = urllib.request.urlopen(url, timeout=60).read()
    return json.loads(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory, compose_cfg):
    job = tmp_path_factory.mktemp("view") / "0_op.size_bytes=64KiB"
    result = run(compose_cfg(["op.size_bytes=64KiB", "timing.budget_s=0.2", "trace.iters=2"]), job)
    assert result["status"] == "ok"
    return job.parent


def test_view_lists_the_run_over_http_and_listens_only_on_loopback(traced_run, repo_root):
    proc = subprocess.Popen([sys.executable, "-m", "analysis", "view", str(traced_run)], cwd=repo_root,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line, line
        url = line.split(" at ", 1)[1].split()[0]
        runs = _get(url + "data/plugin/profile/runs")
        assert runs == ["0_op.size_bytes=64KiB"]
        tools = _get(url + "data/plugin/profile/run_tools?run=" + urllib.parse.quote(runs[0]))
        assert "trace_viewer" in json.dumps(tools) or "overview_page" in json.dumps(tools)
        time.sleep(0.5)
        listeners = _listening(proc.pid)
        assert listeners, "the server should be listening"
        # 0100007F = 127.0.0.1 in /proc/net/tcp's little-endian hex; no 0.0.0.0, no ::
        assert all(addr == "0100007F" for addr, _ in listeners), listeners
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)


def test_view_of_a_folder_without_traces_fails_clearly(tmp_path, repo_root):
    proc = subprocess.run([sys.executable, "-m", "analysis", "view", str(tmp_path)], cwd=repo_root,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "holds no traces" in proc.stderr and not proc.stdout
