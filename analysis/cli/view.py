"""``python -m analysis view DIR``: serve a run's or a sweep's traces with XProf on 127.0.0.1.

XProf's own ``xprof`` command binds its web server to every interface and starts a gRPC
worker service on 0.0.0.0:50051 (seen with xprof 2.24: ``xprof --logdir DIR``). This command builds the same web app
from XProf's plugin but serves it on loopback only, and skips the gRPC service, which
exists for distributed trace conversion. A sweep's points appear as XProf "runs", one per
job folder, through a folder of symlinks (``DIR/.xprof``) in the layout XProf reads.
"""
from __future__ import annotations

import argparse
import shutil
import threading
from pathlib import Path

HOST = "127.0.0.1"
LINK_DIR = ".xprof"


def link_runs(root: Path) -> Path:
    """Make ``root/.xprof/plugins/profile/<job>`` point at each job's trace session."""
    from analysis.rundir import job_dirs

    logdir = root / LINK_DIR
    profile = logdir / "plugins" / "profile"
    profile.mkdir(parents=True, exist_ok=True)
    for old in profile.iterdir():
        if old.is_symlink():
            old.unlink()
        elif old.is_dir():  # a multi-process job's session of links, rebuilt below
            shutil.rmtree(old)
    for job in job_dirs(root):
        hosts = sorted((job / "trace").glob("host*/plugins/profile/*/*.xplane.pb"))
        if hosts:
            # A multi-process job: each process traced into trace/host<i>/ under the same host
            # name; one session holding host<i>.xplane.pb lets XProf show the hosts side by side.
            session = profile / job.name
            session.mkdir()
            for xplane in hosts:
                (session / f"{xplane.parents[3].name}.xplane.pb").symlink_to(xplane.resolve())
            continue
        sessions = sorted((job / "trace" / "plugins" / "profile").glob("*"))
        for i, session in enumerate(sessions):
            name = job.name if len(sessions) == 1 else f"{job.name}_{i}"
            (profile / name).symlink_to(session.resolve(), target_is_directory=True)
    return logdir


def start(root: str | Path, port: int = 0):
    """Start XProf on 127.0.0.1 (``port`` 0 picks a free one) in a thread.

    Returns ``(server, url)``; call ``server.stop()`` to end it.
    """
    import logging

    from cheroot import wsgi
    from xprof import server as xs

    logging.getLogger("tensorboard.plugins.profile").setLevel(logging.WARNING)
    logdir = str(link_runs(Path(root)))
    context = xs.TBContext(logdir, xs.DataProvider(logdir), xs.TBContext.Flags(False))
    plugin = xs.ProfilePluginLoader().load(context)
    server = wsgi.Server((HOST, port), xs.make_wsgi_app(plugin))
    server.prepare()  # binds now, so the port is known before serving
    threading.Thread(target=server.serve, daemon=True, name="xprof").start()
    return server, f"http://{HOST}:{server.bind_addr[1]}/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, help="a run folder or a multirun (sweep) folder")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")


def main(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C; 2 when the folder holds no traces (one line on stderr)."""
    from analysis.cli.options import fail
    from analysis.rundir import TRACE_DIR, job_dirs

    if not args.dir.is_dir() or not any((j / TRACE_DIR).is_dir() for j in job_dirs(args.dir)):
        return fail(f"{args.dir} holds no traces (no */trace/plugins/profile)")
    server, url = start(args.dir, args.port)
    print(f"XProf serving the traces of {args.dir} at {url} (127.0.0.1 only; Ctrl-C to stop)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
