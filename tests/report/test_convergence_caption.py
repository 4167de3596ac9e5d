"""The design-convergence caption says what the shuffled-author null actually tests."""

from __future__ import annotations

import re

from envduels.analysis import analyze, simulate_tournament
from envduels.report.html import render_html


def test_the_convergence_p_values_are_described_as_cross_author_against_within_author():
    run = simulate_tournament(players=4, envs_per_author=3, seeds=2, seed=0, transcripts=False)
    a = analyze(run.tables, bootstrap=20, permutations=200)
    html = render_html([a])
    conv = a.json["convergence"]
    text = re.sub(r"\s+", " ", html)
    assert "compares environments by different authors with environments by the same author" in text
    assert f"p_converge = {conv['p_converge']:.3f}: small means different authors' environments are at least as " \
           "alike as one author's own" in text
    assert f"p_distinct = {conv['p_distinct']:.3f}" in text
    assert "than chance" not in text
