"""Pure functions from a run's tables to numbers: SPEC §5 metrics, ratings, transitivity,
divergence, learning, design convergence and scale. No I/O.

Typical use::

    from envduels.analysis import analyze
    result = analyze(Store(run_dir).tables(), bootstrap=1000)
    result.json   # the SPEC §8 object
"""

from envduels.analysis.convergence import convergence, embed, tfidf, vendi_score
from envduels.analysis.divergence import divergence
from envduels.analysis.irt import fit_irt
from envduels.analysis.learning import compare_runs, learning_curves, ols_slope
from envduels.analysis.metrics import (
    TablesLike,
    author_metrics,
    common_panel_solve,
    design_scores,
    env_lift,
    environment_flags,
    learnability,
    lift_matrix,
    mcnemar_exact,
    solver_metrics,
)
from envduels.analysis.pairs import domain_balanced, matched_pairs
from envduels.analysis.ratings import (
    ELO_CENTER,
    ELO_SCALE,
    RIDGE,
    Rating,
    compute_ratings,
    fit_bradley_terry,
)
from envduels.analysis.scale import scale
from envduels.analysis.simulate import FrameTables, SimulatedRun, simulate_tournament
from envduels.analysis.summary import Analysis, analyze, json_safe
from envduels.analysis.transitivity import transitivity

__all__ = [
    "ELO_CENTER", "ELO_SCALE", "RIDGE", "Analysis", "FrameTables", "Rating", "SimulatedRun", "TablesLike",
    "analyze", "author_metrics", "common_panel_solve", "compare_runs", "compute_ratings", "convergence",
    "design_scores", "divergence", "domain_balanced", "embed", "env_lift", "environment_flags", "fit_bradley_terry",
    "fit_irt", "json_safe", "learnability", "learning_curves", "lift_matrix", "matched_pairs", "mcnemar_exact",
    "ols_slope", "scale", "simulate_tournament", "solver_metrics", "tfidf", "transitivity", "vendi_score",
]
