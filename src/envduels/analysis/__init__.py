"""Pure functions from a run's tables to numbers: SPEC §5 metrics, ratings, transitivity,
divergence, learning, design convergence and scale. No I/O.

Typical use::

    from envduels.analysis import analyze
    result = analyze(envduels.open_run(run_dir).tables(), bootstrap=1000)
    result.json   # the SPEC §8 object

`__all__` is what a user calls: the whole analysis (`analyze`, `Analysis`; its `.result` is
the typed record `RunReport`, rows `RatingRow`, from `analysis.result`), several runs side
by side (`compare_runs`), ratings over matched pairs (`matched_pairs`, `compute_ratings`,
`Rating`), the report's sections computed alone (`transitivity`, `divergence`,
`convergence`, `scale`), and simulated tournaments for planning and tests
(`simulate_tournament`, `SimulatedRun`). The building blocks live in their submodules
(`metrics`, `ratings`, `pairs`, `convergence`, ...): import them from there. The names this
package exported before (`solver_metrics`, `embed`, ...) still import from here, unlisted, so
code written against the earlier surface keeps working; new code imports the submodule.
"""

from envduels.analysis.convergence import convergence
from envduels.analysis.divergence import divergence
from envduels.analysis.learning import compare_runs
from envduels.analysis.pairs import matched_pairs
from envduels.analysis.ratings import Rating, compute_ratings
from envduels.analysis.result import RatingRow, RunReport
from envduels.analysis.scale import scale
from envduels.analysis.simulate import SimulatedRun, simulate_tournament
from envduels.analysis.summary import Analysis, analyze
from envduels.analysis.transitivity import transitivity

__all__ = ["Analysis", "Rating", "RatingRow", "RunReport", "SimulatedRun", "analyze", "compare_runs", "compute_ratings",
           "convergence", "divergence", "matched_pairs", "scale", "simulate_tournament",
           "transitivity"]

# the earlier surface: name -> the submodule that defines it (read on first use, PEP 562)
_MOVED = {
    "embed": "convergence", "tfidf": "convergence",
    "vendi_score": "convergence", "fit_irt": "irt",
    "learning_curves": "learning", "ols_slope": "learning", "TablesLike": "metrics",
    "author_metrics": "metrics", "common_panel_solve": "metrics", "design_scores": "metrics",
    "env_lift": "metrics", "environment_flags": "metrics", "learnability": "metrics",
    "lift_matrix": "metrics", "mcnemar_exact": "metrics", "solver_metrics": "metrics",
    "domain_balanced": "pairs", "ELO_CENTER": "ratings", "ELO_SCALE": "ratings",
    "RIDGE": "ratings", "fit_bradley_terry": "ratings",
    "FrameTables": "simulate", "json_safe": "summary",
}


def __getattr__(name: str) -> object:
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module 'envduels.analysis' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"envduels.analysis.{module}"), name)
