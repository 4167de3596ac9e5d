"""`envduels export --format hf|jsonl` rows for self-distillation (TRL's SDFT and SDPO): `prompt`
is what a solver is shown first, unhinted; `privileged_context` is the hint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transfer_tables import env_row, pair_rows, write_run

from envduels.duel.protocol import SYSTEM_PROMPT
from envduels.envs import library_env
from envduels.export import export_command
from envduels.rl import TEACHER_PROMPT_TEMPLATE

ENVDUELS = Path(sys.executable).parent / "envduels"
GUESS = library_env("number_guess")
# resets like number_guess on every seed but 22, where its reset raises
FLAKY = GUESS.source + '''

class Flaky(NumberGuess):
    def reset(self, seed=None):
        if seed == 22:
            raise ValueError("no game on seed 22")
        return super().reset(seed)
'''


def _export(run: Path, out: Path, fmt: str) -> None:
    assert export_command(run, out, fmt=fmt, authors=[], rounds=[], flags=[], min_pass=None,
                          max_pass=None, target=None) == 0


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("sdft") / "run"
    envs = [
        env_row("guess", "alice", source=GUESS.source, class_name=GUESS.class_name,
                max_turns=GUESS.max_turns, hint=GUESS.hint, benchmark_seeds=(11, 22)),
        env_row("graded", "bob", source=GUESS.source, class_name=GUESS.class_name,
                max_turns=GUESS.max_turns, hints={"hint_1": "halve the range",
                                                  "hint_2": "start at \\boxed{500}"},
                benchmark_seeds=(5,)),
        env_row("flaky", "bob", source=FLAKY, class_name="Flaky", max_turns=GUESS.max_turns,
                benchmark_seeds=(11, 22)),
    ]
    eps = [row for e in envs for s in e.benchmark_seeds
           for row in pair_rows(e.env_id, e.author, "carol", s, 0, 1)]
    write_run(run, envs, eps, players=["alice", "bob", "carol"])
    return run


def _shown_first(folder: Path, env_id: str, seed: int, *hint: str) -> tuple[str, str]:
    """(system prompt, first user turn) as `envduels play FOLDER/ENV_ID --seed SEED` prints them
    to a person, who then closes standard input."""
    done = subprocess.run(
        [str(ENVDUELS), "play", f"{folder}/{env_id}", "--human", "--seed", str(seed), *hint],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
        env={**os.environ, "COLUMNS": "100000"})   # Rich wraps at 80 columns otherwise
    assert done.returncode == 1 and "you closed standard input" in done.stderr, done.stderr
    head, rest = done.stdout.split("\nenvironment -> ", 1)
    return head.removeprefix("system: "), rest.split("\nyour action> ", 1)[0]


@pytest.mark.slow
def test_hf_rows_are_play_s_first_turn_and_the_hint(run_dir, tmp_path):
    from datasets import load_from_disk

    _export(run_dir, tmp_path / "hf", "hf")
    _export(run_dir, tmp_path / "envs", "envduels")
    rows = {(r["id"], r["seed"]): r for r in load_from_disk(str(tmp_path / "hf")).to_list()}
    # flaky's seed 22 faults on reset: no row
    assert sorted(rows) == [("flaky", 11), ("graded", 5), ("guess", 11), ("guess", 22)]
    for key, hint, graded in [(("guess", 22), GUESS.hint, (GUESS.hint, None)),
                              (("graded", 5), "halve the range",
                               ("halve the range", "start at \\boxed{500}"))]:
        row = rows[key]
        system, first = _shown_first(tmp_path / "envs", *key)
        assert row["prompt"] == [{"role": "system", "content": system},
                                 {"role": "user", "content": first}]
        assert system == SYSTEM_PROMPT and first.startswith("Observation: I picked a whole number")
        assert row["privileged_context"] == hint
        assert (row["hint_1"], row["hint_2"]) == graded
        # with our template, SDFT's teacher sees exactly the duel's hinted first turn
        _, hinted = _shown_first(tmp_path / "envs", *key, "--hint")
        assert TEACHER_PROMPT_TEMPLATE.format(prompt=first, privileged_context=hint) == hinted


def test_a_seed_whose_reset_faults_is_left_out_and_named(run_dir, tmp_path, capsys):
    out = tmp_path / "jsonl"
    _export(run_dir, out, "jsonl")
    rows = [json.loads(line) for line in (out / "environments.jsonl").read_text().splitlines()]
    assert [(r["id"], r["seed"]) for r in rows] == [
        ("flaky", 11), ("graded", 5), ("guess", 11), ("guess", 22)]
    err = capsys.readouterr().err
    assert err.startswith("left out 1 (environment, seed) whose reset faulted: flaky seed 22 (")
    assert "no game on seed 22" in err and err.count("\n") == 1
    marker = json.loads((out / "export.json").read_text())
    assert marker["records"] == 4 and [(s["id"], s["seed"]) for s in marker["skipped"]] == [
        ("flaky", 22)]
    # two seeds of one environment are two games
    assert rows[2]["prompt"] != rows[3]["prompt"]
