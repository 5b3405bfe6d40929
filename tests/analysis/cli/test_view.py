"""``python -m analysis view`` serves a run's traces on loopback, and nothing beyond them.

Every check goes through real HTTP requests to the command's own server on 127.0.0.1. The run
folder is a real traced run, made read-only, and named by a relative path as a user would
(``outputs/sweeps/<sweep>`` from the folder above it).
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path
from types import SimpleNamespace

import pytest
from shardlab_cli import analysis, start

from runner import run

SWEEP = "outputs/sweeps/s1"  # relative to the working folder the command runs in
POINT = "0_op.size_bytes=64KiB"
PREFIX = "/data/plugin/profile"


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
    for table, _width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with open(table) as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                local, state, inode = parts[1], parts[3], parts[9]
                if state == "0A" and inode in inodes:  # 0A = LISTEN
                    addr, port = local.split(":")
                    found.append((addr, int(port, 16)))
    return found


def _request(port: int, path: str, method: str = "GET", host: str | None = "default") -> tuple[int, bytes]:
    """(status, body) of one request to 127.0.0.1:port; ``host`` None sends no Host header."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        if host == "default":
            conn.request(method, path)
        else:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            if host is not None:
                conn.putheader("Host", host)
            conn.endheaders()
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    return resp.status, gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body


def _json(port: int, path: str):
    status, body = _request(port, path)
    assert status == 200, (path, status, body[:300])
    return json.loads(body)


def _q(**params) -> str:
    return urllib.parse.urlencode(params)


def _set_writable(root: Path, writable: bool) -> None:
    for d, _, files in os.walk(root):
        os.chmod(d, 0o755 if writable else 0o555)
        for f in files:
            if not os.path.islink(os.path.join(d, f)):
                os.chmod(os.path.join(d, f), 0o644 if writable else 0o444)


def _snapshot(root: Path) -> dict:
    """Every path under ``root`` with its lstat mode, size and mtime: any write shows."""
    snap = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(d, name))
            snap[os.path.relpath(os.path.join(d, name), root)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return snap


@contextlib.contextmanager
def _serve(cwd: Path, tmpdir: Path):
    """Run ``python -m analysis view outputs/sweeps/s1`` in ``cwd`` with TMPDIR=``tmpdir``;
    yield its url, port, process and the line it prints after the url ("" if none)."""
    tmpdir.mkdir(exist_ok=True)
    proc = start("analysis", "view", SWEEP, cwd=cwd, env={"TMPDIR": str(tmpdir)}, stderr=subprocess.DEVNULL)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()

    def line(timeout: float) -> str:
        try:
            return lines.get(timeout=timeout)
        except queue.Empty:
            return ""

    try:
        first = line(180)
        assert "http://127.0.0.1:" in first, first
        url = first.split(" at ", 1)[1].split()[0]
        yield SimpleNamespace(
            url=url,
            port=int(url.rsplit(":", 1)[1].strip("/")),
            proc=proc,
            note=line(5),
            timeline=line(5),
            tmpdir=tmpdir,
        )
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        finally:  # one that did not stop is not left serving
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory, compose_cfg):
    """A real traced run at ``<base>/outputs/sweeps/s1/<point>``, read-only while the tests run.

    Yields ``base``, the working folder from which SWEEP is the relative path, and the
    snapshot of ``base`` as the runner left it, before any server saw it.
    """
    base = tmp_path_factory.mktemp("view")
    fast = ["timing.rounds=1", "timing.budget_s=0.2", "trace.iters=2"]
    result = run(compose_cfg(["op.size_bytes=64KiB", *fast]), base / SWEEP / POINT)
    assert result["status"] == "ok"
    _set_writable(base / "outputs", False)
    yield SimpleNamespace(base=base, snapshot=_snapshot(base))
    _set_writable(base / "outputs", True)


@pytest.fixture(scope="module")
def served(traced_run, tmp_path_factory):
    with _serve(traced_run.base, tmp_path_factory.mktemp("view_tmp")) as s:
        yield s


@pytest.fixture(scope="module")
def outside(traced_run, tmp_path_factory):
    """A copy of the run's trace session outside the served folder: ``<dir>/plugins/profile/sess``."""
    root = tmp_path_factory.mktemp("outside")
    session = next((traced_run.base / SWEEP / POINT / "trace" / "plugins" / "profile").iterdir())
    shutil.copytree(session, root / "plugins" / "profile" / "sess")
    return root


