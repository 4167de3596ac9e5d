"""`envduels correlate RUN_DIR --gains FILE.csv`: duel statistics against measured training gains.

Reads the gains file (one row per author pool or per environment), computes the predictors from
the run's tables (`envduels.analysis.transfer`), prints a table, and saves `correlate.json`,
`scatter.png` and `scatter.svg` in `--out` (default RUN_DIR/correlate/).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from envduels._safe_load import read_text_capped
from envduels.errors import UserError

if TYPE_CHECKING:  # the analysis stack loads scipy: imported only once the input is known good
    from envduels.analysis.transfer import TransferResult, Unit

GAINS_MAX_BYTES = 64 << 20
"""The largest gains file read (one short row per author or environment)."""
HEADER_FIX = "the header must be `author,gain` (one row per author pool) or `env_id,gain` (one per environment)"


def parse_gains(path: Path, *, authors: set[str], env_ids: set[str]) -> tuple[Unit, pd.Series]:
    """Read a gains CSV into (unit, gain per unit).

    Raises a one-line UserError naming the file, the line and the fix for: an unreadable or empty
    file, a header without `gain` or without exactly one of `author`/`env_id`, an empty key, a
    gain that is not a finite number, a duplicate row, and a key the run does not know. Extra
    columns are ignored; blank lines are skipped.
    """
    text = read_text_capped(path, GAINS_MAX_BYTES, "gains file", encoding="utf-8-sig",
                            missing=f"gains file {path} does not exist; pass --gains with a CSV file: {HEADER_FIX}")

    reader = csv.reader(text.splitlines())
    try:
        return _parse_rows(path, reader, authors=authors, env_ids=env_ids)
    except csv.Error as err:   # a cell over csv's field limit, a NUL, a broken quote
        raise UserError(f"{path} line {reader.line_num}: not readable as CSV ({err}); save it as "
                        f"plain CSV: {HEADER_FIX}") from None


def _parse_rows(path: Path, reader: Any, *, authors: set[str],
                env_ids: set[str]) -> tuple[Unit, pd.Series]:
    header = next((row for row in reader if any(cell.strip() for cell in row)), None)
    if header is None:
        raise UserError(f"gains file {path} is empty; {HEADER_FIX}")
    names = [cell.strip() for cell in header]
    line = reader.line_num
    has = {key: key in names for key in ("author", "env_id", "gain")}
    if not has["gain"] or has["author"] == has["env_id"]:
        problem = (
            "has no `gain` column"
            if not has["gain"]
            else "has both `author` and `env_id`"
            if has["author"]
            else "has neither `author` nor `env_id`"
        )
        raise UserError(f"{path} line {line}: the header {problem} (found: {', '.join(names)}); {HEADER_FIX}")
    unit: Unit = "author" if has["author"] else "env_id"
    key_col, gain_col = names.index(unit), names.index("gain")
    known = authors if unit == "author" else env_ids
    what = "author" if unit == "author" else "environment id"

    gains: dict[str, float] = {}
    first_line: dict[str, int] = {}
    for row in reader:
        line = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        key = row[key_col].strip() if key_col < len(row) else ""
        raw = row[gain_col].strip() if gain_col < len(row) else ""
        if not key:
            raise UserError(f"{path} line {line}: the {unit} cell is empty; give the {what} this gain belongs to")
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            shown = repr(raw) if raw else "an empty cell"
            raise UserError(
                f"{path} line {line}: gain {shown} for {unit} {key!r} is not a finite number; write a decimal like 0.12"
            )
        if key in gains:
            raise UserError(
                f"{path} line {line}: {unit} {key!r} already appears on line {first_line[key]}; keep one row per {what}"
            )
        if key not in known:
            listed = ", ".join(sorted(known)[:8]) + (", ..." if len(known) > 8 else "")
            raise UserError(
                f"{path} line {line}: {unit} {key!r} is not in this run (known: {listed or 'none'}); fix the name or drop the row"
            )
        gains[key] = value
        first_line[key] = line
    if not gains:
        raise UserError(f"gains file {path} has a header but no rows; add one row per {what} with its gain")
    return unit, pd.Series(gains, name="gain", dtype=float).rename_axis(unit)


def correlate_tables(
    tables: Any, gains_path: Path, *, bootstrap: int, seed: int = 0
) -> TransferResult:
    """Parse the gains against the run's authors and environments, and correlate."""
    envs = tables.environments
    authors = set(envs["author"].astype(str)) if not envs.empty else set()
    env_ids = set(envs["env_id"].astype(str)) if not envs.empty else set()
    unit, gains = parse_gains(gains_path, authors=authors, env_ids=env_ids)
    from envduels.analysis.transfer import correlate_gains, unit_predictors

    predictors = unit_predictors(tables.episodes, unit)
    return correlate_gains(predictors, gains, unit=unit, bootstrap=bootstrap, seed=seed)


