"""Every label reaching a plot goes through `printable()` (issue 19): a model or environment
name holding ESC or BEL never reaches the terminal raw, through matplotlib's "Glyph missing"
warning or anything else the report prints."""

from __future__ import annotations

import json
import os
import subprocess

import matplotlib.pyplot as plt
import pandas as pd
from test_cli_usage import SCRIPT, SRC

from envduels.analysis.result import Learning
from envduels.report import plots

from .reports import filled, rating_rows

EVIL = "ev\x1b]0;pwned\x07il\x1b[2J"   # retitles the window, rings the bell, clears the screen
CONTROL = ("\x1b", "\x07")


def _texts(fig: plt.Figure) -> list[str]:
    fig.canvas.draw()
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]


def test_a_plot_label_is_the_name_made_printable_short_and_without_math():
    assert plots.plot_label(EVIL) == "ev]0;pwnedil[2J"
    assert plots.plot_label("a$\\frac{$") == "a\\$\\frac{\\$"
    assert plots.plot_label("x" * 30, 10) == "x" * 9 + "…"


def test_no_control_character_reaches_a_drawn_figure():
    rows = [{"model": EVIL, "rating": 1010.0, "rank": 1, "ci_low": 950.0, "ci_high": 1070.0},
            {"model": "plain", "rating": 990.0, "rank": 2, "ci_low": 930.0, "ci_high": 1050.0}]
    figures = [
        plots.ratings_plot_figure(rating_rows(rows), "Duel rating"),
        plots.heatmap_figure(pd.DataFrame([[0.1, 0.2]], index=[EVIL], columns=[EVIL, "b"]), "lift"),
        plots.scatter_ratings_figure(rating_rows(rows), rating_rows(rows)),
        plots.learning_plot_figure(filled(Learning, {"authors": [{"model": EVIL, "rounds": [
            {"round": 1, "lift": 0.1}, {"round": 2, "lift": 0.2}]}]})),
    ]
    drawn = [t for fig in figures if fig is not None for t in _texts(fig)]
    plt.close("all")
    assert any("ev]0;pwnedil" in t for t in drawn)
    assert not [t for t in drawn if any(c in t for c in CONTROL)]


def test_report_of_episodes_with_control_characters_in_names_prints_none_of_them(tmp_path):
    rows = [{"env_id": f"env{EVIL}", "author": EVIL, "domain": "logic", "solver": s, "seed": seed,
             "hinted": hinted, "outcome": "success" if (hinted or seed) else "failure"}
            for s in (EVIL, "plain") for seed in (0, 1) for hinted in (False, True)]
    rows += [{**r, "env_id": "other", "author": "plain"} for r in rows]
    path = tmp_path / "evil.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = subprocess.run([str(SCRIPT), "report", "--episodes", str(path), "--bootstrap", "20",
                        "--html", str(tmp_path / "r.html"), "--json", str(tmp_path / "r.json")],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": SRC})
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "r.html").is_file()
    out = r.stdout + r.stderr
    assert not [c for c in CONTROL if c in out], ascii(out[-2000:])
    assert "Glyph" not in r.stderr, r.stderr[-2000:]
