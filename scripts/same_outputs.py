"""Check that `report --json`, `plan --json`, `estimate` (table and JSON) and `status` print
byte for byte what another commit printed, on the example configs and on run databases.

A refactor that must change no output (issue 31's store split) runs this against the commit it
started from:

    PYTHONPATH=$PWD/src /work/main/.venv/bin/python scripts/same_outputs.py --base a3c430c

The base commit's `src` is extracted with `git archive` into a scratch folder; each command runs
once with the base's sources first on PYTHONPATH and once with this tree's, in the same working
folder, on fresh copies of the same inputs (a command that migrates a database must not change
what the other one reads). The run databases are the two that the migration tests keep
(`tests/data/main_6b44c60/run`, written by main at 6b44c60; `tests/fixtures/resume_main_6b44c60/
run`) and a simulated tournament written by the base commit's own store (`tests/report/rundb.py`)
with validations, battery findings, replay audits, an authoring error and an unaudited episode
added, so that every line of `status` has something to say. `estimate` also reads a run folder
with history: the old database with calls of its episodes and authoring jobs added, under a
config naming its players. Exit 0 when every output is the same;
otherwise each difference is printed (a unified diff of the first lines) and the exit is 1.

`--quick` runs `plan` with 2 replicates and 20 bootstrap draws instead of its defaults (minutes
less; the same code paths).
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
RUNS = {"old": ROOT / "tests" / "data" / "main_6b44c60" / "run",
        "resume": ROOT / "tests" / "fixtures" / "resume_main_6b44c60" / "run"}

# Written with the base commit's store: a simulated tournament plus the records `status` reads.
MAKE_SIMULATED = r'''
import sys
from pathlib import Path
sys.path.insert(0, str(Path(sys.argv[2]) / "tests" / "report"))
from rundb import small_run
from envduels.store import Store

run = small_run(Path(sys.argv[1]), seed=3, name="simulated")
store = Store(run, create=False)
envs = [e for e in store.environments() if e.valid]
flags = ["trivial", None, "hint_is_key"]
for i, env in enumerate(envs[:3]):
    verdict = {"valid": True, "battery": {"flag": flags[i], "detail": f"found {i}"}}
    store.put_validation(env.env_id, 0, author=env.author, round=env.round, valid=True,
                         reasons=[], verdict=verdict, reply="reply")
store.put_authoring_error("r9-p0-0", author="p0", round=9)
played = [e for e in store.episodes() if e.outcome in ("success", "failure")]
for k, ep in enumerate(played[:-1]):
    store.put_audit(ep.episode_key, ep.env_id, passed=k % 7 != 3,
                    detail="" if k % 7 != 3 else f"turn {k} differs")
store.close()
for side in ("run.db-wal", "run.db-shm", "run.lock"):
    (run / side).unlink(missing_ok=True)

# the old database with calls of episodes and authoring jobs: an estimate from its history
history = Path(sys.argv[3])
store = Store(history, create=False)
for i, ep in enumerate(store.episodes()):
    for turn in (1, 2):
        store.put(f"h-{i}-{turn}", {"player": ep.solver, "role": "solver",
                                    "call_id": f"ep:{ep.episode_key}:turn:{turn}",
                                    "input_tokens": 300 + 7 * i, "output_tokens": 40 + i % 5,
                                    "cost_usd": 0.001 * (1 + i % 3), "latency_s": 0.5})
for j, env in enumerate(e for e in store.environments() if not e.fixed_pool):
    for attempt in range(1 + j % 2):
        store.put(f"a-{j}-{attempt}", {"player": env.author, "role": "author",
                                       "call_id": f"author:{env.env_id}:attempt:{attempt}",
                                       "input_tokens": 2000 + j, "output_tokens": 900,
                                       "cost_usd": 0.02, "latency_s": 9.0})
store.close()
for side in ("run.db-wal", "run.db-shm", "run.lock"):
    (history / side).unlink(missing_ok=True)
'''

# A config whose run folder holds a run with history: the old database's players.
HISTORY_CONFIG = """name: old
seed: 3
output_dir: {run}
players:
  - {{name: alice, provider: openai, model: alice-m, roles: [author, solver],
     price: {{input_per_mtok: 1, output_per_mtok: 4}}}}
  - {{name: bob, provider: openai, model: bob-m, roles: [author, solver],
     price: {{input_per_mtok: 2, output_per_mtok: 8}}}}
