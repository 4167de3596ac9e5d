"""`envduels serve` driven by OpenEnv's own client (WebSocket) and over HTTP, on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess

import httpx
import pytest

from envduels.duel.protocol import FORMAT_ERROR, SYSTEM_PROMPT, first_turn, next_turn
from envduels.envs import library_env

from .conftest import PANEL, SCRIPT, SRC

GenericEnvClient = pytest.importorskip(
    "openenv.core.generic_client", reason="the serve extra is not installed: pip install 'envduels[serve]'"
).GenericEnvClient



def _client(server) -> GenericEnvClient:
    return GenericEnvClient(base_url=server.url).sync()


def test_environments_lists_the_served_ids_with_their_panel_results(server):
    listed = httpx.get(f"{server.url}/environments").json()["environments"]
    # a file's id is its stem; of the run, the valid environments without a flag
    # (r1-alice-0 has hint_leak, r2-bob-0 is nondeterministic, r1-alice-1 is invalid)
    assert [e["id"] for e in listed] == ["number_guess", "marker", "maze", "r1-bob-0", "graded"]
    guess, maze = listed[0], listed[2]
    assert guess["hint_levels"] == [0, 1] and guess["panel"] is None
    assert guess["benchmark_seeds"] == list(library_env("number_guess").benchmark_seeds)
    assert maze["panel"] == {"no_hint_rate": 0.75, "hinted_rate": 0.5, "learnability": 0.125}
    assert maze["hint_levels"] == [0, 1, 2] and maze["benchmark_seeds"] == [11, 22]


def test_hint_levels_1_and_2_are_a_graded_pair_s_hints_and_the_panel_rides_along(server):
    with _client(server) as env:
        plain = env.reset(env_id="graded", seed=11).observation
        one = env.reset(env_id="graded", seed=11, hint=1).observation
        two = env.reset(env_id="graded", seed=11, hint=2).observation
    assert plain["text"].startswith("Observation: seed 11; markers before mine: []")
    assert one["text"] == "Hint: walls\n\n" + plain["text"]
    assert two["text"] == "Hint: exit east\n\n" + plain["text"]
    assert plain["panel"] == two["panel"] == PANEL
    assert (two["max_turns"], two["seed"], two["hint"]) == (4, 11, 2)


def test_a_hinted_reset_is_the_unhinted_one_with_the_hint_first(server):
    hint = library_env("number_guess").hint
    with _client(server) as env:
        plain = env.reset(env_id="number_guess", seed=3, hint=0)
        hinted = env.reset(env_id="number_guess", seed=3, hint=1)
    assert hinted.observation["text"] == f"Hint: {hint}\n\n" + plain.observation["text"]
    assert plain.observation["text"].startswith("Observation: I picked a whole number")
    assert hint not in plain.observation["text"]
    assert {k: v for k, v in hinted.observation.items() if k not in ("text", "hint")} == \
        {k: v for k, v in plain.observation.items() if k not in ("text", "hint")}
    assert (plain.observation["hint"], hinted.observation["hint"]) == (0, 1)
    assert plain.observation["turn"] == 0 and plain.done is False and plain.reward is None
    assert plain.observation["system"] == SYSTEM_PROMPT


def test_a_reply_without_a_box_costs_a_turn_with_reward_0(server):
    with _client(server) as env:
        env.reset(env_id="marker", seed=1, max_turns=2)
        missed = env.step({"message": "I would say win, but no box"})
        assert (missed.observation["text"], missed.reward, missed.done) == (FORMAT_ERROR, 0.0, False)
        assert missed.observation["turn"] == 1 and missed.observation["format_error"] is True
        last = env.step({"message": "still nothing"})
        assert (last.observation["turn"], last.reward, last.done) == (2, 0.0, True)   # the cap
        assert env.state()["outcome"] == "failure" and env.state()["reason"] == "turn cap 2 reached"


def test_a_win_is_success_and_later_turns_are_the_duels_next_turn(server):
    with _client(server) as env:
        env.reset(env_id="marker", seed=4)
        said = env.step({"message": "let me see \\boxed{hello}"})
        assert said.observation["text"] == next_turn("you said \\boxed{hello}")
        assert said.observation["system"] == ""
        won = env.step({"message": "\\boxed{nope} no: \\boxed{win}"})
        assert (won.reward, won.done, won.observation["success"]) == (1.0, True, True)
        assert won.observation["text"] == "you win"
        with pytest.raises(RuntimeError, match="the episode is over \\(success"):
            env.step({"message": "\\boxed{win}"})


def test_over_http_an_episode_is_its_episode_id(server):
    reset = httpx.post(f"{server.url}/reset", json={"env_id": "marker", "seed": 8}).json()
    obs = reset["observation"]
    assert obs["text"] == first_turn("seed 8; markers before mine: []", hint=None)
    eid = obs["episode_id"]
    step = httpx.post(f"{server.url}/step", json={"action": {"message": "x"}, "episode_id": eid})
    assert step.status_code == 200 and step.json()["observation"]["text"] == FORMAT_ERROR
    won = httpx.post(f"{server.url}/step",
                     json={"action": {"message": "\\boxed{win}"}, "episode_id": eid}).json()
    assert (won["reward"], won["done"]) == (1.0, True)
    gone = httpx.post(f"{server.url}/step",
                      json={"action": {"message": "\\boxed{win}"}, "episode_id": eid})
    assert gone.status_code == 404 and "no running episode" in gone.json()["detail"]


BAD_RESETS = [
    ({"env_id": "nope"}, 400, "unknown env_id 'nope'"),
    ({"env_id": "../marker"}, 400, "unknown env_id '../marker'"),
    ({"env_id": "/etc/passwd"}, 400, "unknown env_id"),
    ({"env_id": 5}, 400, "unknown env_id 5"),
    ({}, 400, "reset needs env_id: one of number_guess, marker, maze, r1-bob-0, graded"),
    ({"env_id": "marker", "seed": "x"}, 422, "seed: Input should be a valid integer"),
    ({"env_id": "marker", "seed": 2**64}, 400, "seed must be an integer from"),
    ({"env_id": "marker", "hint": 3}, 400, "hint must be an integer from 0 to 2"),
    ({"env_id": "marker", "hint": "1"}, 400, "hint must be an integer from 0 to 2"),
    ({"env_id": "marker", "hint": 2}, 400, "has no hint of level 2"),
    ({"env_id": "marker", "max_turns": 0}, 400, "max_turns must be an integer from 1"),
    ({"env_id": "marker", "colour": 1}, 400, "unknown reset field(s) 'colour'"),
    ({"env_id": "marker", "episode_id": "a b"}, 400, "episode_id must be"),
]


@pytest.mark.parametrize(("body", "status", "line"), BAD_RESETS)
def test_a_bad_reset_is_a_one_line_error_over_http(server, body, status, line):
    response = httpx.post(f"{server.url}/reset", json=body)
    assert response.status_code == status
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and line in detail, detail


@pytest.mark.parametrize(("body", "status", "line"), [
    ({"action": {}}, 422, "message: Field required"),
    ({"action": {"message": 5}}, 422, "message: Input should be a valid string"),
    ({"action": {"message": "x"}}, 400, "over HTTP, /step needs the episode_id"),
    ({"action": {"message": "x"}, "episode_id": "never"}, 404, "no running episode 'never'"),
    ({"action": {"message": "x"}, "episode_id": ["a"]}, 400, "episode_id must be"),
    ({"actions": {"message": "x"}}, 422, "action: Field required"),
])
def test_a_bad_step_is_a_one_line_error_over_http(server, body, status, line):
    response = httpx.post(f"{server.url}/step", json=body)
    assert response.status_code == status
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and line in detail, detail


def test_an_oversized_or_malformed_body_is_a_one_line_error(server):
    big = httpx.post(f"{server.url}/step", content=b"{" + b" " * (2 << 20) + b"}",
                     headers={"content-type": "application/json"})
    assert big.status_code == 413 and "request body over 1048576 bytes" in big.json()["detail"]
    broken = httpx.post(f"{server.url}/reset", content=b"{not json",
                        headers={"content-type": "application/json"})
    assert broken.status_code == 422 and isinstance(broken.json()["detail"], str)


def test_bad_websocket_requests_are_one_line_errors_and_the_session_goes_on(server):
    with _client(server) as env:
        with pytest.raises(RuntimeError, match="no episode is running: reset first"):
            env.step({"message": "\\boxed{win}"})
        with pytest.raises(RuntimeError, match="unknown env_id '../../x'"):
            env.reset(env_id="../../x")
        with pytest.raises(RuntimeError, match="Invalid message"):
            env.step({"message": None})
        with pytest.raises(RuntimeError, match="hint must be an integer from 0 to 2"):
            env.reset(env_id="marker", hint=True)
        assert env.reset(env_id="marker", seed=2).observation["turn"] == 0


def test_an_environment_fault_ends_that_episode_with_a_clear_error(server):
    with _client(server) as env:
        env.reset(env_id="marker", seed=5)
        with pytest.raises(RuntimeError, match="environment fault: .*crashed on purpose.*"
                                               "the episode ended \\(incomplete\\)"):
            env.step({"message": "\\boxed{crash}"})
        with pytest.raises(RuntimeError, match="episode ended because environment fault"):
            env.step({"message": "\\boxed{look}"})
        assert env.reset(env_id="marker", seed=6).observation["text"].startswith(
            "Observation: seed 6; markers before mine: []")   # a fresh sandbox
    assert httpx.get(f"{server.url}/health").json()["status"] == "healthy"


@pytest.mark.parametrize(("args", "said"), [
    (["nosuchenv"], "error: 'nosuchenv' is not an environment file"),
    (["number_guess", "--max-sessions", "0"], "error: --max-sessions must be at least 1"),
    (["number_guess", "--port", "70000"], "error: --port must be between 0 and 65535"),
    (["number_guess", "number_guess"], "error: environment id 'number_guess' is served twice"),
])
def test_a_bad_serve_command_is_one_line_and_a_non_zero_exit(args, said):
    done = subprocess.run([str(SCRIPT), "serve", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": SRC})
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.startswith(said) and done.stderr.count("\n") == 1, done.stderr


def test_an_environment_that_hangs_is_stopped_at_the_call_deadline_for_that_client_only(server):
    with _client(server) as env, _client(server) as other:
        env.reset(env_id="marker", seed=21)
        other.reset(env_id="marker", seed=22)
        with pytest.raises(RuntimeError, match="environment fault: step timed out after 5 s; "
                                               "the episode ended \\(incomplete\\)"):
            env.step({"message": "\\boxed{hang}"})   # the sandbox's deadline per call
        assert other.step({"message": "\\boxed{win}"}).reward == 1.0


def test_an_oversized_websocket_message_closes_only_that_socket(server):
    with _client(server) as env:
        env.reset(env_id="marker", seed=23)
        with pytest.raises(Exception):   # noqa: B017 (the socket closes: websockets' own error)
            env.step({"message": "x" * (2 << 20)})
    with _client(server) as env:
        assert env.reset(env_id="marker", seed=24).observation["turn"] == 0
    assert httpx.get(f"{server.url}/health").json()["status"] == "healthy"
