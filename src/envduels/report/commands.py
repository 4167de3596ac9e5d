"""`envduels report` and `envduels leaderboard`: read run databases, analyse, write and print."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envduels.errors import UserError


def _load(run_dir: Path) -> tuple[Any, str, str | None]:
    """The run's tables, its name and history mode; UserError when it is not a finished-enough run."""
    from envduels.store import DB_NAME, Store

    run_dir = Path(run_dir)
    if not (run_dir / DB_NAME).is_file():
        raise UserError(f"{run_dir} holds no run database ({DB_NAME}); pass the output_dir of a run "
                        "started with `envduels run CONFIG`")
    store = Store.open_readonly(run_dir, live=False)
    try:
        tables = store.tables()
        config = store.get_meta("config") or {}
    finally:
        store.close()
    if tables.environments.empty:
        raise UserError(f"{run_dir} has no environments yet; run `envduels run CONFIG` until authoring "
                        "has produced some, then report again")
    name = config.get("name") or run_dir.name
    history = (config.get("tournament") or {}).get("history")
    return tables, name, history


def _check_bootstrap(bootstrap: int) -> None:
    if bootstrap < 0:
        raise UserError(f"--bootstrap must be 0 or more (got {bootstrap}); 1000 or more for reported intervals")


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise UserError(f"cannot write {path} ({err.strerror}); choose a writable path") from None


def report_command(run_dirs: list[Path], *, json_path: Path | None, html_path: Path | None,
                   bootstrap: int) -> int:
    """Analyse one run (or several side by side) and write the SPEC §8 JSON and the HTML report.

    Without --json/--html both go to the current folder as `<first run folder's name>-report.json`
    and `-report.html`: `report` only reads a run folder (SPEC §11), so it can report on a run
    the user cannot write (a colleague's, a read-only mount) and never changes a run's files.
    Several runs: the JSON is `{"runs": [<§8 object>, ...], "comparison": {...}}`.
    """
    from envduels.analysis import analyze, compare_runs
    from envduels.report.html import headline, render_html
    from envduels.report.terminal import print_summary

    _check_bootstrap(bootstrap)
    if not run_dirs:
        raise UserError("give at least one run folder: envduels report RUN_DIR [RUN_DIR ...]")
    analyses = []
    for run_dir in run_dirs:
        tables, name, history = _load(run_dir)
        analyses.append(analyze(tables, bootstrap=bootstrap, name=name, history=history))
    comparison = compare_runs([a.json for a in analyses]) if len(analyses) > 1 else None
    if json_path is None and html_path is None:
        stem = f"{Path(run_dirs[0]).resolve().name}-report"
        json_path, html_path = Path(f"{stem}.json"), Path(f"{stem}.html")
    written = []
    if json_path is not None:
        doc: Any = analyses[0].json if comparison is None else {"runs": [a.json for a in analyses], "comparison": comparison}
        _write(Path(json_path), json.dumps(doc, indent=2, allow_nan=False))
        written.append(str(json_path))
    if html_path is not None:
        _write(Path(html_path), render_html(analyses, comparison))
        written.append(str(html_path))
    lines = [line for a in analyses for line in headline(a.json)]
    print_summary(lines, written)
    return 0


def leaderboard_command(run_dir: Path, *, bootstrap: int) -> int:
    """Print the duel, author and solver ratings with intervals and ranks."""
    from envduels.analysis import compute_ratings, matched_pairs
    from envduels.report.terminal import print_leaderboard

    _check_bootstrap(bootstrap)
    tables, _name, _history = _load(run_dir)
    ratings = compute_ratings(tables, matched_pairs(tables.episodes), bootstrap=bootstrap)
    print_leaderboard({k: r.rows for k, r in ratings.items()})
    return 0
