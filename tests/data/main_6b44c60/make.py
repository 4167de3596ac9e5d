"""Write `run.db` and `expected/` here with the envduels of main at 6b44c60 (before issue 13).

Run from the repository root (the fixture is made once and committed; see README.md here):

    rm -rf /tmp/main-6b44c60 && mkdir /tmp/main-6b44c60
    git archive 6b44c60 src | tar -x -C /tmp/main-6b44c60
    PYTHONPATH=/tmp/main-6b44c60/src /work/main/.venv/bin/python tests/data/main_6b44c60/make.py

`expected/` holds what that code read back from the database: the environment and episode
tables (`tables.json`), the report JSON (`report.json`) and the `envduels` and `jsonl` exports.
`tests/test_store_migration.py` checks that today's code reads the same from the same file.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import envduels
from envduels.export import export_command
from envduels.report.commands import report_command
from envduels.store import EnvironmentRow, EpisodeRow, Store

HERE = Path(__file__).resolve().parent
if "main-6b44c60" not in envduels.__file__:
    sys.exit(f"run this with the envduels of main at 6b44c60 first on PYTHONPATH, not {envduels.__file__}")

SOURCE = "class Env{n}:\n    def __init__(self, max_turns: int = {t}):\n        self.max_turns = max_turns\n"
PLAYERS = ["alice", "bob"]
ENVS = [
    # env_id, author, round, slot, valid, reason, hints, fixed_pool, metadata
    ("r1-alice-0", "alice", 1, 0, True, None, {"hint": "go left"}, False, {"attempts": 1}),
    ("r1-alice-1", "alice", 1, 1, False, "no class found", {"hint": "none"}, False, {"attempts": 3}),
    ("r1-bob-0", "bob", 1, 0, True, None, {"hint": "count to 3 \u00e9"}, False, {"attempts": 2}),
    ("r2-bob-0", "bob", 2, 0, True, None, {"hint": "think"}, False, {"attempts": 1}),
    ("maze", "library", 1, 0, True, None, {"hint_1": "walls", "hint_2": "exit east"}, True,
     {"split": "train", "source_run": "x"}),
]
SEEDS = (11, 22)


def main() -> None:
    run_dir = HERE / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.rmtree(HERE / "expected", ignore_errors=True)
    (HERE / "expected").mkdir()
    with Store(run_dir) as store:
        store.set_meta("config", {"name": "old", "seed": 3, "players": [
            {"name": p, "provider": "openai", "model": f"{p}-m", "params_b": 7.0,
             "roles": ["author", "solver"]} for p in PLAYERS],
            "tournament": {"history": "all", "rounds": 2, "seeds_per_env": 2}})
        for k, p in enumerate(PLAYERS):
            store.put(f"key-{p}", {"player": p, "role": "solver", "call_id": f"ep:{p}",
                                   "input_tokens": 100 * (k + 1), "output_tokens": 20,
                                   "cost_usd": 0.5 * (k + 1)})
        for n, (env_id, author, rnd, slot, valid, reason, hints, pool, meta) in enumerate(ENVS):
            source = SOURCE.format(n=n, t=10 + n)
            import hashlib

            store.put_environment(EnvironmentRow(
                env_id=env_id, author=author, round=rnd, slot=slot, domain="logic" if n % 2 else "math",
                title=f"Title {n}", valid=valid, invalid_reason=reason, hints=hints, source=source,
                source_sha256=hashlib.sha256(source.encode()).hexdigest(), class_name=f"Env{n}",
                max_turns=10 + n, fixed_pool=pool, benchmark_seeds=SEEDS, metadata=meta))
            store.put_validation(env_id, 0, author=author, round=rnd, valid=valid,
                                 reasons=[] if valid else [reason], verdict=None, reply="reply")
            if not valid:
                continue
            for solver in PLAYERS:
                for seed in SEEDS:
                    for hinted in (False, True):
                        won = (seed + len(solver) + hinted + n) % 3 != 0
                        key = f"{env_id}|{solver}|{seed}|0|{int(hinted)}"
                        store.put_episode(EpisodeRow(
                            episode_key=key, env_id=env_id, author=author, solver=solver,
                            round=rnd, domain="logic" if n % 2 else "math", seed=seed, trial=0,
                            hinted=hinted, outcome="success" if won else "failure",
                            reason="won" if won else "out of turns", turns=2,
                            self_play=solver == author,
                            transcript=[{"role": "user", "content": "Observation: start"},
                                        {"role": "assistant", "content": "\\boxed{left}"},
                                        {"role": "env", "action": "\\boxed{left}",
                                         "reward": float(won), "terminated": True,
                                         "content": "done"}]))
                        store.put_audit(key, env_id, passed=env_id != "r2-bob-0",
                                        detail="" if env_id != "r2-bob-0" else "turn 1 differs")
        tables = store.tables()
    # the database file alone: every committed record folded into it
    for side in ("run.db-wal", "run.db-shm", "run.lock"):
        (run_dir / side).unlink(missing_ok=True)
    envs = tables.environments.to_dict("records")
    eps = tables.episodes.to_dict("records")
    (HERE / "expected" / "tables.json").write_text(
        json.dumps({"environments": envs, "episodes": eps}, indent=1, sort_keys=True, default=str) + "\n")
    report_command([run_dir], json_path=HERE / "expected" / "report.json", html_path=None, bootstrap=20)
    for fmt in ("envduels", "jsonl"):
        export_command(run_dir, HERE / "expected" / f"export-{fmt}", fmt=fmt, authors=[], rounds=[],
                       flags=[], min_pass=None, max_pass=None, target=None)


if __name__ == "__main__":
    main()
