"""One count of a run's episodes (`scheduler.planned_episodes`): `status`, the viewer and the
sandbox pool's sizing all ask it, and it counts exactly the episodes the scheduler builds."""

from __future__ import annotations

import pytest

from envduels.config import parse_config
from envduels.engine.commands import expected_episodes
from envduels.engine.progress import Progress
from envduels.engine.scheduler import Tournament, planned_episodes
from envduels.envs import EnvSpec
from envduels.store import EnvRecord
from envduels.store.writer import RunWriter


def _env(env_id: str, author: str, *, seeds: tuple[int, ...], round_: int = 1, valid: bool = True,
         fixed_pool: bool = False) -> EnvRecord:
    """An environment as the run records it (the one place this test builds a record)."""
    spec = EnvSpec(env_id, "s", class_name="E", max_turns=9, domain="d", author=author,
                   hints={"hint": "h"}, benchmark_seeds=seeds)
    return EnvRecord(spec, round=round_, valid=valid, invalid_reason=None if valid else "x",
                     fixed_pool=fixed_pool)


def _cfg(**tournament: object):
    return parse_config({"name": "t", "tournament": {"rounds": 2, **tournament}, "players": [
        {"name": "a", "provider": "openai", "model": "m"},
        {"name": "b", "provider": "openai", "model": "m", "roles": ["solver"]},
        {"name": "c", "provider": "openai", "model": "m", "roles": ["author"]}]})


def _recorded() -> list[EnvRecord]:
    """Round 1 of `_cfg`: a's and c's environments (c's invalid), a fixed-pool one by c; round 2:
    a's with three seeds; c's round-2 environment not written yet."""
    return [_env("r1-a-0", "a", seeds=(11, 12)),
            _env("r1-c-0", "c", seeds=(11, 12), valid=False),
            _env("pool-env", "c", seeds=(5,), fixed_pool=True),
            _env("r2-a-0", "a", seeds=(1, 2, 3), round_=2)]


@pytest.mark.parametrize("self_play", [True, False])
def test_a_rounds_count_is_the_number_of_episodes_the_scheduler_builds(tmp_path, self_play):
    cfg = _cfg(self_play=self_play, trials_per_seed=2)
    t = Tournament(cfg, writer=RunWriter(tmp_path), players={}, sandboxes=None, fingerprint="fp",
                   fixed_envs=[], progress=Progress(rounds=2))
    envs = _recorded()
    round_1 = [e for e in envs if e.valid and e.round == 1]
    assert planned_episodes(cfg, envs, [1]) == len(t._tasks(round_1))
    # round 2: a's recorded environment, and c's unwritten one counted as if valid with
    # seeds_per_env (4) seeds, whose solvers are the same whether it is written or not
    unwritten = _env("r2-c-0", "c", seeds=(1, 2, 3, 4), round_=2)
    round_2 = [e for e in envs if e.round == 2] + [unwritten]
    assert planned_episodes(cfg, envs, [2]) == len(t._tasks(round_2))
    assert planned_episodes(cfg, envs + [unwritten], [2]) == len(t._tasks(round_2))


def test_status_expects_every_round_of_the_run():
    cfg = _cfg(self_play=False)
    envs = _recorded()
    # a's env: b solves (a's own excluded) 2 seeds x 1 trial x 2 conditions = 4; the pool env
    # by c: a and b, 1 seed = 4; a's round-2 env: b, 3 seeds = 6; c's unwritten one: a and b,
    # 4 seeds = 16. c's invalid environment plays nothing.
    assert expected_episodes(cfg, envs) == 4 + 4 + 6 + 16
    assert expected_episodes(cfg, envs) == planned_episodes(cfg, envs, [1, 2])
    assert expected_episodes(None, envs) == 0   # no readable config: nothing known to expect
