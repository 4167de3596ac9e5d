"""The replay audit's timing is not the play's: a round's replays run after all its plays, in
an order no environment can predict (issue 19). Against the real scripted server and real
sandboxes; the play and replay functions are only timed (wrapped), never replaced."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml
from scipy.stats import kendalltau

from envduels.engine import scheduler
from envduels.engine.run import run_command
from envduels.envs import EnvSpec, write_export
from envduels.store import Store
from envduels.testing import ScriptedServer

KEY = "sk-audit-order"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "envs"
SEEDS = 12   # 24 episodes: a shuffled order has Kendall tau ~ 0 +- 0.15 against the play's


def solver(model: str, messages: list[dict]) -> str:
    first = next(m["content"] for m in messages if m["role"] == "user")
    room = int(re.search(r"room (\d+)", first).group(1))
    return f"\\boxed{{open-{room % 10}}}" if first.startswith("Hint: ") else "\\boxed{closed}"


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    write_export(tmp_path / "pool", [EnvSpec(
        id="deceive_control", source=(FIXTURES / "deceive_control.py").read_text(),
        max_turns=4, domain="logic", author="library", title="control",
        hints={"hint": "The word is open, a hyphen and the room's last digit."},
        benchmark_seeds=tuple(range(SEEDS)))])
    with ScriptedServer(solver, api_key=KEY) as server:
        cfg = {
            "name": "order", "seed": 1, "output_dir": str(tmp_path / "run"),
            "players": [{"name": "carol", "provider": "openai", "model": "m-carol",
                         "base_url": server.base_url, "api_key_env": "ENVDUELS_TEST_KEY",
                         "roles": ["solver"], "max_retries": 1, "timeout_s": 20,
                         "max_concurrency": 1, "temperature": 0.0}],
            "tournament": {"rounds": 1, "envs_per_author": 1, "seeds_per_env": SEEDS,
                           "trials_per_seed": 1, "max_turns": 4,
                           "environments": [str(tmp_path / "pool")]},
            "sandbox": {"warm_workers": 2},
        }
        (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
        assert run_command(tmp_path / "run.yaml", unsafe_no_sandbox=False, quiet=True) == 0
    return tmp_path / "run"


def test_a_round_s_replays_start_after_its_last_play_in_an_order_unrelated_to_the_plays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plays: list[tuple[str, float, float]] = []     # key, start, end
    replays: list[tuple[str, float]] = []          # key of the played transcript, start
    play, replay = scheduler.play_episode, scheduler.replay_episode

    async def timed_play(task, *args, **kw):
        start = time.monotonic()
        result = await play(task, *args, **kw)
        plays.append((task.key, start, time.monotonic()))
        return result

    async def timed_replay(transcript, **kw):
        replays.append((_key_of(transcript), time.monotonic()))
        return await replay(transcript, **kw)

    transcripts: dict[int, str] = {}

    def _key_of(transcript: list) -> str:
        return transcripts[id(transcript)]

    record = scheduler.Tournament._record

    def remember(self, task, result):   # which played transcript belongs to which episode
        transcripts[id(result.transcript)] = task.key
        return record(self, task, result)

    monkeypatch.setattr(scheduler, "play_episode", timed_play)
    monkeypatch.setattr(scheduler, "replay_episode", timed_replay)
    monkeypatch.setattr(scheduler.Tournament, "_record", remember)
    run = _run(tmp_path, monkeypatch)

    assert len(plays) == len(replays) == 2 * SEEDS
    last_play_end = max(end for _key, _start, end in plays)
    assert min(start for _key, start in replays) >= last_play_end
    play_rank = {key: rank for rank, (key, _s, _e) in enumerate(sorted(plays, key=lambda p: p[1]))}
    replay_order = [play_rank[key] for key, _start in sorted(replays, key=lambda r: r[1])]
    assert sorted(replay_order) == list(range(2 * SEEDS))   # each episode replayed once
    tau = kendalltau(range(2 * SEEDS), replay_order).statistic
    assert abs(tau) < 0.6, (tau, replay_order)   # in play order it is 1.0

    store = Store(run, create=False)
    assert store.unaudited_count() == 0 and store.audit_counts() == {"passed": 2 * SEEDS}
    store.close()

