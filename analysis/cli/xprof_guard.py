"""A WSGI middleware that keeps XProf's web app to the traces ``python -m analysis view`` serves.

XProf's app (xprof 2.24, ``xprof/profile_plugin.py``) trusts its query string. Read there:

- ``session_path=`` and ``run_path=`` (every data route, and ``POST generate_cache``) name a
  session folder, or a folder of sessions, anywhere on disk, or on ``gs://``; XProf reads the
  traces there and writes its cache files there.
- ``run=`` is joined onto the logdir (``os.path.join``), so ``../..`` or an absolute path
  escapes it.
- ``module_name=`` (graph_viewer, memory_viewer) is joined onto the session folder by the
  converter, as ``<session>/<module_name>.hlo_proto.pb``: ``../`` reads files elsewhere.
- ``host=`` and ``hosts=`` are only matched against the session's ``*.xplane.pb`` names
  today; they are held to plain names all the same.
- ``capture_profile`` opens a gRPC connection to any ``service_addr`` (and resolves TPU names),
  and is the only route that connects out.

A browser also sends whatever ``Host:`` a DNS name resolved to 127.0.0.1 carries (DNS
rebinding), so a page on another site could read the traces unless the Host is checked.
Each refusal is HTTP 403 with a one-line body that says why.
"""

from __future__ import annotations

import os

from werkzeug.wrappers import Request

PATH_PARAMS = ("session_path", "run_path")
NAME_PARAMS = ("module_name", "host", "hosts")
REFUSED_ROUTES = ("capture_profile",)


class Guard:
    """Wrap ``app``; let through only requests that stay within ``logdir`` and its ``runs``.

    ``port`` must be set once the server has bound (it is part of the accepted Host headers).
    """

    def __init__(self, app, logdir: str, runs: list[str]):
        self.app = app
        self.root = os.path.realpath(logdir)
        self.runs = frozenset(runs)
        self.port: int | None = None

    def __call__(self, environ, start_response):
        reason = self.refusal(environ)
        if reason is None:
            return self.app(environ, start_response)
        body = f"refused: {reason}\n".encode("utf-8", "replace")
        start_response(
            "403 Forbidden", [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
        )
        return [body]

    def refusal(self, environ) -> str | None:
        """Why this request is refused, or None to pass it to XProf."""
        hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}
        host = environ.get("HTTP_HOST", "")
        if host.lower() not in hosts:
            return f"Host {host[:80]!r} is not one of {sorted(hosts)}"
        # make_wsgi_app routes both /data/plugin/profile/<route> and /<route>, with or without
        # a trailing slash; refusing on the last path segment covers every spelling.
        route = environ.get("PATH_INFO", "").rstrip("/").rsplit("/", 1)[-1]
        if route in REFUSED_ROUTES:
            return f"{route} would connect to other machines; this server only shows traces on disk"
        args = Request(environ).args  # parsed exactly as XProf parses it; every repeat checked
        for name in PATH_PARAMS:
            for value in args.getlist(name):
                if not self._inside(value):
                    return f"{name} names a path outside the served traces"
        for value in args.getlist("run"):
            if value not in self.runs:
                return f"run {value[:80]!r} is not one of the served runs"
        for name in NAME_PARAMS:
            for value in args.getlist(name):
                if "/" in value or "\\" in value or "\0" in value or value in (".", ".."):
                    return f"{name} must be a plain name, not a path"
        return None

    def _inside(self, value: str) -> bool:
        """Whether ``value``, resolved as XProf would (from the working folder, links followed),
        lies within the served logdir."""
        if "://" in value or "\0" in value:
            return False
        real = os.path.realpath(value)
        return real == self.root or real.startswith(self.root + os.sep)
