"""Constructed runs with a known story, written through the real run database.

Each builder lays out players, environments and a rule for every episode's outcome, so a test
knows what the report must say (a tie, a lead that rests on a leaking hint, a quickstart where
no authored environment was valid, a run with a single solver). `scripts/report_screenshots.py`
renders the same runs for the before/after pictures in docs/report/.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from envduels.analysis import simulate_tournament
from envduels.analysis.simulate import FrameTables, SimulatedRun
from envduels.store import RunReader

from .rundb import write_run

Outcome = Callable[[dict[str, Any], str, int, bool], bool]
"""(environment, solver, seed, hinted) -> solved?"""


def _env(env_id: str, author: str, *, valid: bool = True, hint: str = "Think in small steps.",
         domain: str = "logic", fixed_pool: bool = False, seeds: int = 4) -> dict[str, Any]:
    return {
        "env_id": env_id, "author": author, "round": 1, "domain": domain, "title": f"{env_id} puzzle",
        "valid": valid, "invalid_reason": None if valid else "reset() raised NameError: name 'rng' is not defined",
        "hint": hint, "source": f"class Env:\n    '''{env_id}'''\n", "source_sha256": "", "class_name": "Env",
        "max_turns": 4, "fixed_pool": fixed_pool, "benchmark_seeds": list(range(seeds)),
    }


def constructed(players: list[tuple[str, list[str]]], envs: list[dict[str, Any]], solved: Outcome, *,
                seeds: int = 4, answer: Callable[[dict[str, Any]], str] | None = None) -> SimulatedRun:
    """Every solver plays every valid environment of another author on `seeds` seeds, with and
    without the hint; `solved` decides each episode. A winning episode's transcript ends with
    the action `answer(env)` (default "move 1"), which is what the hint-leak check reads."""
    names = [p for p, _ in players]
    solvers = [p for p, roles in players if "solver" in roles]
    rows = []
    for e in envs:
        if not e["valid"]:
            continue
        for s in solvers:
            if s == e["author"]:
                continue
            for sd in range(seeds):
                for h in (False, True):
                    win = solved(e, s, sd, h)
                    action = answer(e) if answer and win else "move 1"
                    rows.append({
                        "episode_key": f"{e['env_id']}:{s}:{sd}:0:{int(h)}", "env_id": e["env_id"],
                        "author": e["author"], "solver": s, "round": e["round"], "domain": e["domain"],
                        "seed": sd, "trial": 0, "hinted": h, "outcome": "success" if win else "failure",
                        "reason": None, "turns": 2, "self_play": False,
                        "transcript": [{"role": "user", "content": "Observation: start"},
                                       {"role": "assistant", "content": f"\\boxed{{{action}}}"},
                                       {"role": "env", "action": action, "reward": float(win), "terminated": True,
                                        "content": "solved" if win else "not yet"}],
                    })
    players_df = pd.DataFrame({
        "name": names, "provider": "local", "model": names, "params_b": [None] * len(names),
        "roles": [roles for _, roles in players], "cost_usd": [None] * len(names),
        "input_tokens": [0] * len(names), "output_tokens": [0] * len(names),
    })
    tables = FrameTables(players_df, pd.DataFrame(envs), pd.DataFrame(rows))
    return SimulatedRun(tables, {}, {}, {})


def tied_run() -> SimulatedRun:
    """Three players, mirror images of each other: every rating is level for all three."""
    names = ["gamma", "alpha", "beta"]
    envs = [_env(f"r1-{n}-{k}", n) for n in names for k in range(2)]
    # each solver wins seeds 0-1 without the hint and seeds 0-2 with it, on every environment
    return constructed([(n, ["author", "solver"]) for n in names], envs,
                       lambda e, s, sd, h: sd < (3 if h else 2))


def leak_run() -> SimulatedRun:
    """`leaky` tops the duel table only because of one environment whose hint gives the answer
    away: nobody solves it without the hint, everybody with it."""
    names = ["leaky", "plain1", "plain2", "plain3"]
    envs = [_env(f"r1-{n}-{k}", n) for n in names for k in range(2)]
    envs[0]["hint"] = "The code is 4711: answer open 4711."

    def solved(e: dict[str, Any], s: str, sd: int, h: bool) -> bool:
        if e["env_id"] == "r1-leaky-0":
            return h
        if e["author"] == "leaky":  # its fair puzzle's hint rescues a quarter of the seeds
            return h and sd < 1
        return h and sd < 2  # a fair puzzle: the hint rescues half the seeds

    return constructed([(n, ["author", "solver"]) for n in names], envs, solved,
                       answer=lambda e: "open 4711" if e["env_id"] == "r1-leaky-0" else "move 1")


def quickstart_run() -> SimulatedRun:
    """The quickstart's shape: two tiny players whose authored environments are both invalid,
    and two library environments (a fixed pool) that every solver plays; 32 episodes."""
    players = [("cool", ["author", "solver"]), ("warm", ["author", "solver"])]
    envs = [_env("r1-cool-0", "cool", valid=False, hint=""), _env("r1-warm-0", "warm", valid=False, hint=""),
            _env("number_guess", "library", fixed_pool=True, hint="Halve the range each turn.", domain="search"),
            _env("word_transform", "library", fixed_pool=True, hint="Change one letter at a time.",
                 domain="language")]
    return constructed(players, envs, lambda e, s, sd, h: s == "cool" and h and sd == 0 and e["domain"] == "search")


def single_solver_run() -> SimulatedRun:
    """Two authors and one solver: no solver rating is possible, by design."""
    players = [("writer-a", ["author"]), ("writer-b", ["author"]), ("solo", ["solver"])]
    envs = [_env(f"r1-writer-{x}-{k}", f"writer-{x}") for x in "ab" for k in range(3)]
    def solved(e: dict[str, Any], s: str, sd: int, h: bool) -> bool:
        k = int(e["env_id"][-1])
        if "-a-" in e["env_id"]:  # writer-a's hints rescue more seeds than writer-b's
            return sd < 2 + k % 2 if h else sd < (k == 0)
        return sd < 1 + k % 2 if h else sd < 1

    return constructed(players, envs, solved)


def tournament_run() -> SimulatedRun:
    """A mid-sized simulated round robin: six players, three environments each, two rounds."""
    return simulate_tournament(players=6, envs_per_author=3, rounds=2, seeds=3, seed=2, p_invalid=0.1,
                               p_incomplete=0.02)


def write(run_dir: Path, run: SimulatedRun, name: str) -> Path:
    """The run as a real run database (the engine's tables), read back by `envduels report`."""
    write_run(run_dir, run, name=name, hostile=False)
    return run_dir


def tables_of(run_dir: Path) -> Any:
    store = RunReader(run_dir)
    try:
        return store.tables()
    finally:
        store.close()


RUNS = {"tournament": tournament_run, "quickstart": quickstart_run, "single-solver": single_solver_run,
        "tie": tied_run, "leak": leak_run}