tournament: {{rounds: 3, envs_per_author: 2, seeds_per_env: 2, history: all,
             environments: [maze]}}
"""


def _envduels(src: Path, args: list[str], cwd: Path) -> tuple[str, str, int]:
    env = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "120", "NO_COLOR": "1"}
    code = "import sys; from envduels.cli import main; sys.argv = ['envduels', *sys.argv[1:]]; main()"
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=1800)
    return done.stdout, done.stderr, done.returncode


def _fresh(pristine: Path, work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(pristine, work)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the commit whose outputs are the reference")
    parser.add_argument("--quick", action="store_true", help="plan with 2 replicates, 20 draws")
    parser.add_argument("--keep", type=Path, help="scratch folder to keep (default: a temporary one)")
    parser.add_argument("--head", type=Path, default=ROOT / "src",
                        help="the sources to compare (default: this tree's src)")
    args = parser.parse_args()
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="same-outputs-"))
    scratch.mkdir(parents=True, exist_ok=True)
    base = scratch / "base"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base, "src", "tests/report"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
    trees = {"base": base / "src", "head": args.head.resolve()}

    pristine = scratch / "pristine"
    shutil.rmtree(pristine, ignore_errors=True)
    pristine.mkdir()
    for name, run in RUNS.items():
        shutil.copytree(run, pristine / name)
    env = {**os.environ, "PYTHONPATH": str(trees["base"])}
    shutil.copytree(RUNS["old"], pristine / "history")
    subprocess.run([sys.executable, "-c", MAKE_SIMULATED, str(pristine / "simulated"), str(base),
                    str(pristine / "history")], env=env, check=True)
    work = scratch / "work"
    cwd = work / "cwd"
    configs = list(EXAMPLES)
    history = scratch / "history.yaml"
    history.write_text(HISTORY_CONFIG.format(run=work / "history"))
    plan_args = ["--replicates", "2", "--bootstrap", "20"] if args.quick else []

    commands: list[tuple[str, list[str]]] = []
    for run in ("old", "resume", "simulated", "history"):
        commands.append((f"status {run}", ["status", str(work / run)]))
        commands.append((f"report --json {run}",
                         ["report", str(work / run), "--json", str(work / "out" / "report.json"),
                          "--html", str(work / "out" / "report.html"), "--bootstrap", "50"]))
    for config in [*configs, history]:
        commands.append((f"estimate {config.name}", ["estimate", str(config)]))
        commands.append((f"estimate --json {config.name}", ["estimate", "--json", str(config)]))
    for config in configs:
        commands.append((f"plan --json {config.name}", ["plan", str(config), "--json", *plan_args]))

    different = 0
    for label, argv in commands:
        got = {}
        for tree, src in trees.items():
            _fresh(pristine, work)
            cwd.mkdir()
            (work / "out").mkdir()
            out, err, rc = _envduels(src, argv, cwd)
            files = {p.name: p.read_bytes() for p in sorted((work / "out").glob("*.json"))}
            got[tree] = (out, err, rc, files)
        same = got["base"] == got["head"]
        print(f"{'same' if same else 'DIFFERENT'}: {label} (exit {got['base'][2]})", flush=True)
        if not same:
            different += 1
            for part, name in ((0, "stdout"), (1, "stderr")):
                diff = list(difflib.unified_diff(got["base"][part].splitlines(),
                                                 got["head"][part].splitlines(),
                                                 f"base {name}", f"head {name}", lineterm=""))
                print("\n".join(diff[:40]))
            for name in sorted(set(got["base"][3]) | set(got["head"][3])):
                a = got["base"][3].get(name, b"").decode().splitlines()
                b = got["head"][3].get(name, b"").decode().splitlines()
                print("\n".join(list(difflib.unified_diff(a, b, f"base {name}", f"head {name}",
                                                          lineterm=""))[:40]))
            if got["base"][2] != got["head"][2]:
                print(f"exit {got['base'][2]} != {got['head'][2]}")
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{len(commands) - different} of {len(commands)} outputs the same")
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
