"""`envduels plan`: a design's exact cost and its simulated power, printed or as one JSON object."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from envduels.config import RunConfig, parse_config
from envduels.duel.design import LIBRARY_AUTHOR, Design
from envduels.errors import UserError

if TYPE_CHECKING:
    from envduels.analysis.plan import SimDesign
    from envduels.envs import EnvSpec

DEFAULT_SPREADS = (0.4, 1.5)


class SeatCounts(TypedDict):
    """One player's share of a design (`plan --json`'s `cost.players.NAME`)."""

    environments: int
    episodes: int
    authoring_calls_max: int
    solving_calls_max: int


class DesignCost(TypedDict):
    """`plan --json`'s `cost`: a design's exact counts, every authored environment valid."""

    environments_authored: int
    pool_environments: int
    episodes: int
    authoring_calls_max: int
    solving_calls_max: int
    calls_max: int
    players: dict[str, SeatCounts]


@dataclass(frozen=True)
class DesignFlags:
    """Command-line overrides of a design; None keeps the config's (or the default) value."""

    players: int | None = None
    envs_per_author: int | None = None
    seeds: int | None = None
    rounds: int | None = None
    trials: int | None = None


def design_config(config: Path | None, flags: DesignFlags) -> RunConfig:
    """The run config a plan is about: CONFIG with the flags applied, or (without CONFIG) a
    config of `--players` players who all author and solve, the rest at its defaults. The
    result is validated like any config, so a bad value gets the config's one-line error."""
    from envduels.config import load_config

    if config is None:
        if flags.players is None:
            raise UserError("give a CONFIG or --players N (with --envs-per-author, --seeds, --rounds); "
                            "e.g. envduels plan --players 9 --envs-per-author 10 --seeds 1")
        if flags.players < 2:
            raise UserError(f"--players must be 2 or more (got {flags.players}); ratings compare players")
        data: dict[str, object] = {"name": "plan", "players": [
            {"name": f"m{i:02d}", "provider": "openai", "model": f"m{i:02d}"} for i in range(flags.players)]}
        source = "plan flags"
    else:
        if flags.players is not None:
            raise UserError("--players works only without a CONFIG (the config names its players); "
                            "drop one of them")
        data = load_config(config).model_dump(mode="json")
        source = str(config)
    given = data.get("tournament")
    tournament: dict[str, object] = dict(given) if isinstance(given, dict) else {}
    for key, value in (("envs_per_author", flags.envs_per_author), ("seeds_per_env", flags.seeds),
                       ("rounds", flags.rounds), ("trials_per_seed", flags.trials)):
        if value is not None:
            tournament[key] = value
    data["tournament"] = tournament
    return parse_config(data, source)


def design_cost(cfg: RunConfig, pool_specs: Sequence[EnvSpec]) -> DesignCost:
    """Exact counts of a design (`duel.design.Design.cost`), as the scheduler builds its work,
    assuming every authored environment is valid (an invalid one is not played: fewer
    episodes, never more).

    `calls_max` is an upper bound: every authoring attempt (`author_repairs` + 1 per
    environment) and every solver turn up to the turn cap (the tournament's `max_turns`, or a
    pool environment's own limit when lower). Pool environments count as the run records them:
    their own seeds (else `seeds_per_env`), their author (else "library")."""
    design = Design.of(cfg)
    per = design.cost((spec.author or LIBRARY_AUTHOR, design.pool_seeds(spec.benchmark_seeds),
                       spec.max_turns) for spec in pool_specs)
    players: dict[str, SeatCounts] = {name: {
        "environments": c.environments, "episodes": c.episodes,
        "authoring_calls_max": c.authoring_calls_max, "solving_calls_max": c.solving_calls_max}
        for name, c in per.items()}
    authoring = sum(c.authoring_calls_max for c in per.values())
    solving = sum(c.solving_calls_max for c in per.values())
    return {"environments_authored": sum(c.environments for c in per.values()),
            "pool_environments": len(pool_specs),
            "episodes": sum(c.episodes for c in per.values()),
            "authoring_calls_max": authoring, "solving_calls_max": solving,
            "calls_max": authoring + solving, "players": players}


