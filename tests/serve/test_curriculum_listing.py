"""Any trainer that reads `GET /environments` draws with the same curriculum as the TRL adapter."""

from __future__ import annotations

import random

import httpx
import pytest

from envduels.rl import Curriculum

from .conftest import PANEL

pytest.importorskip("openenv.core", reason="the serve extra is not installed: pip install 'envduels[serve]'")


def test_a_curriculum_from_the_listing_weighs_the_served_environments_by_learnability(server):
    listing = httpx.get(f"{server.url}/environments").json()["environments"]
    curriculum = Curriculum.from_listing(listing)
    # library and bare-file environments have no panel; the run's and the export's do
    assert curriculum.unmeasured == ["number_guess", "marker"]
    learn = {"maze": 0.125, "r1-bob-0": next(e["panel"]["learnability"] for e in listing
                                              if e["id"] == "r1-bob-0"),
             "graded": PANEL["learnability"]}
    total = sum(learn.values())
    assert curriculum.weights() == pytest.approx(
        {"number_guess": 0.0, "marker": 0.0, **{e: v / total for e, v in learn.items()}})
    seeds = {e["id"]: e["benchmark_seeds"] for e in listing}
    for env_id, seed in curriculum.draw(50, random.Random(1)):
        assert env_id in learn and seed in seeds[env_id]
