"""Rich terminal tables: the leaderboard and the one-screen report summary."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

TITLES = {
    "duel": "Duel rating (author vs solver, both directions)",
    "author": "Author rating (higher lift on common solvers)",
    "solver": "Solver rating (higher no-hint success on common environments)",
}


def rating_table(kind: str, rows: list[dict[str, Any]]) -> Table:
    """One rating kind as a table: rank, model, rating and its 95% interval."""
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
    if not rows:
        table.add_row("–", "(not enough comparisons yet)", "", "", "")
    return table


def print_leaderboard(ratings: dict[str, list[dict[str, Any]]], console: Console | None = None) -> None:
    console = console or Console()
    for kind in ("duel", "author", "solver"):
        console.print(rating_table(kind, ratings.get(kind, [])))
        console.print()
    console.print("Ratings: Bradley–Terry on the Elo scale (1000 = average rated model); intervals resample "
                  "environments; rank = 1 + models certainly above.", style="dim")


def print_summary(lines: list[str], paths: list[str], console: Console | None = None) -> None:
    console = console or Console()
    for line in lines:
        console.print(f"• {line}")
    for p in paths:
        console.print(f"wrote {p}", style="green")