def sim_design(cfg: RunConfig) -> SimDesign:
    from envduels.analysis.plan import SimDesign

    t = cfg.tournament
    return SimDesign(players=len(cfg.players), envs_per_author=t.envs_per_author, rounds=t.rounds,
                     seeds=t.seeds_per_env, trials=t.trials_per_seed)


def _fmt(v: float | None, pattern: str) -> str:
    return "–" if v is None else format(v, pattern)


def _print_plan(cfg: RunConfig, cost: DesignCost, doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = cfg.tournament
    authors = sum(p.authors for p in cfg.players)
    solvers = sum(p.solves for p in cfg.players)
    sim = doc["simulation"]
    console.print(f"Design: {len(cfg.players)} players ({authors} author, {solvers} solve), "
                  f"{t.envs_per_author} environment(s) per author per round, {t.rounds} round(s), "
                  f"{t.seeds_per_env} seed(s) × {t.trials_per_seed} trial(s), self-play {'on' if t.self_play else 'off'}"
                  + (f", {cost['pool_environments']} fixed-pool environment(s)" if cost["pool_environments"] else ""))
    console.print(f"Cost: {cost['environments_authored']} environments authored (if all are valid), "
                  f"{cost['episodes']:,} episodes; model calls at most {cost['calls_max']:,} "
                  f"(authoring ≤ {cost['authoring_calls_max']:,} with {t.author_repairs} repair(s), "
                  f"solving ≤ {cost['solving_calls_max']:,} at ≤ {t.max_turns} turns)")
    if sim is None:
        console.print(f"No simulation: {doc['no_simulation']}.", style="dim")
        return
    console.print(f"Simulated: {sim['replicates']} tournaments per spread and truth, {sim['bootstrap']} bootstrap "
                  f"draws each, {sim.get('environments', 'alike')} environments (docs/analysis.md); every player "
                  "authors and solves; cross-model episodes only.")
    for entry in doc["spreads"]:
        s = entry["spread"]
        table = Table(title=f"Abilities spread ±{s} logits (solving skill evenly over [−{s}, {s}], "
                            "hint-writing skill in the same order)", title_justify="left")
        for col in ("rating", "95% interval width (Elo)", "coverage", "no interval", "open interval",
                    "top two in order"):
            table.add_column(col, justify="left" if col == "rating" else "right")
        unrated = [kind for kind in entry["ratings"] if not entry["truth_elo"][kind]]
        for kind, r in entry["ratings"].items():
            table.add_row(kind, _fmt(r["width_elo"], ".0f"), _fmt(r["coverage"], ".2f"),
                          _fmt(r["no_interval"], ".2f"), _fmt(r["open_interval"], ".2f"),
                          _fmt(r["top_two_ordered"], ".2f"))
        console.print(table)
        if unrated:
            console.print(f"  {' and '.join(unrated)}: no comparisons at this design (needs 3 or more players)")
        d, c = entry["divergence"], entry["cycle"]
        if c["power"] is None:
            console.print("  divergence and cycles: need 3 or more players", style="dim")
            continue
        if d["power"] is None:
            console.print("  divergence: identical players have no order to agree or disagree on", style="dim")
        else:
            console.print(f"  divergence test (authoring and solving rank the models differently, p < 0.05): power "
                          f"{d['power']:.2f} when hint-writing skill runs in reverse; false alarm "
                          f"{d['false_alarm']:.2f} when it runs in the same order"
                          + (f"; no test in {d['no_test']:.2f} of runs" if d["no_test"] else "")
                          + f" (ρ's interval withheld in {d['no_interval']:.2f})")
        console.print(f"  significant 3-cycle: power {c['power']:.2f} for a planted cycle of {c['size']:g} "
                      f"logits among the best three; false alarm {c['false_alarm']:.2f} with none")
    error = 0.5 / sim["replicates"] ** 0.5  # the widest binomial standard error, at a share of ½
    console.print(f"Coverage should be near {sim['nominal_coverage']}; false alarms near 0.05 or below. "
                  f"A share from {sim['replicates']} simulated tournaments is uncertain by up to ±{2 * error:.2f} "
                  "(raise --replicates to narrow it).", style="dim")


def emit(cfg: RunConfig, cost: DesignCost, doc: dict[str, Any], as_json: bool) -> None:
    """Print the plan: one JSON object (`as_json`), else the tables and their reading."""
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    else:
        _print_plan(cfg, cost, doc)
