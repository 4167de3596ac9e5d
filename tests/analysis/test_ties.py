"""Ties are ties: ratings that agree within `_ties.RATING_TOLERANCE` are one rating, one rank,
level, and listed by name, whatever the last bits of the fit (another BLAS kernel, thread count
or summation order moves those)."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest

from envduels.analysis import analyze, compute_ratings, matched_pairs, simulate_tournament
from envduels.analysis import ratings as ratings_module
from envduels.analysis._ties import RATING_TOLERANCE, kendall_tau, order, snap, tie_ranks
from envduels.analysis.ratings import holm_above
from envduels.analysis.summary import level_with_top
from envduels.report.episodes import load_episodes
from envduels.report.story import findings


def test_snap_gives_a_tie_its_mean_and_leaves_every_other_value_bit_for_bit():
    v = np.array([0.3, -1.0, 0.3 + 1e-12, 2.0, np.nan, -1.0 - 4e-7])
    out = snap(v)
    assert out[0] == out[2] == pytest.approx(0.3 + 5e-13, abs=1e-15)
    assert out[1] == out[5] == pytest.approx(-1.0 - 2e-7, abs=1e-15)
    assert out[3] == 2.0 and np.isnan(out[4])
    far = np.array([0.1, 0.1 + 2 * RATING_TOLERANCE, 5.0])
    assert snap(far).tobytes() == far.tobytes()
    # rows of a 2-D array are snapped each on its own
    rows = snap(np.array([[1.0, 1.0 + 1e-9, 3.0], [1.0, 2.0, 2.0 - 1e-9]]))
    assert rows[0, 0] == rows[0, 1] != rows[0, 2] and rows[1, 1] == rows[1, 2] != rows[1, 0]


@pytest.mark.parametrize("eps", [1e-12, -1e-12])
def test_order_and_ranks_of_a_tie_do_not_depend_on_its_last_bits(eps):
    values = [1.0, 0.5 + eps, 0.5, -2.0]
    assert order(["d", "c", "b", "a"], values) == ["d", "b", "c", "a"]  # the tie by name
    assert order(["d", "c", "b", "a"], values, descending=False) == ["a", "b", "c", "d"]
    assert tie_ranks(values).tolist() == [1, 2, 2, 4]


def test_kendall_tau_counts_a_pair_tied_within_the_tolerance_as_a_tie():
    truth = [1.0, 2.0, 3.0]
    assert kendall_tau(truth, [0.0, 1e-12, 1.0]) == kendall_tau(truth, [1e-12, 0.0, 1.0])
    assert kendall_tau(truth, [0.0, 1e-12, 1.0]) == pytest.approx(0.8165, abs=1e-4)  # τ-b, one tie


def test_the_rank_rule_never_orders_two_ratings_that_agree_within_the_tolerance():
    theta = np.array([0.0, 1e-9, 5.0])
    diff = theta[:, None] - theta[None, :]
    se = np.full((3, 3), 1e-12)  # a z of 1,000 for the 1e-9 gap: only the tolerance stops a claim
    above = holm_above(diff, se, np.arange(3))
    assert not above[1, 0] and not above[0, 1]
    assert above[2, 0] and above[2, 1]


def twin_rows() -> list[dict]:
    """Four models; "ann" and "bob" are twins: the same outcome in every situation (as solvers on
    every author's environments, on each other's, and as authors for every solver), so every
    rating of theirs is equal in exact arithmetic and the twins are the best at everything."""
    strength = {"ann": 2.0, "bob": 2.0, "cat": 0.0, "dan": -1.0}
    teach = {"ann": 2.0, "bob": 2.0, "cat": 0.5, "dan": 1.0}
    role = {"ann": "twin", "bob": "twin", "cat": "cat", "dan": "dan"}
    rows = []
    for author in strength:
        for k in range(4):
            for solver in strength:
                if solver == author:
                    continue
                for seed in range(4):
                    for hinted in (False, True):
                        # a deterministic draw per situation, the same for either twin
                        u = zlib.crc32(repr((role[author], k, role[solver], seed, hinted)).encode()) / 2**32
                        logit = strength[solver] - 0.5 * k + (teach[author] if hinted else 0.0)
                        rows.append({"env_id": f"{author}-{k}", "author": author, "domain": "logic", "solver": solver,
                                     "seed": seed, "hinted": hinted,
                                     "outcome": "success" if u < 1 / (1 + np.exp(-logit)) else "failure"})
    return rows


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    path = tmp_path_factory.mktemp("twins") / "twins.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in twin_rows()))
    return load_episodes(path)


def perturbed_analysis(tables, monkeypatch, sign: float) -> dict:
    """`analyze` with every Bradley–Terry fit's strengths moved by ±1e-12 per model (alternating
    signs), as another BLAS kernel would move them."""
    fit_bt, fit_firth = ratings_module.fit_bradley_terry, ratings_module.fit_firth

    def jitter(theta: np.ndarray) -> np.ndarray:
        return theta + sign * 1e-12 * (-1.0) ** np.arange(theta.shape[-1])

    monkeypatch.setattr(ratings_module, "fit_bradley_terry", lambda *a, **k: jitter(fit_bt(*a, **k)))
    monkeypatch.setattr(ratings_module, "fit_firth", lambda *a, **k: jitter(fit_firth(*a, **k)))
    return analyze(tables, bootstrap=50, permutations=20, convergence=False).json


def test_twins_are_one_rating_one_rank_level_and_listed_by_name_whatever_the_last_bits(twins, monkeypatch):
    runs = [perturbed_analysis(twins, monkeypatch, sign) for sign in (1.0, -1.0)]
    for j in runs:
        for kind in ("duel", "author", "solver"):
            rows = j["ratings"][kind]
            by = {r["model"]: r for r in rows}
            assert by["ann"]["rating"] == by["bob"]["rating"], kind
            assert by["ann"]["rank"] == by["bob"]["rank"], kind
            assert "bob" not in by["ann"]["above"] and "ann" not in by["bob"]["above"], kind
            names = [r["model"] for r in rows]
            assert names.index("bob") == names.index("ann") + 1, (kind, names)  # listed by name
            assert level_with_top(rows)[:2] == ["ann", "bob"], kind
        d = j["divergence"]
        assert (d["best_solver"], d["best_author"], d["best_solver_is_best_author"]) == ("ann", "ann", True)
        assert [s["model"] for s in j["irt"]["solvers"]][:2] == ["ann", "bob"]
    for kind in ("duel", "author", "solver"):
        strip = [[(r["model"], r["rank"], r["above"], r["below"], r["tied_with"]) for r in j["ratings"][kind]]
                 for j in runs]
        assert strip[0] == strip[1], kind
    assert runs[0]["divergence"]["spearman"] == pytest.approx(runs[1]["divergence"]["spearman"], abs=1e-12)
    assert findings(runs[0]) == findings(runs[1])


def test_the_two_duellists_with_identical_records_at_seed_2_share_one_rating():
    """The case of issue 19: at seed 2 m01 and m02 have identical records; their ratings are one
    number, so Kendall's τ against the truth counts them as a tie on every machine."""
    truth = np.linspace(-2, 2, 6)
    run = simulate_tournament(players=6, envs_per_author=10, rounds=3, seeds=4, seed=2, ability=list(truth),
                              author_difficulty=[0.0] * 6, author_teaching=[1.0] * 6, transcripts=False)
    duel = compute_ratings(run.tables, matched_pairs(run.tables.episodes), bootstrap=20, seed=1)["duel"]
    i, j = duel.players.index("m01"), duel.players.index("m02")
    assert duel.theta[i] == duel.theta[j]
    assert kendall_tau([run.ability[m] for m in duel.players], duel.theta) == pytest.approx(0.828, abs=1e-3)
