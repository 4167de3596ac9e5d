"""Issue 34: the viewer's findings state the paper's headline when the divergence test rejects,
and say that nothing was found when it does not (the same sentence as the report's story)."""

from __future__ import annotations

import re

import httpx
import numpy as np
import pytest
from report.rundb import write_run  # tests/ is on the path (conftest.py)

from envduels.analysis import simulate_tournament
from envduels.view import create_app
from envduels.view.commands import running

from .conftest import analysed

ABILITY = np.linspace(-1.5, 1.5, 9)
SHAPES = {
    # the strong divergence: hint quality and environment difficulty opposite to solving skill
    "strong": {"author_teaching": list(1.0 - ABILITY), "author_difficulty": list(-ABILITY)},
    # the no divergence: the best solver writes the best hints and the hardest environments
    "aligned": {"author_teaching": list(1.0 + ABILITY), "author_difficulty": list(ABILITY)},
}
CLAIM = "Authoring and solving rank these models differently"
NOTHING = "No evidence that authoring and solving rank these models differently"


def _findings(page: str) -> list[str]:
    part = page[page.index('id="headline"'):page.index('id="ratings"')]
    return [re.sub(r"<[^>]+>", "", s).replace("&#39;", "'") for s in re.findall(r"<li>(.*?)</li>", part, re.S)]


@pytest.mark.slow
def test_the_overview_states_the_headline_when_claimed_and_says_nothing_was_found_otherwise(tmp_path):
    runs = []
    for shape in ("strong", "aligned"):
        sim = simulate_tournament(players=9, envs_per_author=10, rounds=1, seeds=4, seed=0, transcripts=False,
                                  environments="uneven", ability=list(ABILITY), **SHAPES[shape])
        runs.append(write_run(tmp_path / shape, sim, name=shape, hostile=False))
    with running(create_app(runs, bootstrap=20)) as url:
        for i, (said, unsaid) in enumerate(((CLAIM, NOTHING), (NOTHING, CLAIM))):
            items = _findings(httpx.get(f"{analysed(url, i).rstrip('/')}/run/{i}/", timeout=120).text)
            assert len([s for s in items if s.startswith(said)]) == 1, items
            assert not any(s.startswith(unsaid) for s in items), items
