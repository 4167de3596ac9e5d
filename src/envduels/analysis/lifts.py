"""Each environment's hint lift on each solver: what the author rank test and the divergence test
compare authors by.

An author's strength, for both tests, is the **mean lift of its environments**: an environment's
lift is Σ (yh − y0) / matched pairs over the solvers that played it (rounds pooled, self-play
never counted). The author rating's Bradley–Terry fit compares the same lifts solver by solver
and keeps only which author was ahead; the tests keep the size of the difference too, which at
9 models × 10–20 environments per author gave a quarter to a half more author rank claims and
a stronger divergence test (docs/analysis.md, "How much the author statistic matters"), and
they stay exact because they rearrange whole environments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SOLVER_SWEEPS = 200
"""Alternating sweeps of the two-way fit in `solver_adjusted` (it converges in a few dozen)."""


@dataclass(frozen=True)
class EnvironmentLifts:
    """Per environment with an author among `authors`: its author and, per solver of the run, the
    summed lift Σ (yh − y0) and the matched pairs behind it (0 where the solver never finished a
    pair there: its author, an `error`, or a solver it was not given to)."""

    authors: list[str]
    solvers: list[str]
    author: np.ndarray  # (E,) index in `authors`
    num: np.ndarray  # (E, solvers)
    den: np.ndarray  # (E, solvers)

    def panel_without(self, *authors: int) -> np.ndarray:
        """Solvers (a boolean mask) other than the named authors: the panel two authors are
        compared on, so neither is scored on its own solving."""
        out = np.ones(len(self.solvers), dtype=bool)
        for a in authors:
            name = self.authors[a]
            out &= np.array([s != name for s in self.solvers], dtype=bool)
        return out

    def environment_lift(self, author: int, panel: np.ndarray) -> np.ndarray:
        """The lift on `panel` of each of `author`'s environments that has pairs there."""
        rows = self.author == author
        den = self.den[rows][:, panel].sum(axis=1)
        num = self.num[rows][:, panel].sum(axis=1)
        return num[den > 0] / den[den > 0]

    def solver_adjusted(self) -> tuple[np.ndarray, np.ndarray]:
        """(lift, has): each environment's lift with every solver's general tendency to gain from
        hints taken out, and whether it has pairs at all. The lift of environment e on solver s
        is fitted as γ_e + β_s (weighted by pairs, Σ β = 0, alternating weighted means), and γ_e
        is returned: an environment is then not scored up or down by which solvers happened to
        play it. Its author never does, so without β an author whose own solving gains little
        from hints (a strong model: it solves most puzzles without them) would see higher mean
        lifts on its environments than the others, a bias that follows solving skill."""
        den = self.den
        with np.errstate(invalid="ignore", divide="ignore"):
            y = np.where(den > 0, self.num / np.where(den > 0, den, 1.0), 0.0)
        has = den.sum(axis=1) > 0
        env_w, solver_w = den.sum(axis=1), den.sum(axis=0)
        beta = np.zeros(len(self.solvers))
        gamma = np.zeros(len(y))
        for _ in range(SOLVER_SWEEPS):
            gamma = np.where(has, (den * (y - beta)).sum(axis=1) / np.where(has, env_w, 1.0), 0.0)
            new = np.where(solver_w > 0, (den * (y - gamma[:, None])).sum(axis=0) / np.where(solver_w > 0, solver_w, 1.0),
                           0.0)
            played = solver_w > 0
            new[played] -= new[played].mean() if played.any() else 0.0
            done = np.max(np.abs(new - beta)) < 1e-12
            beta = new
            if done:
                break
        gamma = np.where(has, (den * (y - beta)).sum(axis=1) / np.where(has, env_w, 1.0), np.nan)
        return gamma, has


def environment_lifts(authors: list[str], solvers: list[str], env_author: list[int], num: np.ndarray,
                      den: np.ndarray) -> EnvironmentLifts:
    """The record from the author rating's arrays (`ratings.AuthorBuilder`: `num`, `den` of shape
    (environments, authors · solvers), each environment's sums placed at its author's block), with
    `env_author` the author index of each environment (−1: an author the rating does not have)."""
    n, m = len(authors), len(solvers)
    own = np.asarray(env_author, dtype=int)
    rows = np.flatnonzero(own >= 0)
    num3, den3 = num.reshape(-1, n, m), den.reshape(-1, n, m)
    return EnvironmentLifts(list(authors), list(solvers), own[rows], num3[rows, own[rows]], den3[rows, own[rows]])
