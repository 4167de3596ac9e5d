"""`envduels.serve.client.DuelClient`, the shape of TRL's `environment_factory`, against a real
server: a dataset row's columns are the reset, a GRPO group's rows are one environment and seed,
and the reward is the duel's success."""

from __future__ import annotations

import pytest

from envduels.duel.protocol import FORMAT_ERROR, hint_prefix
from envduels.envs import load_env_file

from .conftest import MARKER

pytest.importorskip("openenv.core.generic_client",
                    reason="the serve extra is not installed: pip install 'envduels[serve]'")
from envduels.serve.client import DuelClient  # noqa: E402  (needs the serve extra)


def test_a_dataset_row_is_the_reset_and_the_duel_decides_the_reward(server):
    row = {"prompt": [{"role": "user", "content": "ignored"}], "env_id": "marker", "seed": 3,
           "hint": 0}
    with DuelClient(server.url) as env:
        first = env.reset(**row)
        assert first.startswith("Observation: seed 3; markers before mine: []")
        assert env.play("no box") == FORMAT_ERROR and env.get_reward() == 0.0
        assert env.play("\\boxed{win}") == "you win" and env.get_reward() == 1.0
        assert env.play("\\boxed{win}") == "The episode is over; no more actions are taken."
        assert env.transcript()[-1]["outcome"] == "success"
        hinted = env.reset(**{**row, "hint": 1})
    hint = load_env_file(MARKER).hint
    assert hinted == hint_prefix(hint) + first


def test_the_rows_of_one_group_replay_one_environment_and_seed(server):
    group = [{"env_id": "marker", "seed": 11, "hint": 0}] * 3   # GRPO repeats a row per group
    firsts = []
    for row in group:
        with DuelClient(server.url) as env:
            firsts.append(env.reset(**row))
            env.play("\\boxed{lose}")
            assert (env.done, env.get_reward()) == (True, 0.0)
    assert len(set(firsts)) == 1 and "seed 11" in firsts[0]



def test_the_clients_made_from_several_urls_take_them_in_turn():
    from envduels.serve.client import pick

    line = "http://10.0.0.5:41021/ http://10.0.0.6:39817/"   # as `envduels serve --ray` prints
    assert [pick(line) for _ in range(5)] == ["http://10.0.0.5:41021/",
                                              "http://10.0.0.6:39817/"] * 2 + [
                                              "http://10.0.0.5:41021/"]
    three = ("http://a:1/", "http://b:2/", "http://c:3/")
    assert [pick(list(three)) for _ in range(4)] == [*three, three[0]]
    assert pick("http://127.0.0.1:8000/") == "http://127.0.0.1:8000/"
    with pytest.raises(ValueError, match="no server URL given"):
        pick(" ")
