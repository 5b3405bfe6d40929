"""``python -m analysis view DIR``: serve a run's or a sweep's traces with XProf on 127.0.0.1.

XProf's own ``xprof`` command binds its web server to every interface and starts a gRPC
worker service on 0.0.0.0:50051 (seen with xprof 2.24: ``xprof --logdir DIR``). This command builds the same web app
from XProf's plugin but serves it on loopback only, and skips the gRPC service, which
exists for distributed trace conversion. The app is wrapped in
:class:`analysis.cli.xprof_guard.Guard`, which refuses paths outside the served traces,
``capture_profile`` and foreign ``Host:`` headers.

A sweep's points appear as XProf "runs", one per point folder. XProf wants them as
``<logdir>/plugins/profile/<run>/<host>.xplane.pb``, and it writes its cache files
(``.cached_tools.json``, ``cache_version.txt``, ``*.op_stats*.pb``, ``*.hlo_proto.pb``) next to
them. So the logdir is a temporary folder of real session folders holding one link per
``*.xplane.pb`` (never a link to the session folder itself, through which those writes would
land in DIR): DIR may be read-only and stays untouched, and the logdir is removed on stop.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlencode

from analysis.cli.options import fail
from analysis.runs.rundir import TRACE_DIR, point_dirs, read_result

HOST = "127.0.0.1"
# cheroot hands a connection to a worker thread once it has bytes to read, and the worker
# waits for the rest of the request up to the timeout: with cheroot's defaults (10 threads, 10 s,
# a listen backlog of 5), 10 idle half-open connections held every thread and a normal request
# waited 8.5 s, and 500 parallel requests saw 38 connection resets.
THREADS = 64
BACKLOG = 1024  # the kernel caps it at net.core.somaxconn
CONNECTION_TIMEOUT_S = 5  # for a client's bytes, not for XProf's work on a request
# On Ctrl-C cheroot waits for each request in flight: its shutdown timeout, then it closes the
# connection and joins the worker thread without a bound, and its worker threads are not
# daemons, so the interpreter would wait for them at exit too. XProf converting a large trace
# holds a request for minutes (a planted 60 s request kept a Ctrl-C'd viewer up for 59 s).
# The viewer waits this long, then exits without them.
SHUTDOWN_TIMEOUT_S = 2
STOP_WAIT_S = 5
# Read from xprof 2.24's data routes on a CPU trace, whose only plane is /host:CPU: XProf builds
# HLO op statistics from GPU/TPU device-plane op events, so these tools answer at once with
# empty tables. Separately, the HLO Op Stats page clears its "Loading hlo data" only once
# Google Charts has loaded from www.gstatic.com; a browser that cannot reach it spins forever.
CPU_NOTE = (
    "note: on CPU traces HLO Op Stats, HLO Op Profile and Roofline Model are empty (XProf builds "
    "them from GPU/TPU op events; HLO Op Stats also spins forever if the browser cannot reach "
    "www.gstatic.com); Trace Viewer, Graph Viewer and Memory Viewer work"
)


def link_runs(root: Path, logdir: Path) -> list[str]:
    """Lay out ``root``'s traces as ``logdir/plugins/profile/<run>/<host>.xplane.pb`` links.

    Returns the run names: the point folder's name, or ``<point>_<i>`` for a point traced in
    several sessions.
    """
    profile = logdir / "plugins" / "profile"
    runs = []
    for point in point_dirs(root):
        hosts = sorted((point / "trace").glob("host*/plugins/profile/*/*.xplane.pb"))
        if hosts:
            # A multi-process point: each process traced into trace/host<i>/ under the same host
            # name; one session holding host<i>.xplane.pb lets XProf show the hosts side by side.
            sessions = {point.name: [(f"{x.parents[3].name}.xplane.pb", x) for x in hosts]}
        else:
            found = sorted(p for p in (point / "trace" / "plugins" / "profile").glob("*") if p.is_dir())
            sessions = {
                point.name if len(found) == 1 else f"{point.name}_{i}": [
                    (x.name, x) for x in sorted(s.glob("*.xplane.pb"))
                ]
                for i, s in enumerate(found)
            }
        for name, files in sessions.items():
            if not files:
                continue
            (profile / name).mkdir(parents=True)
            for link, xplane in files:
                (profile / name / link).symlink_to(xplane.resolve())
            runs.append(name)
    return runs


def cpu_traces(root: Path) -> bool:
    """Whether any point under ``root`` ran on JAX's CPU backend (its result.json says so)."""
    return any(read_result(j).environment.backend == "cpu" for j in point_dirs(root))