def test_view_of_a_relative_path_lists_the_run_and_listens_only_on_loopback(served):
    runs = _json(served.port, f"{PREFIX}/runs")
    assert runs == [POINT]
    tools = _json(served.port, f"{PREFIX}/run_tools?{_q(run=POINT)}")
    assert "trace_viewer@" in tools or "trace_viewer" in tools
    time.sleep(0.5)
    listeners = _listening(served.proc.pid)
    assert listeners, "the server should be listening"
    # 0100007F = 127.0.0.1 in /proc/net/tcp's little-endian hex; no 0.0.0.0, no ::
    assert all(addr == "0100007F" for addr, _ in listeners), listeners


def test_view_prints_the_first_points_trace_viewer_and_it_answers(served):
    # XProf opens on its Overview Page (0.0 ms and "No step marker observed" on CPU): the
    # command names the timeline's own address
    prefix = "the first point's timeline (Trace Viewer): "
    assert served.timeline.startswith(prefix), served.timeline
    link = urllib.parse.urlsplit(served.timeline.removeprefix(prefix).strip())
    assert (link.hostname, link.port, link.path) == ("127.0.0.1", served.port, "/")
    params = dict(urllib.parse.parse_qsl(link.query))
    assert params["run"] == POINT and params["tool"] == "trace_viewer@" and params["host"]
    assert _request(served.port, f"/?{link.query}")[0] == 200
    # the host it names is one XProf lists for that run
    hosts = _json(served.port, f"{PREFIX}/hosts?{_q(run=POINT, tag='trace_viewer@')}")
    assert params["host"] in {h["hostname"] if isinstance(h, dict) else h for h in hosts}, hosts


def test_paths_outside_the_served_traces_are_refused(served, outside):
    session = outside / "plugins" / "profile" / "sess"
    before = _snapshot(outside)
    attacks = [
        ("GET", f"{PREFIX}/runs?{_q(session_path=session)}"),
        ("GET", f"/runs?{_q(session_path=session)}"),  # make_wsgi_app also routes unprefixed paths
        ("GET", f"{PREFIX}/run_tools?{_q(run='sess', run_path=session.parent)}"),
        ("GET", f"{PREFIX}/module_list?{_q(run='sess', session_path=session)}"),  # writes *.hlo_proto.pb
        ("POST", f"{PREFIX}/generate_cache?{_q(session_path=session)}"),  # writes caches there
        ("GET", f"{PREFIX}/data_csv?{_q(run='sess', tag='hlo_stats', host='vm', session_path=session)}"),
        ("GET", f"{PREFIX}/runs?{_q(session_path='gs://some-bucket/profile')}"),
        ("GET", f"{PREFIX}/runs?session_path=.&session_path={session}"),  # a repeated parameter
        # run= is joined onto the logdir: an absolute path or ../ escapes it
        ("GET", f"{PREFIX}/hosts?{_q(run=f'{outside}/sess', tag='trace_viewer@')}"),
        ("GET", f"{PREFIX}/data?{_q(run='../../../../../../etc/sess', tag='hlo_stats', host='vm')}"),
        # module_name= is joined onto the session folder as <module_name>.hlo_proto.pb
        (
            "GET",
            f"{PREFIX}/data?"
            + _q(run=POINT, tag="graph_viewer", host="vm", type="short_txt", module_name="../../../../../../tmp/x"),
        ),
        ("GET", f"{PREFIX}/data?{_q(run=POINT, tag='memory_viewer', host='../vm')}"),
    ]
    logdirs = [p for p in served.tmpdir.iterdir() if p.is_dir()]
    assert len(logdirs) == 1, f"the served logdir should be the one folder in TMPDIR: {logdirs}"
    inside = logdirs[0] / "plugins" / "profile" / POINT
    # inside the logdir, but through the link to the trace file: resolved, that is DIR
    attacks.append(("GET", f"{PREFIX}/runs?{_q(session_path=inside / 'vm.xplane.pb' / '..')}"))
    for method, path in attacks:
        status, body = _request(served.port, path, method)
        assert status == 403, (method, path, status, body[:300])
        assert body.startswith(b"refused: ") and body.count(b"\n") == 1, body
    assert _snapshot(outside) == before, "nothing may be written outside the served logdir"
    # what the frontend sends, and a path inside the served logdir, still work
    assert _json(served.port, f"{PREFIX}/runs?{_q(session_path=inside)}") == [POINT]
    modules = _request(served.port, f"{PREFIX}/module_list?{_q(run=POINT)}")[1].decode().split(",")
    status, body = _request(
        served.port,
        f"{PREFIX}/data?{_q(run=POINT, tag='graph_viewer', host='vm', type='short_txt', module_name=modules[0])}",
    )
    assert status == 200 and body.startswith(b"HloModule"), (status, body[:200])


