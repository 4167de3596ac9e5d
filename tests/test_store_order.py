"""The analysis tables do not depend on the order in which work finished: the same tournament,
run twice (or on another executor), must give the same report, bootstrap intervals included."""

from __future__ import annotations

import dataclasses
import json

from envduels.envs import EnvSpec
from envduels.store import EnvRecord, EpisodeRow
from envduels.store.writer import RunWriter


def _env(env_id: str, author: str) -> EnvRecord:
    return EnvRecord(EnvSpec(env_id, f"class E_{author}: ...", class_name="E", max_turns=5,
                             domain="logic", author=author, title=env_id, hints={"hint": "h"},
                             benchmark_seeds=(1, 2)), round=1)


def _episodes() -> list[EpisodeRow]:
    rows = []
    for env_id, author in (("r1-a-0", "a"), ("r1-b-0", "b")):
        for solver in ("a", "b", "c"):
            for seed in (1, 2):
                for hinted in (False, True):
                    rows.append(EpisodeRow(
                        episode_key=f"{env_id}/{solver}/{seed}/{hinted}", env_id=env_id,
                        author=author, solver=solver, round=1, domain="logic", seed=seed,
                        trial=0, hinted=hinted,
                        outcome="success" if (seed + hinted + len(solver)) % 2 else "failure",
                        reason="", turns=1, self_play=solver == author, transcript=[]))
    return rows


def _tables_json(store: RunWriter) -> str:
    t = store.reader.tables()
    return json.dumps([t.environments.to_dict("records"), t.episodes.to_dict("records")],
                      default=str)


def test_tables_are_in_one_canonical_order_whatever_order_work_was_recorded_in(tmp_path):
    envs = [_env("r1-b-0", "b"), _env("r1-a-0", "a")]
    eps = _episodes()
    first, second = RunWriter(tmp_path / "one"), RunWriter(tmp_path / "two")
    for env in envs:
        first.put_environment(env)
    for env in reversed(envs):
        second.put_environment(env)
    for ep in eps:
        first.put_episode(ep)
    for ep in reversed(eps):
        second.put_episode(dataclasses.replace(ep))
    assert _tables_json(first) == _tables_json(second)
    t = first.reader.tables()
    assert list(t.environments.env_id) == ["r1-a-0", "r1-b-0"]
    assert list(t.episodes.episode_key[:2]) == ["r1-a-0/a/1/False", "r1-a-0/a/1/True"]
