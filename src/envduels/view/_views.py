"""The viewer's pages, one class each (as datasette's `views/`): what a page reads of a run and
which template shows it. Every page answers GET at its `path` (a Starlette route pattern); a
run or row that does not exist is a 404 page, never a traceback.

A page reads its run through `Site` (the runs being served, their `ViewedRun`s, and the page
templates), never a database: the `ViewedRun` caches every read against the run's change
counter, so a page costs what changed since the last one.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar
from urllib.parse import urlencode

from jinja2 import Environment
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from envduels.duel.outcomes import Outcome
from envduels.view._format import highlight, q, sort_rows, turns
from envduels.view._reader import ViewedRun

PAGE_ROWS = 500
"""Rows per page of a long episode list (a player's, an environment's)."""
SORT_KEYS = ("env_id", "author", "round", "lift", "no_hint", "with_hint", "episodes", "attempts")
"""The columns the environments table sorts by (`?sort=`); any other sorts by env id."""


class Site:
    """What every page shares: the runs being served (their index in the URL) and the
    templates. `render` fills the page's template; `run` is the run a URL names (404 when
    none)."""

    def __init__(self, runs: list[ViewedRun], templates: Environment, css: str) -> None:
        self.runs = runs
        self.templates = templates
        self.css = css

    def run(self, request: Request) -> tuple[int, ViewedRun]:
        i = request.path_params["run"]
        if not 0 <= i < len(self.runs):
            raise HTTPException(404, f"no run {i}")
        return i, self.runs[i]

    def render(self, template: str, request: Request, *, status: int = 200,
               **ctx: Any) -> HTMLResponse:
        html = self.templates.get_template(template).render(runs=self.runs, request=request, **ctx)
        return HTMLResponse(html, status_code=status)


class View:
    """One page: `path` is its route, `get` answers a request for it."""

    path: ClassVar[str]

    def __init__(self, site: Site) -> None:
        self.site = site

    def get(self, request: Request) -> Response:
        raise NotImplementedError


class RunsPage(View):
    """Every run being served, with its progress."""

    path = "/"

    def get(self, request: Request) -> Response:
        return self.site.render("runs.html.j2", request,
                                rows=[(i, r, r.progress()) for i, r in enumerate(self.site.runs)])


class OverviewPage(View):
    """A run's overview: progress, ratings, findings, usage, the latest episodes. It shows a
    placeholder for the first analysis: live.js reloads it once that is done."""

    path = "/run/{run:int}/"

    def get(self, request: Request) -> Response:
        i, r = self.site.run(request)
        a = r.analysis(wait=False)
        snap = r.snapshot()
        return self.site.render("overview.html.j2", request, i=i, r=r, a=a,
                                progress=snap.progress, usage=snap.usage, latest=snap.latest,
                                stale=not a.pending and a.version != snap.version)


class EnvironmentsPage(View):
    """A run's environments as a table, filtered (`author`, `round`, `valid`, `flag`) and
    sorted (`sort`, `order`) by the query."""

    path = "/run/{run:int}/environments"

    def get(self, request: Request) -> Response:
        i, r = self.site.run(request)
        a = r.analysis(wait=False)
        snap = r.snapshot()
        rows = []
        for e in snap.environments:
            info = a.envs.get(e.env_id)
            rows.append({"env_id": e.env_id, "title": e.title, "author": e.author,
                         "round": e.round, "domain": e.domain, "valid": e.valid,
                         "flags": info["flags"] if info else [],
                         "lift": info["lift"] if info else None,
                         "no_hint": info["no_hint"] if info else None,
                         "with_hint": info["with_hint"] if info else None,
                         "episodes": snap.episode_counts.get(e.env_id, 0),
                         "attempts": a.attempts.get(e.env_id)})
        options = {"author": sorted({x["author"] for x in rows}),
                   "round": sorted({x["round"] for x in rows}),
                   "flag": sorted({f for x in rows for f in x["flags"]})}
        p = request.query_params
        f = {k: p.get(k, "") for k in ("author", "round", "valid", "flag", "sort", "order")}
        rows = _filtered(rows, f)
        key = f["sort"] if f["sort"] in SORT_KEYS else "env_id"

        def sort_url(k: str) -> str:
            again = f["sort"] == k and f["order"] != "desc"
            return "?" + urlencode({**{n: v for n, v in f.items() if v}, "sort": k,
                                    "order": "desc" if again else "asc"})

        return self.site.render("environments.html.j2", request, i=i, r=r,
                                rows=sort_rows(rows, key, f["order"] == "desc"), a=a,
                                pending=a.pending, options=options, f=f,
                                progress=snap.progress, sort_url=sort_url)


def _filtered(rows: list[dict[str, Any]], f: dict[str, str]) -> list[dict[str, Any]]:
    """The environments table's rows the query's filters keep."""
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
    return rows


class EnvironmentPage(View):
    """One environment: its source, hint, validation attempts and every episode on it, as a
    grid of solver × seed × condition."""

    path = "/run/{run:int}/env/{env_id:path}"

    def get(self, request: Request) -> Response:
        i, r = self.site.run(request)
        env_id = request.path_params["env_id"]
        e = r.environment(env_id)
        if e is None:
            raise HTTPException(404, "no such environment in this run")
        a = r.analysis(wait=False)
        eps = r.episodes_of(env_id=env_id)
        grid: dict[tuple[str, int, bool], list[dict[str, Any]]] = {}
        for x in eps:
            grid.setdefault((x["solver"], x["seed"], x["hinted"]), []).append(x)
        for cell in grid.values():
            cell.sort(key=lambda x: x["trial"])
        return self.site.render(
            "environment.html.j2", request, i=i, r=r, e=e, a=a, info=a.envs.get(env_id, {}),
            validations=r.validations(env_id), source=highlight(e.source or ""),
            solvers=sorted({x["solver"] for x in eps}), seeds=sorted({x["seed"] for x in eps}),
            grid=grid, eps=eps, progress=r.progress())


class EpisodePage(View):
    """One episode's transcript, the hint marked where the solver was shown it."""

    path = "/run/{run:int}/episode/{key:path}"

    def get(self, request: Request) -> Response:
        i, r = self.site.run(request)
        ep = r.episode(request.path_params["key"])
        if ep is None:
            raise HTTPException(404, "no such episode in this run")
        e = r.environment(ep.env_id)
        hint = e.hint if e is not None else ""
        return self.site.render("episode.html.j2", request, i=i, r=r, ep=ep, e=e, hint=hint,
                                rows=turns(ep.transcript, hint, ep.hinted),
                                progress=r.progress())


