"""An author whose environments all broke is named, with why, in the JSON and the report; it
used to vanish from the author rating with no word (issue 20). And the McNemar wording says
what the test holds for: the environments this run drew."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from envduels.report.episodes import analyze_episodes
from envduels.report.story import GLOSSARY, findings

sys.path.insert(0, str(Path(__file__).parents[1] / "analysis"))
from tables import env, pair, tables  # noqa: E402


def rows() -> list[dict]:
    """a, b, c write sound environments; every episode on d's two environments broke."""
    out = []
    for author in "abcd":
        for k in range(2):
            for solver in "abcd":
                if solver == author:
                    continue
                for seed in range(2):
                    for hinted in (False, True):
                        if author == "d":
                            outcome = "incomplete" if seed == 0 else "error"
                        else:
                            outcome = "success" if (hinted or seed == 1) and solver != "c" else "failure"
                        out.append({"env_id": f"{author}{k}", "author": author, "domain": "logic", "solver": solver,
                                    "seed": seed, "hinted": hinted, "outcome": outcome})
    return out


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    path = tmp_path_factory.mktemp("broken") / "broken.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    return analyze_episodes(path, bootstrap=20).json


def test_an_author_whose_every_episode_broke_is_named_with_why_in_the_json(broken):
    assert [r["model"] for r in broken["ratings"]["author"]] != [] and "d" not in {
        r["model"] for r in broken["ratings"]["author"]}
    assert broken["rating_methods"]["author"]["unrated"] == [{
        "model": "d",
        "reason": "none of the 24 episodes on its 2 valid environments formed a matched pair (12 incomplete, "
                  "12 error), so it has no lift to compare"}]


def test_the_report_says_which_author_is_not_rated_and_why(broken):
    lines = findings(broken)
    assert ("Not in the author rating: d: none of the 24 episodes on its 2 valid environments formed a matched "
            "pair (12 incomplete, 12 error), so it has no lift to compare.") in lines
    # right after the author finding
    author_line = next(i for i, s in enumerate(lines) if "author" in s.lower() and "Not in" not in s)
    assert lines[author_line + 1].startswith("Not in the author rating: d")


def test_an_author_whose_environments_all_failed_validation_is_named_with_why():
    from envduels.analysis import analyze

    t = tables(["A", "B", "C"],
               [env("a1", "A"), env("b1", "B"), env("c1", "C", valid=False), env("c2", "C", valid=False)],
               [pair("a1", "A", "B", 0, 0, 1), pair("a1", "A", "C", 0, 1, 1),
                pair("b1", "B", "A", 0, 0, 0), pair("b1", "B", "C", 0, 0, 1)])
    j = analyze(t, bootstrap=10, permutations=10, convergence=False).json
    assert j["rating_methods"]["author"]["unrated"] == [
        {"model": "C", "reason": "all 2 of its environments failed validation, so it has no lift to compare"}]


def test_the_mcnemar_glossary_says_it_holds_for_the_environments_drawn():
    text = GLOSSARY["McNemar p"]
    assert "really changes" not in text
    assert text.startswith("exact test of rescues against harms on this run's environments")
    assert "does not say the hint helps this solver on other environments" in text