def test_capture_profile_is_refused_and_connects_nowhere(served):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        target = f"127.0.0.1:{listener.getsockname()[1]}"
        for path in (f"{PREFIX}/capture_profile", "/capture_profile", f"{PREFIX}/capture_profile/"):
            status, body = _request(served.port, f"{path}?{_q(service_addr=target, duration=10)}")
            assert status == 403 and body.startswith(b"refused: ") and body.count(b"\n") == 1, (path, status, body)
        listener.settimeout(1.0)
        with pytest.raises(socket.timeout):
            listener.accept()  # the server never tried to reach the capture address


def test_foreign_host_headers_are_refused(served):
    port, runs = served.port, f"{PREFIX}/runs"
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1:{port + 1}", "127.0.0.1", None):
        status, body = _request(port, runs, host=host)
        assert status == 403 and body.startswith(b"refused: ") and body.count(b"\n") == 1, (host, status, body)
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
        assert _request(port, runs, host=host)[0] == 200, host


def test_hlo_op_stats_are_empty_on_cpu_traces_and_the_command_says_so(served):
    # The route the HLO Op Stats page calls answers at once, with no rows: XProf builds the
    # table from GPU/TPU device op events, and a CPU trace has only /host:CPU.
    table = _json(served.port, f"{PREFIX}/data?{_q(run=POINT, tag='hlo_stats', host='vm')}")
    assert table["cols"] and table["rows"] == []
    trace = _json(served.port, f"{PREFIX}/data?{_q(run=POINT, tag='trace_viewer@', host='vm')}")
    assert trace["traceEvents"], "the trace viewer has the CPU trace's events"
    assert "HLO Op Stats" in served.note and "Trace Viewer" in served.note and "CPU" in served.note, served.note


def test_a_read_only_folder_is_served_without_writing_to_it(traced_run, tmp_path):
    with _serve(traced_run.base, tmp_path / "tmp") as s:
        assert _json(s.port, f"{PREFIX}/runs") == [POINT]
        _json(s.port, f"{PREFIX}/run_tools?{_q(run=POINT)}")
        for tag in ("overview_page", "hlo_stats", "trace_viewer@"):
            _json(s.port, f"{PREFIX}/data?{_q(run=POINT, tag=tag, host='vm')}")
        status, modules = _request(s.port, f"{PREFIX}/module_list?{_q(run=POINT)}")
        assert status == 200 and modules, modules
        (logdir,) = [p for p in s.tmpdir.iterdir()]
        session = logdir / "plugins" / "profile" / POINT
        written = {p.name for p in session.iterdir() if not p.is_symlink()}
        # XProf's caches land here: the HLO protos it extracts, and its tools list where its
        # version keeps one (.cached_tools.json: xprof 2.24's ToolsCache; 2.20 has none)
        from xprof import profile_plugin

        tools_cache = getattr(getattr(profile_plugin, "ToolsCache", None), "CACHE_FILE_NAME", None)
        assert any(n.endswith(".hlo_proto.pb") for n in written), written
        assert tools_cache is None or tools_cache in written, (tools_cache, written)
    assert list(s.tmpdir.iterdir()) == [], "the temporary logdir is removed when the server stops"
    # as the runner left it, though every test before this one served it too
    assert _snapshot(traced_run.base) == traced_run.snapshot, "the served folder must stay untouched"


SLOW_REQUEST = """import time
import analysis.cli.xprof_guard as guard
_call = guard.Guard.__call__
def _slow(self, environ, start_response):
    if environ.get("PATH_INFO", "").endswith("/slow"):
        time.sleep(120)  # XProf converting a large trace holds a request for minutes
    return _call(self, environ, start_response)
guard.Guard.__call__ = _slow
"""