class Viewer:
    """XProf serving ``root``'s traces on 127.0.0.1 (``port`` 0 picks a free one) in a thread.

    ``url`` is where; ``logdir`` the temporary folder it serves from; ``stop()`` ends the
    server and removes that folder.
    """

    def __init__(self, root: str | Path, port: int = 0):
        # optional (XPROF_INSTALL), and on the boundary: main says which is missing first
        from cheroot import wsgi
        from xprof import server as xs

        from analysis.cli.xprof_guard import Guard  # werkzeug, XProf's own web toolkit

        logging.getLogger("tensorboard.plugins.profile").setLevel(logging.WARNING)
        # Absolute from here on: XProf lists no runs for a relative logdir, and the links
        # must not depend on the working folder.
        root = Path(root).resolve()
        self.logdir = os.path.realpath(tempfile.mkdtemp(prefix="shardlab-xprof-"))
        try:
            runs = link_runs(root, Path(self.logdir))
            context = xs.TBContext(self.logdir, xs.DataProvider(self.logdir), xs.TBContext.Flags(False))
            context.hide_capture_profile_button = True  # the route is refused anyway
            guard = Guard(xs.make_wsgi_app(xs.ProfilePluginLoader().load(context)), self.logdir, runs)
            self.server = wsgi.Server(
                (HOST, port),
                guard,
                numthreads=THREADS,
                request_queue_size=BACKLOG,
                timeout=CONNECTION_TIMEOUT_S,
                accepted_queue_timeout=CONNECTION_TIMEOUT_S,
                shutdown_timeout=SHUTDOWN_TIMEOUT_S,
            )
            self.server.prepare()  # binds now, so the port is known before serving
        except BaseException:
            shutil.rmtree(self.logdir, ignore_errors=True)
            raise
        guard.port = self.server.bind_addr[1]
        self.url = f"http://{HOST}:{guard.port}/"
        self.trace_viewer_url = trace_viewer_url(self.url, Path(self.logdir), runs)
        threading.Thread(target=self.server.serve, daemon=True, name="xprof").start()

    def stop(self) -> bool:
        """End the server (waiting up to ``STOP_WAIT_S`` for requests in flight) and remove the
        logdir; False when a request was still running, whose thread then outlives the server."""
        stopper = threading.Thread(target=self.server.stop, daemon=True, name="xprof-stop")
        stopper.start()
        try:
            stopper.join(STOP_WAIT_S)
        finally:  # a second Ctrl-C while it waits still leaves no temporary folder
            shutil.rmtree(self.logdir, ignore_errors=True)
        return not stopper.is_alive()


def trace_viewer_url(url: str, logdir: Path, runs: list[str]) -> str | None:
    """The Trace Viewer of the first run's first host: XProf opens on its Overview Page, which
    on CPU shows 0.0 ms and "No step marker observed", while the timeline is one tool away."""
    for run in runs:
        hosts = sorted((logdir / "plugins" / "profile" / run).glob("*.xplane.pb"))
        if hosts:
            host = hosts[0].name.removesuffix(".xplane.pb")
            return f"{url}?{urlencode({'run': run, 'tool': 'trace_viewer@', 'host': host})}"
    return None


def start(root: str | Path, port: int = 0) -> Viewer:
    """Start XProf on 127.0.0.1 for ``root``; call ``.stop()`` on the result to end it."""
    return Viewer(root, port)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, help="a run folder or a multirun (sweep) folder")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")


# shardlab's own install brings XProf (pyproject's dependencies); this puts back what was removed.
XPROF_INSTALL = 'pip install "tensorboard-plugin-profile>=2.20"'


def missing_xprof() -> str | None:
    """The first module ``view`` serves with that cannot be found (XProf or its web server), else None."""
    for name in ("xprof", "cheroot"):
        if importlib.util.find_spec(name) is None:
            return name
    return None


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # SIGTERM ends the server like Ctrl-C, so the logdir is removed


def main(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C or SIGTERM (then KeyboardInterrupt: exit 130); 2 when the folder holds
    no traces (one line on stderr)."""
    if not args.dir.is_dir() or not any((j / TRACE_DIR).is_dir() for j in point_dirs(args.dir)):
        return fail(f"{args.dir} holds no traces (no */trace/plugins/profile)")
    if not 0 <= args.port <= 65535:
        return fail(f"--port={args.port}: must be from 1 to 65535, or 0 for a free one")
    missing = missing_xprof()
    if missing:
        return fail(f"analysis view needs XProf, which is missing here (no module {missing!r}): {XPROF_INSTALL}")
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if args.port:  # before XProf loads (and logs): a busy port is then the only line
            with socket.socket() as probe:
                probe.bind((HOST, args.port))
        viewer = start(args.dir, args.port)
    except OSError as err:  # in use, or below 1024 without the right
        # cheroot wraps the bind error: "No socket could be created -- ((addr): [Errno 98] ...)"
        found = re.search(r"\[Errno \d+\] ([^)]+)", str(err))
        why = err.strerror or (found.group(1) if found else str(err).splitlines()[0])
        return fail(f"--port={args.port}: cannot listen on {HOST} ({why}); pick another, or 0 for a free one")
    try:
        print(f"XProf serving the traces of {args.dir} at {viewer.url} (127.0.0.1 only; Ctrl-C to stop)", flush=True)
        if cpu_traces(args.dir):
            print(CPU_NOTE, flush=True)
        if viewer.trace_viewer_url:
            print(f"the first point's timeline (Trace Viewer): {viewer.trace_viewer_url}", flush=True)
        threading.Event().wait()  # never returns: Ctrl-C (or SIGTERM, raised as one) ends it
    finally:
        # The interrupt goes on to analysis.cli.main, which says so and exits 130, as every
        # command does on Ctrl-C (this said nothing and exited 0, as if serving had succeeded).
        if not viewer.stop():  # a request XProf is still answering: its (non-daemon) thread would hold the exit
            sys.stdout.flush()
            print("\ninterrupted", file=sys.stderr, flush=True)
            os._exit(130)
