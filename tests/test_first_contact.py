"""Issue 15's small defects: key masking with short keys, the Gymnasium action space, wording."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from envduels._text import plural, printable
from envduels.config import PlayerConfig
from envduels.errors import UserError
from envduels.players import ProviderError, RetryPolicy, build_player
from envduels.testing import ScriptedServer

FAST = RetryPolicy(base_s=0.01, max_backoff_s=0.05, max_retry_after_s=5.0)
REALISTIC_KEY = "sk-proj-Q2x9Vb7KdL0mZt4Rw8Ny3PcHs6Fj1Ae5"


def _player(monkeypatch, key: str, **overrides):
    monkeypatch.setenv("FIRST_CONTACT_KEY", key)
    values = {"name": "llama3.1-8b", "provider": "openai", "model": "m",
              "base_url": "http://127.0.0.1:9/v1", "api_key_env": "FIRST_CONTACT_KEY",
              **overrides}
    return build_player(PlayerConfig(**values))


@pytest.mark.parametrize("key", ["x", "y", "a", "1", "-", "llama"])
def test_a_one_character_key_does_not_cut_up_the_words_around_it(monkeypatch, key):
    player = _player(monkeypatch, key)
    message = "player 'llama3.1-8b': cannot reach http://127.0.0.1:9/v1 (Connection refused)"
    assert player.scrub(message) == message
    assert player.scrub(f"denied for Bearer {key}") == "denied for Bearer ***"
    assert player.scrub(f"key={key}, retry") == "key=***, retry"


def test_a_realistic_key_is_masked_wherever_it_stands_as_a_token(monkeypatch):
    player = _player(monkeypatch, REALISTIC_KEY)
    text = (f"401: Incorrect API key provided: {REALISTIC_KEY}. "
            f'{{"authorization": "Bearer {REALISTIC_KEY}"}} (x-api-key:{REALISTIC_KEY})')
    scrubbed = player.scrub(text)
    assert REALISTIC_KEY not in scrubbed
    assert scrubbed.count("***") == 3
    assert scrubbed.startswith("401: Incorrect API key provided: ***. ")


def test_a_missing_key_message_says_what_the_key_is_for(monkeypatch):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    with pytest.raises(UserError) as err:
        build_player(PlayerConfig(name="llama", provider="openai", model="m",
                                  base_url="http://127.0.0.1:8000/v1", api_key_env="VLLM_API_KEY"))
    assert ("set VLLM_API_KEY to the API key of this player's server http://127.0.0.1:8000/v1"
            in err.value.message)
    assert "openai API key" not in err.value.message
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UserError, match="set OPENAI_API_KEY to your OpenAI API key"):
        build_player(PlayerConfig(name="gpt", provider="openai", model="m"))


def test_a_player_that_keeps_failing_says_after_1_retry(monkeypatch):
    async def ask(base_url: str) -> str:
        player = build_player(PlayerConfig(name="p", provider="openai", model="m",
                                           base_url=base_url, max_retries=1), retry_policy=FAST)
        try:
            await player.chat([{"role": "user", "content": "hi"}], call_id="c", role="solver")
        except ProviderError as err:
            return str(err)
        finally:
            await player.aclose()
        return "no error"

    with ScriptedServer(faults=["500", "500"]) as server:
        message = asyncio.run(ask(server.base_url))
    assert message.endswith("still failing after 1 retry"), message


def test_plural_agrees_in_number():
    assert [plural(n, "seed") for n in (0, 1, 2)] == ["0 seeds", "1 seed", "2 seeds"]
    assert plural(1, "retry", "retries") == "1 retry" and plural(3, "retry", "retries") == "3 retries"
    assert plural(1200, "environment") == "1,200 environments"


def test_validate_says_1_seed(tmp_path):
    env = Path(__file__).parent / "fixtures" / "envs"
    source = next(p for p in sorted(env.glob("*.py")))
    script = Path(sys.executable).parent / "envduels"
    import subprocess

    import envduels

    r = subprocess.run([str(script), "validate", str(source), "--seeds", "1"], text=True,
                       capture_output=True, timeout=120,
                       env={**os.environ,
                            "PYTHONPATH": str(Path(envduels.__file__).resolve().parents[1])})
    assert "1 seed," in r.stdout and "1 seeds" not in r.stdout, r.stdout + r.stderr


def test_printable_removes_bidi_overrides_and_zero_width_characters():
    assert printable("evil\u202etxt.exe") == "eviltxt.exe"
    assert printable("a\u200bb\u200dc\u2066d\u2069e\ufeff") == "abcde"
    assert printable("déjà vu 🎲 — Ω") == "déjà vu 🎲 — Ω"


def test_the_gym_action_space_holds_any_unicode_reply_the_engine_accepts():
    from envduels._text import ACTION_SEARCH_MAX_CHARS
    from envduels.envs import library_env
    from envduels.gym import EnvDuelsGymEnv

    env = EnvDuelsGymEnv(library_env("subtraction_game"))
    space = env.action_space
    assert space.contains("I think — the answer is \\boxed{1}")
    assert space.contains("答えは \\boxed{3} です 🎲\n")
    assert space.contains("x" * ACTION_SEARCH_MAX_CHARS)
    assert not space.contains("x" * (ACTION_SEARCH_MAX_CHARS + 1))
    assert not space.contains(b"\\boxed{1}")
    assert space.contains(space.sample())
