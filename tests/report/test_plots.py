"""What the report's charts draw: nothing overlaps, scales mean the same in every report."""

from __future__ import annotations

import itertools

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.text import Text

from envduels.analysis.result import Learning, Scale
from envduels.report import plots

from .reports import filled, rating_rows


def _boxes(fig, artists):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [a.get_window_extent(renderer) for a in artists if a.get_visible() and a.get_text()]


def _overlapping(boxes):
    return [(a, b) for a, b in itertools.combinations(boxes, 2) if a.overlaps(b)]


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


SIZES = {"tiny": 0.135, "small": 0.5, "one": 1.0, "mid": 1.5, "three": 3.0, "seven": 7.0, "eight": 8.0,
         "big": 70.0, "huge": 405.0}


def _scale():
    pts = [{"model": m, "params_b": b, "rating": 1000 + 10 * k} for k, (m, b) in enumerate(SIZES.items())]
    return {"author": {"points": pts, "spearman": 1.0}, "solver": {"points": pts[:4], "spearman": None}}


def test_size_plot_tick_labels_never_overlap_and_every_point_is_named():
    fig = plots.scale_plot_figure(filled(Scale, _scale()))
    for ax in fig.axes:
        ticks = _boxes(fig, ax.get_xticklabels(which="both"))
        assert len(ticks) >= 2 and _overlapping(ticks) == []
        assert all(t.get_text() == "" or "$" not in t.get_text() for t in ax.get_xticklabels(which="both"))
    names = [t.get_text() for t in fig.axes[0].texts]
    assert sorted(names) == sorted(SIZES)
    assert _overlapping(_boxes(fig, fig.axes[0].texts)) == []


def _rows(kind_shift: float):
    # five models bunched together: their names collide unless placed apart
    return [{"model": f"model-{k}", "rating": 1000 + 4 * k + kind_shift, "ci_low": 400 - 50 * k,
             "ci_high": 1700 + 60 * k, "rank": 1} for k in range(5)]


def test_authoring_vs_solving_names_do_not_collide_and_every_error_bar_fits_the_axes():
    author, solver = _rows(0), _rows(2)
    fig = plots.scatter_ratings_figure(rating_rows(author), rating_rows(solver))
    ax = fig.axes[0]
    assert sorted(t.get_text() for t in ax.texts) == [f"model-{k}" for k in range(5)]
    assert _overlapping(_boxes(fig, ax.texts)) == []
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    assert x0 <= min(r["ci_low"] for r in solver) and x1 >= max(r["ci_high"] for r in solver)
    assert y0 <= min(r["ci_low"] for r in author) and y1 >= max(r["ci_high"] for r in author)


def test_round_ticks_are_the_rounds_themselves_and_one_round_draws_no_learning_plot():
    def learning(rounds):
        return {"authors": [{"model": "a", "rounds": [{"round": r, "lift": 0.1 * r} for r in rounds]}]}

    fig = plots.learning_plot_figure(filled(Learning, learning([1, 2])))
    assert list(fig.axes[0].get_xticks()) == [1, 2]
    assert plots.learning_plot_figure(filled(Learning, learning([1]))) is None
    runs = {"runs": [{"run": "x", "history": "all", "lift_by_round": {"1": 0.1, "2": 0.2, "3": 0.1}}]}
    assert plots.runs_plot(runs) is not None


def test_a_share_is_coloured_on_0_to_1_and_a_lift_on_minus_1_to_1():
    share = pd.DataFrame([[None, 0.75], [0.25, None]], index=["a", "b"], columns=["a", "b"], dtype=float)
    fig = plots.heatmap_figure(share, "Share won", limits=(0.0, 1.0), label="share won")
    assert fig.axes[1].get_ylim() == (0.0, 1.0)
    lift = pd.DataFrame([[0.2], [-0.1]], index=["a", "b"], columns=["solo"])
    fig = plots.heatmap_figure(lift, "Lift", limits=(-1.0, 1.0))
    assert fig.axes[1].get_ylim() == (-1.0, 1.0)


def test_a_one_column_heatmap_keeps_its_colour_bar_label_clear_of_the_title():
    lift = pd.DataFrame([[0.5], [0.25]], index=["writer-a", "writer-b"], columns=["solo"])
    fig = plots.heatmap_figure(lift, "Hint lift: author (rows) × solver (columns)", limits=(-1.0, 1.0),
                               label="pass with hint − pass without")
    texts = fig.findobj(Text)
    title = _boxes(fig, [t for t in texts if t.get_text().startswith("Hint lift")])[0]
    label = _boxes(fig, [t for t in texts if t.get_text() == "pass with hint − pass without"])[0]
    assert not title.overlaps(label)


def test_a_rating_with_an_open_bound_runs_to_the_edge_and_models_are_drawn_best_at_the_top():
    rows = [{"model": "champ", "rating": 1500.0, "ci_low": 1200.0, "ci_high": None, "rank": 1},
            {"model": "mid", "rating": 1000.0, "ci_low": 800.0, "ci_high": 1250.0, "rank": 1},
            {"model": "last", "rating": 500.0, "ci_low": None, "ci_high": 700.0, "rank": 3}]
    fig = plots.ratings_plot_figure(rating_rows(rows), "Duel rating")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["last (#3)", "mid (#1)", "champ (#1)"]  # bottom to top
    bars = [seg for c in ax.collections for seg in c.get_segments()]
    x0, x1 = ax.get_xlim()
    champ = [seg for seg in bars if seg[0][1] == 2][0]
    last = [seg for seg in bars if seg[0][1] == 0][0]
    assert champ[0][0] == 1200.0 and x0 < champ[1][0] < x1 and champ[1][0] > 1500.0
    assert x0 < last[0][0] < 500.0 and last[1][0] == 700.0