class PlayerPage(View):
    """One player: its ratings, usage, the environments it wrote and the episodes it played
    (`?page=N`, `PAGE_ROWS` a page), its errors first."""

    path = "/run/{run:int}/player/{name:path}"

    def get(self, request: Request) -> Response:
        i, r = self.site.run(request)
        name = request.path_params["name"]
        a = r.analysis(wait=False)
        usage = [u for u in r.usage() if u["player"] == name]
        if name not in set(r.player_names) and not usage:
            raise HTTPException(404, "no such player in this run")
        eps = r.episodes_of(solver=name)
        outcomes = {str(k): sum(1 for x in eps if x["outcome"] == k) for k in Outcome}
        errors = [x for x in eps if x["outcome"] == Outcome.ERROR]
        try:
            pg = max(0, int(request.query_params.get("page", "0")))
        except ValueError:
            pg = 0
        ratings = {k: next((x for x in rows if x.model == name), None)
                   for k, rows in a.ratings.items()}
        return self.site.render(
            "player.html.j2", request, i=i, r=r, a=a, name=name, usage=usage,
            eps=eps[pg * PAGE_ROWS:(pg + 1) * PAGE_ROWS], n_eps=len(eps), outcomes=outcomes,
            errors=errors[:PAGE_ROWS], n_errors=len(errors),
            envs=[e for e in r.environments() if e.author == name], env_info=a.envs, pg=pg,
            pages=max(1, math.ceil(len(eps) / PAGE_ROWS)), ratings=ratings,
            progress=r.progress())


class LiveJson(View):
    """What a page that updates itself polls: progress, whether the analysis is ready, the
    latest episodes (`static/live.js`)."""

    path = "/run/{run:int}/live.json"

    def get(self, request: Request) -> Response:
        i, r = self.site.run(request)
        snap = r.snapshot()
        return JSONResponse({
            "version": snap.version, **snap.progress,
            "analysis_ready": not r.analysis(wait=False).pending,
            "latest": [{"url": f"/run/{i}/episode/{q(x['episode_key'])}", "env_id": x["env_id"],
                        "solver": x["solver"], "seed": x["seed"],
                        "condition": "hint" if x["hinted"] else "no hint",
                        "outcome": x["outcome"], "turns": x["turns"]} for x in snap.latest],
        })


class PygmentsCss(View):
    """The stylesheet of highlighted sources."""

    path = "/static/pygments.css"

    def get(self, request: Request) -> Response:
        return Response(self.site.css, media_type="text/css")


VIEWS: tuple[type[View], ...] = (RunsPage, OverviewPage, EnvironmentsPage, EnvironmentPage,
                                 EpisodePage, PlayerPage, LiveJson, PygmentsCss)
"""Every page, in route order."""
