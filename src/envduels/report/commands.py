"""`envduels report` and `envduels leaderboard`: read run databases, analyse, write and print."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from envduels.errors import UserError

if TYPE_CHECKING:
    from envduels.store import Tables


def report_schema() -> dict[str, object]:
    """The JSON Schema (draft 2020-12) of one run's `report --json` object: `RunReport`'s, so
    every report `envduels report` writes for one run validates against it."""
    from envduels.analysis.result import RunReport

    return RunReport.model_json_schema()


def schema_command() -> int:
    """Print `report_schema()` as indented JSON (`envduels report --schema`)."""
    print(json.dumps(report_schema(), indent=2, ensure_ascii=False))
    return 0


def _load(run_dir: Path) -> tuple[Tables, str, str | None]:
    """The run's tables, its name and history mode; UserError when it is not a finished-enough run."""
    from envduels.store import DB_NAME, Store

    run_dir = Path(run_dir)
    if not (run_dir / DB_NAME).is_file():
        raise UserError(f"{run_dir} holds no run database ({DB_NAME}); pass the output_dir of a run "
                        "started with `envduels run CONFIG`")
    store = Store.open_readonly(run_dir, live=False)
    try:
        tables = store.tables()
        config = store.run_config()
    finally:
        store.close()
    if tables.environments.empty:
        raise UserError(f"{run_dir} has no environments yet; run `envduels run CONFIG` until authoring "
                        "has produced some, then report again")
    name = (config.name if config is not None else "") or run_dir.name
    history = config.tournament.history if config is not None else None
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
    docs = [a.json for a in analyses]
    comparison = compare_runs(docs) if len(analyses) > 1 else None
    if json_path is None and html_path is None:
        stem = f"{Path(run_dirs[0]).resolve().name}-report"
        json_path, html_path = Path(f"{stem}.json"), Path(f"{stem}.html")
    written = []
    if json_path is not None:
        doc = docs[0] if comparison is None else {"runs": docs, "comparison": comparison}
        _write(Path(json_path), json.dumps(doc, indent=2, allow_nan=False))
        written.append(str(json_path))
    if html_path is not None:
        _write(Path(html_path), render_html(analyses, comparison))
        written.append(str(html_path))
    if len(analyses) == 1:
        print_summary(headline(analyses[0].result), written)
    else:  # one labelled block per run, in the order given
        for a in analyses:
            run = a.result.run
            print_summary(headline(a.result), [], title=f"{run.name} ({run.episodes} episodes)")
        print_summary([], written)
    return 0


def leaderboard_command(run_dir: Path, *, bootstrap: int) -> int:
    """Print the duel, author and solver ratings with intervals and ranks."""
    from envduels.analysis import compute_ratings, matched_pairs
    from envduels.analysis.metrics import solver_names
    from envduels.analysis.summary import is_true, ordered
    from envduels.report.story import unrated_reason
    from envduels.report.terminal import print_leaderboard

    _check_bootstrap(bootstrap)
    tables, _name, _history = _load(run_dir)
    ratings = compute_ratings(tables, matched_pairs(tables.episodes), bootstrap=bootstrap)
    facts = {"solvers": [{"model": s} for s in solver_names(tables)],
             "environments": [{"author": e["author"], "valid": bool(e["valid"]), "fixed_pool": is_true(e.get("fixed_pool"))}
                              for e in tables.environments.to_dict("records")]}
    print_leaderboard({k: ordered(r.rows) for k, r in ratings.items()},
                      why={k: unrated_reason(k, facts) for k in ratings}, bootstrap=bootstrap)
    return 0


def report_episodes_command(episodes_path: Path, *, json_path: Path | None, html_path: Path | None,
                            bootstrap: int) -> int:
    """Rate the episodes of a JSON Lines file recorded by another harness (see
    `envduels.report.episodes`): the SPEC §8 JSON and HTML where asked, the headline printed.
    Writes nothing unless --json or --html is given."""
    from envduels.report.episodes import analyze_episodes, load_episodes
    from envduels.report.html import headline, render_html
    from envduels.report.terminal import print_summary

    _check_bootstrap(bootstrap)
    tables = load_episodes(episodes_path)
    if tables.ignored_fields:
        print(f"note: {episodes_path}: ignored field(s) {', '.join(tables.ignored_fields)} (not part of "
              "the episodes format)", file=sys.stderr)
    analysis = analyze_episodes(tables, bootstrap=bootstrap, name=Path(episodes_path).stem)
    written = []
    if json_path is not None:
        _write(Path(json_path), json.dumps(analysis.json, indent=2, allow_nan=False))
        written.append(str(json_path))
    if html_path is not None:
        _write(Path(html_path), render_html([analysis]))
        written.append(str(html_path))
    print_summary(headline(analysis.result), written)
    return 0


def demo_command(*, json_path: Path | None, html_path: Path | None, bootstrap: int) -> int:
    """`envduels demo`: simulate, analyse and report the demo tournament (`report.demo`); its
    preface and the report's summary printed, JSON and HTML written where asked (default:
    ./demo-report.html)."""
    from envduels.analysis import analyze
    from envduels.report.demo import preface, simulated_run
    from envduels.report.html import headline, render_html
    from envduels.report.terminal import print_summary

    _check_bootstrap(bootstrap)
    # No design convergence: a simulated environment's "source" is a placeholder, and comparing
    # placeholders would report a similarity that means nothing
    analysis = analyze(simulated_run().tables, bootstrap=bootstrap, name="demo (simulated players)",
                       convergence=False)
    lines = preface(analysis.result)
    if json_path is None and html_path is None:
        html_path = Path("demo-report.html")
    written = []
    if json_path is not None:
        _write(Path(json_path), json.dumps(analysis.json, indent=2, allow_nan=False))
        written.append(str(json_path))
    if html_path is not None:
        _write(Path(html_path), render_html([analysis], preface=lines))
        written.append(str(html_path))
    print_summary(lines + headline(analysis.result), written)
    return 0
