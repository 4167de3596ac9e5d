"""The Gymnasium adapter: real sandboxed environments behind gymnasium's own checker."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from envduels.envs import EnvSpec, library_names
from envduels.gym import EnvDuelsGymEnv, make, register_library

FIXTURES = Path(__file__).parent / "fixtures"
HINT = "Binary search halves the range."


def _guess(**kw) -> EnvDuelsGymEnv:
    spec = EnvSpec(id="guess", source=(FIXTURES / "guess_env.py").read_text(), max_turns=8,
                   hints={"hint": HINT}, benchmark_seeds=(5, 6))
    return EnvDuelsGymEnv(spec, **kw)


@pytest.fixture(scope="module")
def library_ids() -> list[str]:
    return register_library()


def _check(env: gymnasium.Env) -> list[str]:
    """Run check_env; return gymnasium's warnings other than the render-mode notice."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    return [str(w.message) for w in caught if "render" not in str(w.message)]


@pytest.mark.parametrize("name", library_names())
def test_check_env_passes_on_every_library_environment(name, library_ids):
    gid = next(g for g in library_ids if g.startswith(f"envduels/{name}-"))
    env = gymnasium.make(gid)
    try:
        assert _check(env.unwrapped) == []
    finally:
        env.close()


@pytest.mark.parametrize("name", library_names())
def test_library_environments_answer_raw_random_text_actions(name):
    env = make(name, parse_reply=False)
    try:
        assert _check(env) == []
        env.reset(seed=1)
        env.action_space.seed(0)
        for _ in range(3):
            obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
            assert isinstance(obs, str) and info["envduels"]["fault"] is None
            if terminated or truncated:
                break
    finally:
        env.close()


def test_reset_is_reproducible_and_reports_the_benchmark_seeds():
    env = _guess()
    try:
        obs, info = env.reset(seed=123)
        assert info["envduels"] == {"env_id": "guess", "seed": 123, "hinted": False,
                                    "benchmark_seeds": [5, 6]}
        assert env.metadata["benchmark_seeds"] == [5, 6]
        _, info = env.reset(options={"benchmark_index": 1})
        assert info["envduels"]["seed"] == 6
        env.reset(seed=9)
        _, a = env.reset()
        env.reset(seed=9)
        _, b = env.reset()
        assert a["envduels"]["seed"] == b["envduels"]["seed"]
    finally:
        env.close()


def test_hint_in_first_observation_prepends_the_hint_only_when_asked():
    env = _guess(hint_in_first_observation=True)
    try:
        hinted, info = env.reset(seed=1)
        assert hinted.startswith(f"Hint: {HINT}\n\n") and info["envduels"]["hinted"] is True
        plain, info = env.reset(seed=1, options={"hint": False})
        assert HINT not in plain and info["envduels"]["hinted"] is False
        assert hinted == f"Hint: {HINT}\n\n{plain}"
        obs, *_ = env.step("\\boxed{50}")
        assert HINT not in obs
    finally:
        env.close()


def test_a_binary_search_policy_wins_with_reward_and_success():
    env = _guess()
    try:
        env.reset(seed=42)
        lo, hi = 1, 100
        for _ in range(8):
            guess = (lo + hi) // 2
            obs, reward, terminated, truncated, info = env.step(f"My guess: \\boxed{{{guess}}}")
            if terminated:
                break
            lo, hi = (guess + 1, hi) if "higher" in obs else (lo, guess - 1)
        assert (reward, terminated, truncated) == (1.0, True, False)
        assert info["envduels"]["success"] is True
        with pytest.raises(gymnasium.error.ResetNeeded):
            env.step("\\boxed{1}")
    finally:
        env.close()


def test_a_reply_without_boxed_costs_the_turn_and_the_cap_truncates():
    env = _guess(max_turns=2)
    try:
        env.reset(seed=1)
        obs, reward, terminated, truncated, info = env.step("fifty")
        assert obs == "Invalid action format. Use \\boxed{ACTION}."
        assert (reward, terminated, truncated) == (0.0, False, False)
        assert info["envduels"]["format_error"] is True
        *_, terminated, truncated, _ = env.step("\\boxed{1}")
        assert (terminated, truncated) == (False, True)
    finally:
        env.close()


def test_an_environment_fault_ends_the_episode_and_the_next_reset_starts_afresh():
    spec = EnvSpec(id="crash", source=(FIXTURES / "crash_on_step.py").read_text(), max_turns=5)
    env = EnvDuelsGymEnv(spec)
    try:
        env.reset(seed=1)
        obs, reward, terminated, truncated, info = env.step("\\boxed{x}")
        assert obs.startswith("Environment error:") and "boom" in info["envduels"]["fault"]
        assert (reward, terminated, truncated) == (0.0, False, True)
        obs, _ = env.reset(seed=2)
        assert obs == "seed 2"
    finally:
        env.close()


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().split(")")[-1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_close_kills_the_worker_and_may_be_called_twice():
    env = _guess()
    env.reset(seed=1)
    pid = env._instance.pid
    assert os.path.exists(f"/proc/{pid}")
    env.close()
    env.close()
    assert _gone(pid)


def test_each_reset_uses_a_fresh_worker():
    env = _guess()
    try:
        env.reset(seed=1)
        first = env._instance.pid
        env.reset(seed=1)
        assert env._instance.pid != first
        assert _gone(first)
    finally:
        env.close()