def load_run_tables(run_dir: Path) -> Any:
    """The run's `Tables`; a one-line UserError when RUN_DIR is not a run folder."""
    if not run_dir.is_dir():
        raise UserError(f"run folder {run_dir} does not exist; pass the folder that holds run.db")
    if not (run_dir / "run.db").is_file():
        raise UserError(f"{run_dir} holds no run.db; pass the output_dir of an `envduels run`")
    from envduels.store import RunReader

    with RunReader(run_dir) as store:
        return store.tables()


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def print_result(result: TransferResult) -> None:
    """Two tables (Pearson with the family-wise adjusted p that decides, then Spearman), narrow
    enough for an 80-column terminal, then each predictor's plain-language conclusion."""
    from rich.console import Console
    from rich.table import Table

    console = Console()

    def ci(c: Any) -> str:
        return f"[{_fmt(c.ci_low)}, {_fmt(c.ci_high)}]" if c.ci_low is not None else "—"

    title = f"Training gain vs duel statistics ({result.n_units} {result.unit} units)"
    pearson = Table(title=f"{title}: Pearson", title_justify="left")
    pearson.add_column("predictor", no_wrap=True)
    for col in ("n", "r", "95% CI", "p", "p adj.", "crit |r|"):
        pearson.add_column(col, justify="right", no_wrap=True)
    spearman = Table(title="Spearman (rank) correlation", title_justify="left")
    spearman.add_column("predictor", no_wrap=True)
    for col in ("n", "ρ", "95% CI", "p"):
        spearman.add_column(col, justify="right", no_wrap=True)
    for res in result.results:
        name = res.predictor + (" *" if res.primary else "")
        p, s = res.pearson, res.spearman
        pearson.add_row(name, str(res.n), _fmt(p.r), ci(p), _fmt(p.p_value, 3), _fmt(res.p_adjusted, 3),
                        _fmt(res.critical_r))
        spearman.add_row(name, str(res.n), _fmt(s.r), ci(s), _fmt(s.p_value, 3))
    console.print(pearson)
    console.print("* primary predictor, tested first; the others only if it is significant, then Holm "
                  "(p adj. decides)", style="dim", highlight=False)
    console.print(spearman)
    for res in result.results:
        console.print(f"• {res.conclusion}", highlight=False)


def save_scatter(result: TransferResult, out_dir: Path) -> None:
    """One panel per predictor: gain against the predictor, each unit labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from envduels.report.plots import plot_label

    fig, axes = plt.subplots(2, 2, figsize=(9.0, 8.0))
    for ax, res in zip(axes.flat, result.results, strict=True):
        pts = [
            (p[res.predictor], p["gain"], p["unit"])
            for p in result.points
            if p[res.predictor] is not None and not math.isnan(p[res.predictor])
        ]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], color="#3465a4")
        if len(pts) <= 30:
            for x, y, label in pts:
                ax.annotate(plot_label(label, 32), (x, y), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")
        r = res.pearson.r
        ax.set_title(f"{res.predictor}\nr = {_fmt(r)}, n = {res.n}", fontsize=10)
        ax.set_xlabel(res.predictor)
        ax.set_ylabel("training gain")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_dir / "scatter.png", dpi=110)
    fig.savefig(out_dir / "scatter.svg")
    plt.close(fig)
