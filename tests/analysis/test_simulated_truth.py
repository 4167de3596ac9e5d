"""Lift estimates are unbiased against the simulator's known expected lift."""

from __future__ import annotations

import numpy as np

from envduels.analysis import env_lift, matched_pairs, simulate_tournament, solver_metrics


def test_environment_lift_and_hint_gain_are_unbiased():
    env_errors, gain_errors = [], []
    for rep in range(40):
        run = simulate_tournament(players=4, envs_per_author=3, seeds=4, seed=1000 + rep, transcripts=False)
        p = matched_pairs(run.tables.episodes)
        est = env_lift(p)
        for env_id, row in est.iterrows():
            panel = [s for s in run.ability if s != row["author"]]
            env_errors.append(row["lift"] - np.mean([run.true_lift(env_id, s) for s in panel]))
        for r in solver_metrics(run.tables, p):
            envs = p[p["solver"] == r["model"]]["env_id"].unique()
            gain_errors.append(r["hint_gain"] - np.mean([run.true_lift(e, r["model"]) for e in envs]))
    for errors in (np.array(env_errors), np.array(gain_errors)):
        se = errors.std(ddof=1) / np.sqrt(len(errors))
        assert abs(errors.mean()) < 3 * se + 1e-3, (errors.mean(), se)
        assert errors.std() > 0  # the check is not vacuous


def test_incomplete_and_error_episodes_leave_lift_unbiased():
    errors = []
    for rep in range(40):
        run = simulate_tournament(players=4, envs_per_author=3, seeds=4, seed=5000 + rep, transcripts=False,
                                  p_incomplete=0.1, p_error=0.1)
        est = env_lift(matched_pairs(run.tables.episodes))
        for env_id, row in est.iterrows():
            panel = [s for s in run.ability if s != row["author"]]
            errors.append(row["lift"] - np.mean([run.true_lift(env_id, s) for s in panel]))
    errors = np.array(errors)
    assert abs(errors.mean()) < 3 * errors.std(ddof=1) / np.sqrt(len(errors)) + 1e-3