def test_ctrl_c_ends_the_viewer_while_a_request_is_still_running(traced_run, tmp_path):
    # cheroot waits for a request in flight without a bound, and its threads are not daemons:
    # a Ctrl-C'd viewer stayed up until XProf's work ended (59 s for a planted 60 s request)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SLOW_REQUEST)
    (tmp_path / "tmp").mkdir()
    env = {"PYTHONPATH": str(tmp_path / "site"), "TMPDIR": str(tmp_path / "tmp")}
    proc = start("analysis", "view", SWEEP, cwd=traced_run.base, env=env, stderr=subprocess.DEVNULL)
    try:
        first = proc.stdout.readline()
        port = int(first.split(" at ", 1)[1].split()[0].rstrip("/").rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(f"GET /slow HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            time.sleep(1.0)  # the request is in the server's hands
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 130  # as every command stopped by Ctrl-C
    finally:
        proc.kill()
        proc.wait()
    assert list((tmp_path / "tmp").iterdir()) == [], "the temporary logdir is removed all the same"


def test_view_of_a_folder_without_traces_fails_clearly(tmp_path):
    proc = analysis("view", tmp_path, timeout=60, expect=2)
    assert "holds no traces" in proc.stderr and not proc.stdout


@pytest.mark.parametrize("module", ["xprof", "cheroot"])
def test_view_without_xprof_names_the_one_install_command(traced_run, tmp_path, module):
    # as a user who removed XProf (or whose environment lost it) sees it: one line, exit 2
    (tmp_path / "sitecustomize.py").write_text(f"import sys\nsys.modules[{module!r}] = None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    proc = analysis("view", SWEEP, cwd=traced_run.base, env=env, timeout=120)
    want = (
        f"error: analysis view needs XProf, which is missing here (no module {module!r}): "
        'pip install "tensorboard-plugin-profile>=2.20"'
    )
    assert (proc.returncode, proc.stdout, proc.stderr.splitlines()) == (2, "", [want])


@pytest.mark.parametrize("port", ["-1", "99999", "busy"])
def test_a_bad_or_busy_port_is_one_line_and_exit_2(traced_run, port):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        value = str(taken.getsockname()[1]) if port == "busy" else port
        proc = analysis("view", SWEEP, "--port", value, cwd=traced_run.base, timeout=120)
    want = {
        "-1": "error: --port=-1: must be from 1 to 65535, or 0 for a free one",
        "99999": "error: --port=99999: must be from 1 to 65535, or 0 for a free one",
        "busy": f"error: --port={value}: cannot listen on 127.0.0.1 (Address already in use); pick another, or 0 "
        "for a free one",
    }[port]
    assert (proc.returncode, proc.stdout, proc.stderr.splitlines()) == (2, "", [want])


def test_idle_half_open_connections_do_not_hold_up_a_request(served):
    """40 clients that send half a request and wait: with cheroot's 10 threads each held one
    for its 10 s timeout and the next request waited behind them (8.5 s measured). The request
    is answered within 4 s, less than the server's own 5 s timeout for the idle ones."""
    idle = []
    try:
        for _ in range(40):
            s = socket.create_connection(("127.0.0.1", served.port), timeout=10)
            s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers never finished
            idle.append(s)
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=4)
        conn.request("GET", f"{PREFIX}/runs")
        resp = conn.getresponse()
        body = resp.read()
        assert (resp.status, json.loads(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)) == (200, [POINT])
        conn.close()
    finally:
        for s in idle:
            s.close()


def test_a_burst_of_parallel_connections_is_accepted_without_resets(served):
    """500 clients at once (the old server, backlog 5 and 10 threads, left some unanswered for 30 s
    here, and reset 38 of 500 in the issue): every one connects
    and gets its answer."""
    from concurrent.futures import ThreadPoolExecutor

    def ask(_):
        with socket.create_connection(("127.0.0.1", served.port), timeout=30) as s:
            s.sendall(b"GET /no-such-page HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            return s.recv(12)[:12]

    barrier_free = ThreadPoolExecutor(max_workers=500)
    try:
        heads = list(barrier_free.map(ask, range(500)))
    finally:
        barrier_free.shutdown()
    assert len(heads) == 500 and len(set(heads)) == 1 and heads[0].startswith(b"HTTP/1.1 "), set(heads)
