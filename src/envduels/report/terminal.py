"""Rich terminal tables: the leaderboard and the one-screen report summary."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from envduels._text import printable

TITLES = {
    "duel": "Duel rating (author vs solver, both directions)",
    "author": "Author rating (higher lift on common solvers)",
    "solver": "Solver rating (higher no-hint success on common environments)",
}


def rating_table(kind: str, rows: list[dict[str, Any]], why: str | None = None) -> Table:
    """One rating kind as a table: rank, model, rating and its 95% interval, in the given order.

    `why`: the reason shown when fewer than two models are rated (one row cannot be a ranking)."""
    table = Table(title=TITLES.get(kind, kind), title_justify="left")
    table.add_column("rank", justify="right")
    table.add_column("model")
    table.add_column("rating", justify="right")
    table.add_column("95% interval", justify="right")
    table.add_column("points / games", justify="right")
    for r in rows:
        lo, hi = r["ci_low"], r["ci_high"]  # one side is open (null) after a clean sweep
        ci = "–" if lo is None and hi is None else f"{'−∞' if lo is None else f'{lo:.0f}'} – {'∞' if hi is None else f'{hi:.0f}'}"
        table.add_row(str(r["rank"] or "–"), r["model"], f"{r['rating']:.0f}", ci, f"{r['points']:g} / {r['games']:g}")
    if len(rows) < 2:
        table = Table(title=TITLES.get(kind, kind), title_justify="left")
        table.add_column("no rating")
        table.add_row(why or "fewer than two models could be compared")
    return table


def print_leaderboard(ratings: dict[str, list[dict[str, Any]]], console: Console | None = None, *,
                      why: dict[str, str] | None = None, bootstrap: int | None = None) -> None:
    """The three rating tables, best first (equal ratings by name); `why` per kind explains an
    empty one."""
    console = console or Console()
    for kind in ("duel", "author", "solver"):
        console.print(rating_table(kind, ratings.get(kind, []), (why or {}).get(kind)))
        console.print()
    console.print("Ratings: Bradley–Terry on the Elo scale (1000 = average rated model); duel intervals come "
                  "from the matches, author and solver intervals from resampling environments; rank = 1 + the "
                  "number of models certainly above (family-wise at 95%); equal ratings are listed by name.",
                  style="dim")
    if bootstrap == 0:
        console.print("Author and solver intervals and ranks were not computed because --bootstrap is 0.",
                      style="dim")


def print_summary(lines: list[str], paths: list[str], console: Console | None = None, *,
                  title: str | None = None) -> None:
    """The summary sentences as bullets (under `title` when given), then the files written."""
    console = console or Console()
    if title:
        console.print(title, style="bold", markup=False, emoji=False)
    for line in lines:
        # sentences quote model-written text (invalid reasons, environment ids): never markup
        console.print(f"• {printable(line)}", markup=False, emoji=False, highlight=False)
    for p in paths:
        console.print(f"wrote {p}", style="green")
