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

SOLVER_SWEEPS = 500
"""Most alternating sweeps of the scaled fit in `solver_adjusted` (it converges in a few dozen)."""


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
        """(lift, has): each environment's lift with every solver's uptake of hints taken out,
        and whether it has pairs at all. The lift of environment e on solver s is fitted as
        γ_e · α_s (least squares weighted by pairs, the leading pair of the lift matrix with its
        missing cells left out; α has root mean square 1 over the solvers that played, and
        Σ α ≥ 0), and γ_e is returned: the environment's lift on a solver of typical uptake,
        whichever solvers happened to play it. Its author never does, so a plain mean over its
        panel would score a strong model's environments up (its own solving, which needs hints
        least, is the column they lack), a bias that follows solving skill.

        Scaled, not shifted: an environment that nobody solves, with or without a hint, has lift 0
        on every solver and keeps γ = 0 whoever wrote it. The additive fit γ_e + β_s moved such
        an environment by its author's missing β (different for every author, and following
        solving skill), so alike authors' environments were no longer exchangeable, and the
        divergence test claimed in 0.053–0.056 of tournaments where every author wrote alike
        (docs/analysis.md, "The divergence test")."""
        den = self.den
        with np.errstate(invalid="ignore", divide="ignore"):
            y = np.where(den > 0, self.num / np.where(den > 0, den, 1.0), 0.0)
        has = den.sum(axis=1) > 0
        played = den.sum(axis=0) > 0
        alpha = np.ones(len(self.solvers))
        for _ in range(SOLVER_SWEEPS):
            gamma = _scaled_mean(den, y, alpha)
            weight = den.T @ (gamma * gamma)
            new = np.where(weight > 0, (den * y).T @ gamma / np.where(weight > 0, weight, 1.0), alpha)
            size = np.sqrt(np.mean(new[played] ** 2)) if played.any() else 0.0
            if size == 0.0:  # no environment has any lift: nothing to scale
                break
            new = new / size * (1.0 if new[played].sum() >= 0 else -1.0)
            done = np.max(np.abs(new - alpha)) < 1e-10
            alpha = new
            if done:
                break
        gamma = np.where(has, _scaled_mean(den, y, alpha), np.nan)
        return gamma, has


def _scaled_mean(den: np.ndarray, y: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """γ_e = Σ_s w α_s y / Σ_s w α_s² for each environment (0 where no solver with α ≠ 0 played)."""
    top, bottom = (den * y) @ alpha, den @ (alpha * alpha)
    return np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), 0.0)


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
