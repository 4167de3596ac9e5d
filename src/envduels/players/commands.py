"""`envduels models check CONFIG`: one short call to every player before a long run."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from envduels._text import plural
from envduels.config import load_config
from envduels.players._build import CheckRow, check_models


def render_check(rows: list[CheckRow]) -> Table:
    table = Table(title="models check")
    for col in ("player", "provider", "model", "latency", "tokens in/out", "result"):
        table.add_column(col)
    for r in rows:
        latency = f"{r.latency_s:.2f} s" if r.latency_s is not None else "-"
        result = Text("OK", style="green") if r.ok else Text("error", style="red")
        table.add_row(r.player, r.provider, r.model, latency,
                      f"{r.input_tokens}/{r.output_tokens}", result)
    return table


def check_command(config_path: str | Path) -> int:
    """Print one row per player; exit code 1 if any player failed, 0 otherwise."""
    cfg = load_config(config_path)
    # Retry warnings would interleave with the table; every failure is in its row instead.
    players_log = logging.getLogger("envduels.players")
    level = players_log.level
    players_log.setLevel(logging.ERROR)
    try:
        rows = asyncio.run(check_models(cfg))
    finally:
        players_log.setLevel(level)
    console = Console()
    console.print(render_check(rows))
    failed = [r for r in rows if not r.ok]
    for r in failed:
        line = r.error if r.error.startswith("player ") else f"player {r.player!r}: {r.error}"
        console.print(Text(line), soft_wrap=True)
    if failed:
        console.print(f"{len(failed)} of {plural(len(rows), 'player')} failed; fix them before a run.",
                      markup=False)
        return 1
    return 0
