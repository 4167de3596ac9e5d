"""The viewer's web app: Starlette routes, server-rendered Jinja2 pages, one JSON endpoint.

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

import functools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import numpy as np
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from envduels.duel.outcomes import Outcome
from envduels.view._reader import ViewedRun, analysis_pool

HERE = Path(__file__).parent
PAGE_ROWS = 500
"""Rows per page of a long episode list (a player's, an environment's)."""
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]
OUTCOMES = tuple(str(outcome) for outcome in Outcome)


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


def q(value: Any) -> str:
    """A path segment for a URL: every character that is not plain is percent-encoded."""
    return quote(str(value), safe="")


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def mark_hint(text: str, hint: str) -> Markup:
    """`text` escaped, with every occurrence of `hint` wrapped in <mark class="hint">."""
    if not hint or hint not in text:
        return escape(text)
    parts = [escape(p) for p in text.split(hint)]
    return Markup('<mark class="hint" title="the privileged hint">{}</mark>').format(hint).join(parts)


@functools.lru_cache(maxsize=256)
def highlight(source: str) -> Markup:
    """Python source as HTML with line numbers and token classes (Pygments escapes the text)."""
    from pygments import highlight as pyg
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    return Markup(pyg(source, PythonLexer(), HtmlFormatter(linenos="table", cssclass="code",
                                                           lineanchors="L", anchorlinenos=True)))


def pygments_css() -> str:
    from pygments.formatters import HtmlFormatter

    return HtmlFormatter(cssclass="code").get_style_defs(".code")


def turns(transcript: list[dict[str, Any]], hint: str, hinted: bool) -> list[dict[str, Any]]:
    """The transcript as rows to show: who, what, and the flags of that entry."""
    out = []
    for i, m in enumerate(transcript):
        if not isinstance(m, dict):
            continue
        role = str(m.get("role", "?"))
        content = m.get("content")
        text = "" if content is None else str(content)
        flags = [f for f in ("format_error", "truncated") if m.get(f)]
        if m.get("fault"):
            flags.append("fault")
        row: dict[str, Any] = {"i": i, "role": role, "turn": m.get("turn"), "flags": flags,
                               "action": m.get("action"), "reward": m.get("reward"),
                               "terminated": m.get("terminated"),
                               "truncated": m.get("truncated"), "fault": m.get("fault"),
                               "tokens": (m.get("input_tokens"), m.get("output_tokens"))
                               if "input_tokens" in m else None}
        has_hint = hinted and bool(hint) and hint in text and role == "user"
        row["hint_shown"] = has_hint
        row["text"] = mark_hint(text, hint) if has_hint else text
        out.append(row)
    return out


RATES = ("lift", "no_hint", "with_hint")


def sort_rows(rows: list[dict[str, Any]], key: str, descending: bool) -> list[dict[str, Any]]:
    """The environments table sorted by `key`, equal values by env id (both reversed when
    `descending`), rows without a value (never played) last. Rates equal but for rounding (7/10 −
    4/10 and 3/10 − 0 differ in the last bit) sort as equal: `_ties.SHARE_TOLERANCE`."""
    present = [x for x in rows if x[key] is not None]
    missing = [x for x in rows if x[key] is None]
    keys = [x[key] for x in present]
    if key in RATES and present:
        from envduels.analysis._ties import SHARE_TOLERANCE, snap

        keys = [float(v) for v in snap(np.asarray(keys, dtype=float), SHARE_TOLERANCE)]
    at = sorted(range(len(present)), key=lambda k: (keys[k], present[k]["env_id"]), reverse=descending)
    return [present[k] for k in at] + missing


def create_app(run_dirs: Sequence[str | Path], *, allowed_hosts: list[str] | None = None,
               bootstrap: int | None = None, warm: bool = True) -> Starlette:
    """The viewer for these run folders (each must hold a run database; UserError otherwise).

    `allowed_hosts`: Host header values accepted (default: loopback names only). `warm`: start
    each run's analysis in the background now rather than on the first overview. Analyses run
    in one worker process; `close_app(app)` ends it and the database connections.
    """
    kwargs: dict[str, Any] = {} if bootstrap is None else {"bootstrap": bootstrap}
    readers = [ViewedRun(d, **kwargs) for d in run_dirs]
    pool = analysis_pool()
    for r in readers:
        r.pool = pool
    if warm:
        for r in readers:
            r.warm()
    env = Environment(loader=FileSystemLoader(HERE / "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters["fmt"] = _fmt
    env.filters["q"] = q
    env.filters["pct"] = lambda v: "–" if v is None else f"{100 * v:.0f}%"
    env.filters["signed"] = lambda v: "–" if v is None else f"{v:+.2f}"
    from envduels.report.story import GLOSSARY  # what each flag means, as the report says it

    env.globals["flag_meaning"] = lambda f: GLOSSARY.get(str(f), "")
    css = pygments_css()

    def reader(request: Request) -> tuple[int, ViewedRun]:
        i = request.path_params["run"]
        if not 0 <= i < len(readers):
            raise HTTPException(404, f"no run {i}")
        return i, readers[i]

    def page(template: str, request: Request, **ctx: Any) -> HTMLResponse:
        html = env.get_template(template).render(runs=readers, request=request, **ctx)
        # the page shows a placeholder for the first analysis: live.js reloads it once done
        return HTMLResponse(html)

    def runs_page(request: Request) -> HTMLResponse:
        return page("runs.html.j2", request,
                    rows=[(i, r, r.progress()) for i, r in enumerate(readers)])

    def overview(request: Request) -> HTMLResponse:
        i, r = reader(request)
        a = r.analysis(wait=False)
        snap = r.snapshot()
        return page("overview.html.j2", request, i=i, r=r, a=a, progress=snap.progress,
                    usage=snap.usage, latest=snap.latest,
                    stale=not a.pending and a.version != snap.version)

    def environments(request: Request) -> HTMLResponse:
        i, r = reader(request)
        a = r.analysis(wait=False)
        snap = r.snapshot()
        rows = []
        for e in snap.environments:
            info = a.envs.get(e.env_id)
            rows.append({"env_id": e.env_id, "title": e.title, "author": e.author,
                         "round": e.round, "domain": e.domain, "valid": e.valid,
                         "flags": info["flags"] if info else [], "lift": info["lift"] if info else None,
                         "no_hint": info["no_hint"] if info else None,
                         "with_hint": info["with_hint"] if info else None,
                         "episodes": snap.episode_counts.get(e.env_id, 0),
                         "attempts": a.attempts.get(e.env_id)})
        options = {"author": sorted({x["author"] for x in rows}),
                   "round": sorted({x["round"] for x in rows}),
                   "flag": sorted({f for x in rows for f in x["flags"]})}
        p = request.query_params
        f = {k: p.get(k, "") for k in ("author", "round", "valid", "flag", "sort", "order")}
        if f["author"]:
            rows = [x for x in rows if x["author"] == f["author"]]
        if f["round"]:
            rows = [x for x in rows if str(x["round"]) == f["round"]]
        if f["valid"] in ("yes", "no"):
            rows = [x for x in rows if x["valid"] == (f["valid"] == "yes")]
        if f["flag"] == "any":
            rows = [x for x in rows if x["flags"]]
        elif f["flag"] == "none":
            rows = [x for x in rows if not x["flags"]]
        elif f["flag"]:
            rows = [x for x in rows if f["flag"] in x["flags"]]
        key = f["sort"] if f["sort"] in ("env_id", "author", "round", "lift", "no_hint",
                                         "with_hint", "episodes", "attempts") else "env_id"
        return page("environments.html.j2", request, i=i, r=r, rows=sort_rows(rows, key, f["order"] == "desc"), a=a,
                    pending=a.pending,
                    options=options, f=f, progress=snap.progress,
                    sort_url=lambda k: "?" + urlencode({**{n: v for n, v in f.items() if v},
                                                        "sort": k, "order": "desc"
                                                        if f["sort"] == k and f["order"] != "desc"
                                                        else "asc"}))

    def environment(request: Request) -> HTMLResponse:
        i, r = reader(request)
        env_id = request.path_params["env_id"]
        e = r.environment(env_id)
        if e is None:
            raise HTTPException(404, "no such environment in this run")
        a = r.analysis(wait=False)
        eps = r.episodes_of(env_id=env_id)
        solvers = sorted({x["solver"] for x in eps})
        seeds = sorted({x["seed"] for x in eps})
        grid: dict[tuple[str, int, bool], list[dict[str, Any]]] = {}
        for x in eps:
            grid.setdefault((x["solver"], x["seed"], x["hinted"]), []).append(x)
        for cell in grid.values():
            cell.sort(key=lambda x: x["trial"])
        return page("environment.html.j2", request, i=i, r=r, e=e, a=a, info=a.envs.get(env_id, {}),
                    validations=r.validations(env_id), source=highlight(e.source or ""),
                    solvers=solvers, seeds=seeds, grid=grid, eps=eps, progress=r.progress())

    def episode(request: Request) -> HTMLResponse:
        i, r = reader(request)
        ep = r.episode(request.path_params["key"])
        if ep is None:
            raise HTTPException(404, "no such episode in this run")
        e = r.environment(ep.env_id)
        hint = e.hint if e is not None else ""
        return page("episode.html.j2", request, i=i, r=r, ep=ep, e=e, hint=hint,
                    rows=turns(ep.transcript, hint, ep.hinted), progress=r.progress())

    def player(request: Request) -> HTMLResponse:
        i, r = reader(request)
        name = request.path_params["name"]
        players = set(r.player_names)
        a = r.analysis(wait=False)
        usage = [u for u in r.usage() if u["player"] == name]
        if name not in players and not usage:
            raise HTTPException(404, "no such player in this run")
        eps = r.episodes_of(solver=name)
        envs = [e for e in r.environments() if e.author == name]
        outcomes = {k: sum(1 for x in eps if x["outcome"] == k) for k in OUTCOMES}
        errors = [x for x in eps if x["outcome"] == Outcome.ERROR]
        try:
            pg = max(0, int(request.query_params.get("page", "0")))
        except ValueError:
            pg = 0
        pages = max(1, math.ceil(len(eps) / PAGE_ROWS))
        shown = eps[pg * PAGE_ROWS:(pg + 1) * PAGE_ROWS]
        ratings = {k: next((x for x in rows if x.model == name), None)
                   for k, rows in a.ratings.items()}
        return page("player.html.j2", request, i=i, r=r, a=a, name=name, usage=usage, eps=shown,
                    n_eps=len(eps), outcomes=outcomes, errors=errors[:PAGE_ROWS],
                    n_errors=len(errors), envs=envs, env_info=a.envs, pg=pg, pages=pages,
                    ratings=ratings, progress=r.progress())

    def live(request: Request) -> JSONResponse:
        i, r = reader(request)
        snap = r.snapshot()
        return JSONResponse({
            "version": snap.version, **snap.progress,
            "analysis_ready": not r.analysis(wait=False).pending,
            "latest": [{"url": f"/run/{i}/episode/{q(x['episode_key'])}", "env_id": x["env_id"],
                        "solver": x["solver"], "seed": x["seed"],
                        "condition": "hint" if x["hinted"] else "no hint",
                        "outcome": x["outcome"], "turns": x["turns"]} for x in snap.latest],
        })

    def pyg_css(request: Request) -> Response:
        return Response(css, media_type="text/css")

    async def not_found(request: Request, exc: Exception) -> HTMLResponse:
        # registered for HTTPException only (Starlette's handler type names the base class)
        assert isinstance(exc, HTTPException)
        html = env.get_template("error.html.j2").render(runs=readers, request=request,
                                                        code=exc.status_code, detail=exc.detail)
        return HTMLResponse(html, status_code=exc.status_code)

    routes = [
        Route("/", runs_page),
        Route("/run/{run:int}/", overview),
        Route("/run/{run:int}/environments", environments),
        Route("/run/{run:int}/env/{env_id:path}", environment),
        Route("/run/{run:int}/episode/{key:path}", episode),
        Route("/run/{run:int}/player/{name:path}", player),
        Route("/run/{run:int}/live.json", live),
        Route("/static/pygments.css", pyg_css),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    hosts = allowed_hosts or ["127.0.0.1", "localhost", "[::1]", "::1"]
    app = Starlette(routes=routes, exception_handlers={HTTPException: not_found},
                    middleware=[Middleware(SecurityHeaders),
                                Middleware(TrustedHostMiddleware, allowed_hosts=hosts)])
    app.state.readers = readers
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
