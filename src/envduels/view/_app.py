"""The viewer's web app: the pages (`_views`, one class each) as Starlette routes, server-rendered
Jinja2 templates, one JSON endpoint, and the security around them.

Security model (everything shown is model-written or environment-written, so untrusted):
- every value reaches HTML through Jinja's autoescaping; the only markup built in Python is
  Pygments' (which escapes the source it highlights) and the hint marks (escaped pieces joined);
- a strict Content-Security-Policy on every response: scripts, styles, images and fetches from
  this origin only (the app's own static files), no inline script or style at all, no frames,
  no plugins; even a value that escaped escaping could neither run nor load anything;
- the one script (static/live.js) writes only `textContent` and hrefs the server built;
- requests must name the host the app was started on (no DNS-rebinding reads of a run).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from envduels.report.story import GLOSSARY
from envduels.view._format import fmt, pygments_css, q
from envduels.view._reader import ViewedRun, analysis_pool
from envduels.view._views import VIEWS, Site

HERE = Path(__file__).parent
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


class SecurityHeaders:
    """ASGI middleware: the headers above on every HTTP response, pages and static files alike."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


def templates() -> Environment:
    """The page templates, autoescaped, with the filters they use and what each flag means
    (the report's own words, `report.story.GLOSSARY`)."""
    env = Environment(loader=FileSystemLoader(HERE / "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters["fmt"] = fmt
    env.filters["q"] = q
    env.filters["pct"] = lambda v: "–" if v is None else f"{100 * v:.0f}%"
    env.filters["signed"] = lambda v: "–" if v is None else f"{v:+.2f}"
    env.globals["flag_meaning"] = lambda f: GLOSSARY.get(str(f), "")
    return env


def create_app(run_dirs: Sequence[str | Path], *, allowed_hosts: list[str] | None = None,
               bootstrap: int | None = None, warm: bool = True) -> Starlette:
    """The viewer for these run folders (each must hold a run database; UserError otherwise).

    `allowed_hosts`: Host header values accepted (default: loopback names only). `warm`: start
    each run's analysis in the background now rather than on the first overview. Analyses run
    in one worker process; `close_app(app)` ends it and the database connections.
    """
    kwargs: dict[str, Any] = {} if bootstrap is None else {"bootstrap": bootstrap}
    runs = [ViewedRun(d, **kwargs) for d in run_dirs]
    pool = analysis_pool()
    for r in runs:
        r.pool = pool
    if warm:
        for r in runs:
            r.warm()
    site = Site(runs, templates(), pygments_css())

    async def not_found(request: Request, exc: Exception) -> HTMLResponse:
        # registered for HTTPException only (Starlette's handler type names the base class)
        assert isinstance(exc, HTTPException)
        return site.render("error.html.j2", request, status=exc.status_code,
                           code=exc.status_code, detail=exc.detail)

    routes: list[Route | Mount] = [Route(view.path, view(site).get) for view in VIEWS]
    routes.append(Mount("/static", StaticFiles(directory=HERE / "static"), name="static"))
    hosts = allowed_hosts or ["127.0.0.1", "localhost", "[::1]", "::1"]
    app = Starlette(routes=routes, exception_handlers={HTTPException: not_found},
                    middleware=[Middleware(SecurityHeaders),
                                Middleware(TrustedHostMiddleware, allowed_hosts=hosts)])
    app.state.readers = runs
    app.state.pool = pool
    return app


def close_app(app: Starlette) -> None:
    """End the app's analysis worker and close its read-only connections."""
    for reader in app.state.readers:
        reader.close()
    pool = app.state.pool
    # an analysis in flight would hold the exit for seconds; its result is no longer wanted
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        proc.terminate()
