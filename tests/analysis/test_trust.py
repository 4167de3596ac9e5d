"""Issue 10: the statistics behind the report's claims mean what they say, on seeded simulated
tournaments with known truth (the full coverage table lives in bench/coverage_table.py)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit

from envduels.analysis import compute_ratings, matched_pairs, simulate_tournament, transitivity
from envduels.analysis.divergence import MIN_RELIABILITY, divergence
from envduels.analysis.transfer import PREDICTORS, correlate_gains

DOCS = Path(__file__).resolve().parents[2] / "docs" / "analysis.md"


def _params(players: int, spread: float, skill: str) -> dict:
    ability = np.linspace(-spread, spread, players)
    if skill == "null":
        return {"ability": [0.0] * players, "author_difficulty": [0.0] * players, "author_teaching": [1.0] * players}
    return {"ability": list(ability), "author_difficulty": [0.0] * players, "author_teaching": list(1.0 + ability)}


@cache
def _run(players: int, envs: int, rounds: int, spread: float, skill: str, seed: int):
    run = simulate_tournament(players=players, envs_per_author=envs, rounds=rounds, seeds=4, seed=seed,
                              transcripts=False, **_params(players, spread, skill))
    pairs = matched_pairs(run.tables.episodes)
    return run, compute_ratings(run.tables, pairs, bootstrap=200, seed=seed)


def _duel_transitivity(ratings):
    d = ratings["duel"]
    return transitivity(d.scores, d.players, d.theta, draws=d.score_draws, edge_p=getattr(d, "edge_p", None),
                        tie_rate=getattr(d, "tie_rate", 0.0), reference_draws=200)


# 1. duel intervals ----------------------------------------------------------------------------

def _bt_matches(theta: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    n = len(theta)
    s = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            s[i, j] = float(rng.random() < expit(theta[i] - theta[j]))
            s[j, i] = 1.0 - s[i, j]
    return s


@pytest.mark.slow
def test_duel_intervals_cover_true_strengths_with_one_match_per_pair_at_a_wide_spread():
    """9 models spread ±1.5 logits, one match per pair (the reference design's duel): 90%+ of
    the 95% intervals hold the truth, also for the top and bottom models (main: 0.67, top 0.00)."""
    from envduels.analysis.ratings import _rate_duel

    rng = np.random.default_rng(7)
    theta = np.linspace(-1.5, 1.5, 9)
    names = [f"m{i}" for i in range(9)]
    hits = np.zeros(9)
    reps = 30
    for _ in range(reps):
        s = _bt_matches(theta, rng)
        rating = _rate_duel(names, np.stack([s, s]), 0.1)
        for r in rating.rows:
            i = names.index(r["model"])
            lo = -np.inf if r["ci_low"] is None else r["ci_low"]
            hi = np.inf if r["ci_high"] is None else r["ci_high"]
            hits[i] += lo <= rating.elo(theta - theta.mean())[i] <= hi
    cover = hits / reps
    assert cover.mean() >= 0.92, cover
    assert cover[0] >= 0.85 and cover[-1] >= 0.85, cover


def test_a_model_that_won_every_match_gets_an_open_upper_bound_and_says_why():
    from envduels.analysis.ratings import _rate_duel

    s = np.array([[0, 1, 1, 1], [0, 0, 1, 0], [0, 0, 0, 1], [0, 1, 0, 0]], float)
    rows = _rate_duel(list("abcd"), np.stack([s, s]), 0.1).by_model()
    assert rows["a"]["ci_high"] is None and rows["a"]["ci_low"] < rows["a"]["rating"]
    assert rows["a"]["ci_note"] == "won every match: no finite upper bound"
    assert all(rows[m]["ci_low"] is not None and rows[m]["ci_high"] is not None for m in "bcd")


def test_the_simulated_top_model_at_a_wide_spread_is_not_capped_below_its_truth():
    """At 9 × 10 × 1 with abilities ±1.5 the strongest model's expected duel rating is ~1,900;
    main's ridge-shrunk percentile interval ended near 1,650."""
    for seed in (0, 1, 2):
        _, r = _run(9, 10, 1, 1.5, "correlated", seed)
        top = r["duel"].by_model()["m08"]
        assert top["ci_high"] is None or top["ci_high"] > 1900, top


# 2. one environment per author ----------------------------------------------------------------

def test_authors_with_one_environment_each_get_no_interval_no_rank_and_a_reason():
    for seed in range(3):
        _, r = _run(6, 1, 1, 0.0, "null", seed)
        author = r["author"]
        assert author.interval == "none" and "fewer than 4 environments" in author.note
        for row in author.rows:
            assert (row["ci_low"], row["ci_high"], row["rank"]) == (None, None, None)
        div = divergence(r["author"], r["solver"])
        assert (div["ci_low"], div["ci_high"]) == (None, None) and "author rating has none" in div["ci_note"]
        # the solver rating still resamples environments (pooled across authors)
        assert all(row["ci_low"] is not None for row in r["solver"].rows)


# 3. false significant cycles ------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_identical_players_in_the_quickstart_shape_get_no_significant_edge_or_cycle(seed):
    """9 × 1 × 2: one environment behind each side of a match. Main flagged false significant
    edges in 200 of 200 runs: resampling one environment can never reverse a match."""
    _, r = _run(9, 1, 2, 0.0, "null", seed)
    t = _duel_transitivity(r)
    assert t["significance"] == "environments"
    assert t["significant_edges"] == 0 and t["significant_cycles"] == 0


def test_a_strong_edge_backed_by_many_environments_is_still_significant():
    run = simulate_tournament(players=3, envs_per_author=10, rounds=2, seeds=4, seed=0, transcripts=False,
                              ability=[2.0, -2.0, -2.0], author_difficulty=[0.0, 3.0, 3.0],
                              author_teaching=[2.0, 0.0, 0.0])
    r = compute_ratings(run.tables, matched_pairs(run.tables.episodes), bootstrap=50)
    t = _duel_transitivity(r)
    assert t["significant_edges"] >= 2  # m00 over both others


# 4. divergence attenuation --------------------------------------------------------------------

def test_divergence_interval_reaches_the_true_rank_agreement_when_skills_align():
    """Authoring and solving skill in the same order (true Spearman 1): noise attenuates the
    estimate; main's percentile interval sat below 1 (coverage 0.37 at a true 0.93). Seeds
    whose author ratings pass the gate with the bootstrap's shift counted (0, 3 do not: 0.87,
    0.88)."""
    covered, corrected = 0, []
    for seed in (1, 2, 4, 5):
        _, r = _run(9, 10, 1, 1.5, "correlated", seed)
        d = divergence(r["author"], r["solver"])
        assert "basic" in d["ci_method"] and d["reliability_author"] >= MIN_RELIABILITY
        covered += d["ci_high"] >= 1.0 - 1e-12
        corrected.append(d["spearman_bias_corrected"] - d["spearman"])
    assert covered >= 3
    assert np.mean(corrected) > 0  # the correction moves away from the attenuation


def test_divergence_has_no_interval_where_noise_swamps_the_ratings_and_says_why():
    """±0.4 logits at 6 × 4 × 2: the ratings' reliability is ~0.6 and no interval held its
    level (0.73–0.80 at best in the coverage runs)."""
    for seed in range(2):
        _, r = _run(6, 4, 2, 0.4, "correlated", seed)
        d = divergence(r["author"], r["solver"])
        assert d["spearman"] is not None and (d["ci_low"], d["ci_high"]) == (None, None)
        assert "reliability" in d["ci_note"] and min(d["reliability_author"], d["reliability_solver"]) < MIN_RELIABILITY


# 5. correlate multiplicity --------------------------------------------------------------------

@pytest.mark.slow
def test_pure_noise_gains_give_a_false_verdict_in_at_most_about_5_percent_of_runs():
    rng = np.random.default_rng(0)
    units = pd.Index([f"a{i}" for i in range(12)], name="author")
    false = 0
    reps = 400
    for rep in range(reps):
        pred = pd.DataFrame(rng.normal(size=(12, len(PREDICTORS))), index=units, columns=list(PREDICTORS))
        gains = pd.Series(rng.normal(size=12), index=units)
        res = correlate_gains(pred, gains, unit="author", bootstrap=0, permutations=99, seed=rep)
        false += any("gained" in r.conclusion for r in res.results)
    # nominal 5%: 0.07 is 1.8 standard errors above it at 400 runs (main: ~19%)
    assert false / reps <= 0.07, false / reps


def test_a_secondary_predictor_is_judged_only_after_the_primary_and_with_holm():
    units = pd.Index([f"a{i}" for i in range(10)], name="author")
    x = np.linspace(0, 1, 10)
    pred = pd.DataFrame({"mean_hint_lift": np.random.default_rng(1).normal(size=10), "learnability": x,
                         "rescue_rate": x[::-1] ** 2, "all_fail_fraction": np.sin(x * 7)}, index=units)
    res = {r.predictor: r for r in correlate_gains(pred, pd.Series(x, index=units), unit="author", bootstrap=0,
                                                   permutations=999, seed=0).results}
    assert res["learnability"].pearson.p_value < 0.01  # perfectly correlated, yet gated
    assert res["mean_hint_lift"].p_adjusted >= 0.05
    assert res["learnability"].p_adjusted >= res["mean_hint_lift"].p_adjusted
    assert "no evidence" in res["learnability"].conclusion and "adjusted p" in res["learnability"].conclusion


# 6. WST/SST/cycles against their expected rates -------------------------------------------------

def test_transitive_truth_shows_violations_that_the_fitted_model_also_expects():
    """One match per pair: shares are 0, ½ or 1, so a transitive truth still shows WST/SST
    violations and raw cycles; the report sets each beside its rate under the fitted BT model."""
    inside = 0
    for seed in range(4):
        _, r = _run(9, 10, 1, 0.4, "correlated", seed)
        t = _duel_transitivity(r)
        e = t["expected"]
        assert e["wst_violations"]["mean"] > 0.05 and e["cycles"]["mean"] > 0.5
        inside += (e["wst_violations"]["low"] <= t["wst_violations"] <= e["wst_violations"]["high"]
                   and e["cycles"]["low"] <= t["cycles"] <= e["cycles"]["high"])
    assert inside >= 3


# 7. the documented coverage is the measured one -----------------------------------------------

def test_the_coverage_table_in_the_docs_meets_the_bar_or_lists_the_miss():
    """Every interval cell ≥ 0.90 and null rate ≤ 0.06, or omitted/withheld, or bold and
    explained under "Known misses", in both simulators' tables (uneven environments first, the
    alike ones beside them, today's and before issue 20): the docs may not claim a coverage that
    was not measured."""
    text = DOCS.read_text(encoding="utf-8")
    assert "bench/coverage_table.py" in text
    section = text.split("## Coverage at the designs users run", 1)[1].split("\n## ", 1)[0]
    cover = [line for line in section.splitlines() if re.match(r"\| \d+×\d+×\d+ \| ±", line)]
    null = [line for line in section.splitlines()
            if re.match(r"\| \d+×\d+×\d+ \| (\d|omitted|withheld|\*)", line)]
    # three tables (uneven environments; alike ones, today's methods; alike ones before issue
    # 20), each 6 interval rows and 3 null rows
    assert len(cover) == 18 and len(null) == 9
    misses = 0
    for lines, ok in ((cover, lambda v: v >= 0.90), (null, lambda v: v <= 0.06)):
        for line in lines:
            for cell in line.split("|")[3 if lines is cover else 2:-1]:
                v = cell.split("(")[0].split("[")[0].strip()
                if v in ("omitted", "withheld"):
                    continue
                if v.startswith("**"):
                    misses += 1
                    assert not ok(float(v.strip("*"))), line  # bold only what misses
                    continue
                assert ok(float(v)), line
    assert misses == 0 or "**Known miss" in section


# 8. the rank rule -----------------------------------------------------------------------------

def test_identical_players_get_no_rank_claim_in_duel_or_solver_ratings():
    """Main: some rank > 1 in ~20% of runs per rating at 9 × 10 × 1, which the HTML turned into
    "clear first"; Holm over all pairs (measured null rates: duel 0.00, solver 0.01–0.06)."""
    for seed in range(4):
        _, r = _run(9, 10, 1, 0.0, "null", seed)
        for kind in ("duel", "solver"):
            ranks = [row["rank"] for row in r[kind].rows]
            assert ranks == [1] * 9, (kind, seed, ranks)
            assert all(row["above"] == [] and len(row["tied_with"]) == 8 for row in r[kind].rows)


@pytest.mark.parametrize("seed", range(3))
def test_identical_authors_get_no_rank_claim_and_ranks_are_no_longer_withheld(seed):
    """Holm over bootstrap z's claimed an order among identical authors in 16-53% of runs, so
    main withheld author ranks (rank null); the permutation test of environments between two
    authors is exact when they write alike, so ranks are given and claim nothing here."""
    _, r = _run(9, 10, 1, 0.0, "null", seed)
    author = r["author"]
    assert author.note is None and author.rank_note is None
    assert [row["rank"] for row in author.rows] == [1] * 9
    assert all(row["above"] == [] and len(row["tied_with"]) == 8 for row in author.rows)


def test_a_clear_author_order_is_ranked():
    _, r = _run(9, 10, 1, 1.5, "correlated", 0)
    rows = r["author"].by_model()
    assert rows["m08"]["rank"] == 1 and "m00" in rows["m08"]["above"]
    assert rows["m00"]["rank"] > 1 and "m08" in rows["m00"]["below"]


def test_distinguishable_models_are_listed_and_ranked_consistently():
    _, r = _run(9, 10, 1, 1.5, "correlated", 0)
    rows = r["solver"].by_model()
    assert rows["m08"]["rank"] == 1 and "m00" in rows["m08"]["above"]
    for m, row in rows.items():
        assert row["rank"] == 1 + len(row["below"])
        assert set(row["above"]) | set(row["below"]) | set(row["tied_with"]) | {m} == set(rows)
        for other in row["above"]:
            assert m in rows[other]["below"]


def test_the_terminal_leaderboard_prints_an_open_bound():
    from rich.console import Console

    from envduels.report.terminal import rating_table

    row = {"model": "a", "rating": 1400.0, "ci_low": 1100.0, "ci_high": None, "rank": 1, "points": 3.0, "games": 3.0}
    other = {"model": "b", "rating": 600.0, "ci_low": None, "ci_high": 900.0, "rank": 2, "points": 0.0, "games": 3.0}
    console = Console(width=100, record=True)
    console.print(rating_table("duel", [row, other]))
    assert "1100 – ∞" in console.export_text()


# far tails at the reference design (9 × 10 × 1) ------------------------------------------------

@pytest.mark.parametrize("seed", [4, 24])
def test_identical_players_at_the_reference_design_get_no_false_significant_edge(seed):
    """Welch's t at 0.05/72 was optimistic for the few discrete values an environment gives
    (0.09 false significant edges at 9 × 10 × 1, these seeds among them); the permutation test
    over the environments behind a match is exact when the players are alike."""
    _, r = _run(9, 10, 1, 0.0, "null", seed)
    t = _duel_transitivity(r)
    assert t["significance"] == "environments"
    assert t["significant_edges"] == 0 and t["significant_cycles"] == 0


def test_identical_solvers_at_the_reference_design_get_no_false_rank_claim():
    """Holm over bootstrap z's claimed an order among identical solvers in 8% of runs at
    9 × 10 × 1 (this seed among them); the sign-flip test over common environments is exact."""
    _, r = _run(9, 10, 1, 0.0, "null", 32)
    rows = r["solver"].rows
    assert [row["rank"] for row in rows] == [1] * 9
    assert all(row["above"] == [] and len(row["tied_with"]) == 8 for row in rows)


def test_a_clear_solver_order_survives_the_exact_rank_test():
    _, r = _run(9, 10, 1, 1.5, "correlated", 0)
    rows = r["solver"].by_model()
    assert rows["m08"]["rank"] == 1 and rows["m00"]["rank"] >= 7
    assert {"m00", "m01", "m02", "m03", "m04"} <= set(rows["m08"]["above"])


def test_an_edge_where_every_environment_went_one_way_is_significant_not_untestable():
    """No spread at all on either side (every environment of i beat j, and j's never beat i) is
    the strongest evidence an edge can have; the Welch rule called it untestable (p = 1)."""
    from envduels.analysis.transitivity import duel_edge_pvalues

    n, envs = 2, 12
    net = np.zeros((2 * envs, n * n))
    count = np.zeros_like(net)
    net[:envs, 0 * n + 1], count[:envs, 0 * n + 1] = 2.0, 4.0   # i's environments, j solving: i +2
    net[envs:, 1 * n + 0], count[envs:, 1 * n + 0] = -1.0, 4.0  # j's environments, i solving: j −1
    p = duel_edge_pvalues(net, count, 1, n, seed=0)
    assert p[0, 1] <= 2e-4 and p[1, 0] == pytest.approx(1.0)  # 1/(B + 1): nothing as extreme


def test_bootstrap_zero_gives_its_own_reason_not_fewer_than_two_environments():
    run = simulate_tournament(players=6, envs_per_author=4, rounds=1, seeds=2, seed=0, transcripts=False)
    r = compute_ratings(run.tables, matched_pairs(run.tables.episodes), bootstrap=0)
    for kind in ("author", "solver"):
        assert "bootstrap = 0" in r[kind].note and "fewer than two environments" not in r[kind].note
        assert all(row["ci_low"] is None and row["rank"] is None for row in r[kind].rows)


@pytest.mark.parametrize("seed", [4, 24])
def test_divergence_gives_no_interval_where_a_lucky_spread_passed_the_old_gate(seed):
    """9 × 10 × 1 at ±0.4 logits, skills in the same order (true ρ 1): runs whose noise inflated
    the ratings' spread passed the 0.85 reliability gate and got intervals that missed the truth
    (coverage 0.70 over the 10 of 100 runs given one; these seeds among the misses). The gate
    is 0.90, which no run at this spread reaches."""
    _, r = _run(9, 10, 1, 0.4, "correlated", seed)
    old = divergence(r["author"], r["solver"], shift=False)   # that gate counted the variance alone
    assert 0.85 <= min(old["reliability_author"], old["reliability_solver"]) < MIN_RELIABILITY == 0.90
    d = divergence(r["author"], r["solver"])
    assert min(d["reliability_author"], d["reliability_solver"]) < 0.85
    assert (d["ci_low"], d["ci_high"]) == (None, None) and "reliability" in d["ci_note"]


@pytest.mark.parametrize("seed", [500, 1901])
def test_divergence_counts_the_author_bootstraps_shift_as_noise_on_uneven_environments(seed):
    """Uneven environments, 9 × 10 × 1 at ±1.5 logits, skills aligned (true ρ 1): the aligned
    cell's interval covered 30 of 44 (0.68). In these runs the author ratings spread twice as
    wide as the truth and the author bootstrap's draws sit away from the estimate; the draws'
    variance alone passed the 0.90 gate and the intervals ([0.06, 0.87], [0.02, 0.72]) missed 1.
    Counting the draws' mean squared distance from the estimate, the gate withholds them."""
    run = simulate_tournament(players=9, envs_per_author=10, rounds=1, seeds=4, seed=seed, transcripts=False,
                              environments="uneven", **_params(9, 1.5, "correlated"))
    r = compute_ratings(run.tables, matched_pairs(run.tables.episodes), bootstrap=200, seed=seed)
    old = divergence(r["author"], r["solver"], shift=False)
    assert min(old["reliability_author"], old["reliability_solver"]) >= MIN_RELIABILITY
    assert old["ci_high"] < 0.9   # the miss
    d = divergence(r["author"], r["solver"])
    assert d["reliability_author"] < 0.80 and d["reliability_solver"] > 0.95   # the solvers barely shift
    assert (d["ci_low"], d["ci_high"]) == (None, None)
    assert "of the author ratings' spread" in d["ci_note"] and "more environments per author" in d["ci_note"]


@pytest.mark.slow
def test_author_intervals_cover_the_truth_at_the_reference_design_with_a_wide_spread():
    """9 × 10 × 1 at ±1.5 logits: an author comparison keeps only the sign of a noisy lift
    difference, the fit of such signs is moved by the noise, and the plain percentile intervals
    covered 0.88 (the bootstrap draws sat about one standard error inside the estimate). With the
    bias allowance they cover 0.90 or more. The truth is the BT fit of the expected comparisons;
    teaching in a scrambled order of ability, as in the coverage table's "uncorrelated" rows."""
    from envduels.analysis.ratings import ELO_CENTER, ELO_SCALE, fit_bradley_terry

    ability = np.linspace(-1.5, 1.5, 9)
    teaching = 1.0 + ability[[4, 8, 1, 6, 0, 3, 7, 2, 5]]

    def sim(seed):
        return simulate_tournament(players=9, envs_per_author=10, rounds=1, seeds=4, seed=seed, transcripts=False,
                                   ability=list(ability), author_difficulty=[0.0] * 9, author_teaching=list(teaching))

    expected = np.mean([compute_ratings(r.tables, matched_pairs(r.tables.episodes), bootstrap=0)["author"].scores
                        for r in (sim(10_000 + k) for k in range(30))], axis=0)
    truth = ELO_CENTER + ELO_SCALE * fit_bradley_terry(expected, ridge=1e-9)
    names = [f"m{i:02d}" for i in range(9)]
    hits = total = 0
    for seed in range(20):
        run = sim(seed)
        author = compute_ratings(run.tables, matched_pairs(run.tables.episodes), bootstrap=200, seed=seed)["author"]
        assert author.players == names
        for row in author.rows:
            total += 1
            hits += row["ci_low"] <= truth[names.index(row["model"])] <= row["ci_high"]
    assert hits / total >= 0.91, hits / total


def test_a_rank_claim_never_contradicts_the_direction_of_its_test():
    """A pair's test may favour i while the fitted strengths put j ahead (the BT fit pools every
    comparison, the test only the pair's): then nothing is claimed, either way."""
    from envduels.analysis.ratings import holm_above

    keep = np.arange(2)
    p = np.array([[np.nan, 1e-6], [np.nan, np.nan]])  # the test favours model 0, strongly
    agree = holm_above(np.array([[0.0, 1.0], [-1.0, 0.0]]), None, keep, p=p)
    against = holm_above(np.array([[0.0, -1.0], [1.0, 0.0]]), None, keep, p=p)
    assert agree[0, 1] and not agree[1, 0]
    assert not against.any()
