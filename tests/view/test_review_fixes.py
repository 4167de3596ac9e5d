"""Findings of the final review, each pinned: the viewer never answers any Host header, the
terminal summary prints no escape sequence, a `$` in a model name does not crash a plot, and an
author rating whose ranks are withheld is not said to lack an interval."""

from __future__ import annotations

import io

from rich.console import Console

from envduels.analysis import analyze, simulate_tournament
from envduels.analysis.result import RatingRow
from envduels.report import plots
from envduels.report.story import findings
from envduels.report.terminal import print_summary
from envduels.view.commands import allowed_hosts


def test_the_viewer_never_accepts_any_host_header_even_beyond_loopback():
    for host in ("127.0.0.1", "0.0.0.0", "127.0.0.2"):
        hosts = allowed_hosts(host)
        assert "*" not in hosts and "localhost" in hosts and host in hosts


def test_the_terminal_summary_prints_no_escape_sequence_from_model_written_names():
    out = io.StringIO()
    print_summary(["Best author: evil\x1b[2J\x1b]52;c;cHduZWQ=\x07 leads"], [],
                  Console(file=out, force_terminal=False, width=200))
    assert "\x1b" not in out.getvalue() and "\x07" not in out.getvalue()
    assert "evil" in out.getvalue()


def test_a_dollar_sign_in_a_model_name_does_not_crash_a_plot():
    rows = [{"model": "a$\\frac{$", "rating": 1100.0, "ci_low": 1000.0, "ci_high": 1200.0,
             "rank": 1},
            {"model": "b", "rating": 900.0, "ci_low": 800.0, "ci_high": 1000.0, "rank": 2}]
    typed = [RatingRow(**r, ci_note=None, above=None, below=None, tied_with=None, points=0, games=0) for r in rows]
    assert plots.ratings_plot(typed, "Duel rating").startswith("data:image/png;base64,")


def test_an_author_rating_with_intervals_but_withheld_ranks_says_so_not_that_it_has_none():
    sim = simulate_tournament(players=4, envs_per_author=5, seed=1)
    j = analyze(sim.tables, bootstrap=100).json
    author = next(line for line in findings(j) if line.startswith("Best author"))
    assert "95% interval" in author and "no interval could be computed" not in author
    # author ranks are given again (a permutation test); a report written while they were
    # withheld carries rank_note and null ranks, and still reads right
    for row in j["ratings"]["author"]:
        row.update(rank=None, above=None, below=None, tied_with=None)
    j["rating_methods"]["author"]["rank_note"] = "author ranks withheld: see docs/analysis.md"
    author = next(line for line in findings(j) if line.startswith("Best author"))
    assert "95% interval" in author and "no rank is claimed" in author
    assert "no interval could be computed" not in author
