"""`envduels demo`: a report of a simulated tournament whose truth is known, to read beside the
quickstart's report of a real one.

The quickstart plays the embedded 135M model, which writes no valid environment and solves
little: its report is honest and nearly empty. The demo shows what every section of a report
says when there is something to find. Its players are simulated, not models: each gets a
planted solving skill and a planted hint-writing skill (`PLANTED`), the episodes are drawn from
them (`envduels.analysis.simulate`, the model the statistics are checked against), and the
report is computed from those episodes by the same code as a real run's. The report opens by
saying so and by setting each planted order beside the order the ratings found, so a reader
can see what the statistics recover at this size and what they cannot yet tell apart.
Nothing in it is a finding about any model.
"""

from __future__ import annotations

from dataclasses import dataclass

from envduels.analysis import SimulatedRun, simulate_tournament
from envduels.analysis.result import RatingRow, RunReport
from envduels.report.story import names

DEMO_SEED = 0


@dataclass(frozen=True)
class Planted:
    """One simulated player's truth, in logits (0 is average)."""

    name: str
    solving: float
    """How much more often than average it solves (success = σ(solving − difficulty + hint))."""
    hint_writing: float
    """How much its hints help the average solver (the mean hint effect of its environments)."""


# Solving and hint-writing skills deliberately disagree (the best solver writes weak hints), so
# the divergence section has something real to show.
PLANTED = (
    Planted("ada", solving=1.2, hint_writing=0.2),
    Planted("bo", solving=0.6, hint_writing=1.6),
    Planted("cy", solving=0.0, hint_writing=0.9),
    Planted("dee", solving=-0.6, hint_writing=2.2),
    Planted("eli", solving=-1.2, hint_writing=0.4),
)
# The size at which the solver and author orders are recovered (docs/analysis.md: the author
# rating keeps one bit per comparison and needs about 10 environments per author).
DESIGN = {"envs_per_author": 10, "rounds": 2, "seeds": 4}


def simulated_run() -> SimulatedRun:
    """The demo tournament: `PLANTED` players, every one authoring `envs_per_author`
    environments a round and solving all the others' on `seeds` seeds, with and without the
    hint. Deterministic."""
    run = simulate_tournament(
        players=len(PLANTED), seed=DEMO_SEED, spread=0.5, p_invalid=0.1, p_incomplete=0.02,
        ability=[p.solving for p in PLANTED], author_difficulty=[0.0] * len(PLANTED),
        author_teaching=[p.hint_writing for p in PLANTED], envs_per_author=DESIGN["envs_per_author"],
        rounds=DESIGN["rounds"], seeds=DESIGN["seeds"])
    return _renamed(run, {f"m{i:02d}": p.name for i, p in enumerate(PLANTED)})


def _renamed(run: SimulatedRun, new: dict[str, str]) -> SimulatedRun:
    t = run.tables
    t.players["name"] = t.players["name"].map(new)
    t.players["model"] = "simulated"
    t.players["params_b"] = None  # no model has a size here: the size section says so
    t.players["cost_usd"] = None  # nor a bill: the simulation's costs would be made up
    t.players["input_tokens"] = 0
    t.players["output_tokens"] = 0
    for column in ("author", "solver"):
        t.episodes[column] = t.episodes[column].map(new)
    t.environments["author"] = t.environments["author"].map(new)
    for frame in (t.environments, t.episodes):
        frame["env_id"] = frame["env_id"].map(lambda e: _rename_env(e, new))
    t.episodes["episode_key"] = [
        f"{e}:{s}:{sd}:{tr}:{int(h)}" for e, s, sd, tr, h in zip(
            t.episodes["env_id"], t.episodes["solver"], t.episodes["seed"], t.episodes["trial"],
            t.episodes["hinted"], strict=True)]
    return run


def _rename_env(env_id: str, new: dict[str, str]) -> str:
    old, rest = env_id.split("-", 1)
    return f"{new.get(old, old)}-{rest}"


def _order(rows: list[RatingRow]) -> str:
    return " > ".join(r.model for r in rows)


def _separated(rows: list[RatingRow]) -> int:
    """How many adjacent pairs of the rating's order the rank rule tells apart."""
    return sum(1 for a, b in zip(rows, rows[1:], strict=False)
               if a.rank is not None and b.rank is not None and a.rank < b.rank)


def preface(report: RunReport) -> list[str]:
    """What this demo is, then each planted order beside the order found, in words."""
    by_solving = sorted(PLANTED, key=lambda p: -p.solving)
    by_hints = sorted(PLANTED, key=lambda p: -p.hint_writing)
    design = (f"{len(PLANTED)} simulated players, {DESIGN['rounds']} rounds of "
              f"{DESIGN['envs_per_author']} environments per author, {DESIGN['seeds']} seeds each, "
              f"{report.run.episodes:,} episodes")
    lines = [
        "Demo: simulated players of planted skill, not models. Nothing here is a finding about "
        f"any model; it shows what each section of a report says when there is something to "
        f"find ({design}). The numbers below are computed from the simulated episodes by the same "
        "code as a real run's.",
        f"Planted solving skill: {_order_planted(by_solving, 'solving')}. "
        f"Solver ratings found: {_order(report.ratings.solver)} "
        f"({_separated(report.ratings.solver)} of {len(PLANTED) - 1} neighbouring pairs told "
        "apart at 95%).",
        f"Planted hint-writing skill: {_order_planted(by_hints, 'hint_writing')}. "
        f"Author ratings found: {_order(report.ratings.author)} "
        f"({_separated(report.ratings.author)} of {len(PLANTED) - 1} neighbouring pairs told "
        "apart at 95%).",
        f"The best solver ({by_solving[0].name}) was planted as a weak hint writer, and "
        f"{names([p.name for p in by_hints[:2]])} as the best hint writers: the divergence "
        "section measures that disagreement. Design convergence is left out: simulated "
        "environments have no source code to compare.",
    ]
    return lines


def _order_planted(players: list[Planted], skill: str) -> str:
    return " > ".join(f"{p.name} ({getattr(p, skill):+.1f})" for p in players)
