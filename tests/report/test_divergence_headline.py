"""Issue 34: the report's story and the HTML report state the paper's headline when the
divergence test rejects (`claim`), and say that nothing was found when it does not (the viewer:
tests/view/test_divergence.py)."""

from __future__ import annotations

import re
from functools import cache

import numpy as np
import pytest

from envduels.analysis import analyze, simulate_tournament
from envduels.analysis.simulate import SimulatedRun
from envduels.report.html import headline, render_html
from envduels.report.story import divergence_headline

from .reports import complete

ABILITY = np.linspace(-1.5, 1.5, 9)
SHAPES = {
    # the strong divergence: hint quality and environment difficulty opposite to solving skill
    "strong": {"author_teaching": list(1.0 - ABILITY), "author_difficulty": list(-ABILITY)},
    # the no divergence: the best solver writes the best hints and the hardest environments
    "aligned": {"author_teaching": list(1.0 + ABILITY), "author_difficulty": list(ABILITY)},
}
CLAIM = "Authoring and solving rank these models differently"
NOTHING = "No evidence that authoring and solving rank these models differently"


def _report(**divergence):
    base = {"spearman": -0.8, "ci_low": None, "ci_high": None, "models": 9,
            "ci_note": "no interval: resampling noise is 30% of the author ratings' spread"}
    return complete({"run": {"episodes": 10, "matched_pairs": 4, "cost_usd": None, "bootstrap": 100},
                     "divergence": base | divergence})


def _cross(solver: str, author: str, ps: float, pa: float, certain: bool) -> dict:
    return {"better_solver": solver, "better_author": author, "p_solver": ps, "p_author": pa, "certain": certain}


def test_the_story_states_the_headline_with_a_certain_crossing():
    c = _cross("m08", "m00", 0.0005, 0.001, True)
    j = _report(p_value=0.0002, claim=True, crossings=[c, _cross("m07", "m00", 0.0005, 0.002, True)],
                clearest_crossing=c)
    assert divergence_headline(j) == (
        "Authoring and solving rank these models differently (divergence test p = 0.0002: author strength, the "
        "mean hint lift of a model's environments, falls as solver strength rises by more than the environments' "
        "noise explains): m08 is certainly the better solver and m00 certainly the better author (1 more such "
        "pair).")
    assert divergence_headline(j) in headline(j)


def test_the_story_names_the_clearest_crossing_and_says_it_is_not_certain_on_its_own():
    j = _report(p_value=0.0014, claim=True, crossings=[],
                clearest_crossing=_cross("m08", "m01", 7.9e-06, 0.0105, False))
    assert divergence_headline(j) == (
        "Authoring and solving rank these models differently (divergence test p = 0.0014: author strength, the "
        "mean hint lift of a model's environments, falls as solver strength rises by more than the environments' "
        "noise explains): the clearest crossing is m08, the better solver, and m01, the better author (rank "
        "tests p = 7.9e-06 and 0.011; not certain as a pair on its own).")


def test_the_story_says_nothing_was_found_when_the_test_does_not_reject():
    j = _report(spearman=0.82, p_value=0.97, claim=False, crossings=[],
                clearest_crossing=_cross("m07", "m05", 0.2, 0.4, False))
    line = divergence_headline(j)
    assert line == (
        "No evidence that authoring and solving rank these models differently (divergence test p = 0.97: author "
        "strength, the mean hint lift of a model's environments, falls as solver strength rises by no more than "
        "the environments' noise explains).")
    assert line in headline(j) and not any(s.startswith(CLAIM) for s in headline(j))


def test_a_run_without_a_test_says_why_in_the_divergence_sentence():
    j = _report(p_value=None, claim=False, test_note="no divergence test: m00 wrote fewer than 2 environments "
                                                      "with results")
    assert divergence_headline(j) is None
    line = [s for s in headline(j) if s.startswith("Authoring vs solving")][0]
    assert line.endswith("; no divergence test: m00 wrote fewer than 2 environments with results.")


def test_a_report_from_before_the_test_reads_back_without_a_headline():
    j = complete({"run": {"episodes": 10, "matched_pairs": 4, "cost_usd": None, "bootstrap": 100},
                  "divergence": {"spearman": 0.5, "ci_low": None, "ci_high": None, "models": 5}})
    assert j.divergence.p_value is None and j.divergence.claim is False and divergence_headline(j) is None


@cache
def _run(shape: str) -> SimulatedRun:
    return simulate_tournament(players=9, envs_per_author=10, rounds=1, seeds=4, seed=0, transcripts=False,
                               environments="uneven", ability=list(ABILITY), **SHAPES[shape])


@pytest.mark.slow
def test_the_html_report_states_the_headline_when_claimed_and_says_nothing_was_found_otherwise():
    for shape, claim in (("strong", True), ("aligned", False)):
        a = analyze(_run(shape).tables, bootstrap=50, convergence=False)
        assert a.result.divergence.claim is claim
        html = render_html([a])
        para = re.search(r'<p id="divergence-headline" class="([a-z-]+)">(.*?)</p>', html, re.S)
        assert para is not None, shape
        text = re.sub(r"<[^>]+>", "", para.group(2)).replace("&#39;", "'")
        assert para.group(1) == ("claim" if claim else "no-claim")
        assert text == divergence_headline(a.result)
        assert text.startswith(CLAIM if claim else NOTHING)
        # the top of the report says it too
        top = html[:html.index('id="divergence-headline"')]
        assert text.replace("'", "&#39;") in top
