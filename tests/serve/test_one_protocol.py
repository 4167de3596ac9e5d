"""One protocol (issue 21, issue 23): the engine, `envduels play`, the Gym adapter,
`envduels serve` and the training rollout (`envduels.rl`) give identical transcripts for the
same environment, seed, condition and replies, because all five drive
`envduels.duel.protocol.Episode`."""

from __future__ import annotations

import asyncio
import io

import pytest
import yaml
from rich.console import Console

from envduels.engine.play import _printer, play_command
from envduels.engine.solving import EpisodeTask, play_episode
from envduels.envs import library_env
from envduels.gym import make
from envduels.sandbox import EnvPool
from envduels.testing import ScriptedServer

ENV, SEED, KEY = "number_guess", 3, "sk-protocol"
# a missing box, a box that is not a number, a wrong guess, two boxes (the last counts), a win
# (seed 3's number is 152)
REPLIES = ["Let me think about the range first.", "\\boxed{two hundred}",
           "I go high: \\boxed{150}", "maybe \\boxed{25} or \\boxed{160}", "\\boxed{155}",
           "so it is \\boxed{152}"]



class Scripted:
    """A solver that answers REPLIES in order, as a player would."""

    def __init__(self) -> None:
        self.turn = 0

    async def chat(self, messages, *, call_id, role, max_tokens=None):
        from envduels.players import ChatResult, Usage

        text = REPLIES[self.turn]
        self.turn += 1
        return ChatResult(text=text, finish_reason="stop",
                          usage=Usage(calls=1, input_tokens=1, output_tokens=1))


def _without_usage(transcript: list[dict]) -> list[dict]:
    """The episode's transcript without what the player billed (the engine's own bookkeeping)."""
    return [{k: v for k, v in e.items() if k not in ("input_tokens", "output_tokens")}
            for e in transcript]


def _engine(hinted: bool) -> list[dict]:
    spec = library_env(ENV)

    async def main():
        task = EpisodeTask(key="k", env=spec, solver="s", seed=SEED, trial=0, hinted=hinted,
                           max_turns=spec.max_turns)
        async with EnvPool(warm=0) as pool:
            return await play_episode(task, Scripted(), lambda: pool.open(
                spec.source, class_name=spec.class_name, max_turns=spec.max_turns))
    return _without_usage(asyncio.run(main()).transcript)


class ScriptedTokens:
    """A token policy (one token per character, 0 ends a turn) that samples REPLIES in order,
    as the training loop's model would."""

    def __init__(self) -> None:
        self.turn = 0

    def prompt_ids(self, messages):
        return [ord(c) for c in "".join(m["content"] for m in messages)]

    def turn_ids(self, messages, reply_ids):
        return [ord(c) for c in messages[-1]["content"]]

    def generate(self, contexts):
        (context,) = contexts
        reply = REPLIES[self.turn]
        self.turn += 1
        return [[ord(c) for c in reply] + [0]]

    def decode(self, ids):
        return "".join(chr(t) for t in ids if t)


def _rollout(hinted: bool) -> list[dict]:
    from envduels.rl._episodes import EpisodeRequest, play_episodes

    async def main():
        async with EnvPool(warm=0) as pool:
            return await play_episodes([EpisodeRequest(library_env(ENV), SEED, int(hinted))],
                                       ScriptedTokens(), pool)
    (rollout,) = asyncio.run(main())
    return rollout.transcript


def _gym(hinted: bool) -> list[dict]:
    env = make(ENV, hint_in_first_observation=hinted)
    try:
        env.reset(seed=SEED)
        for reply in REPLIES:
            *_, terminated, truncated, _info = env.step(reply)
            if terminated or truncated:
                break
        return env.transcript
    finally:
        env.close()


def _served(url: str, hinted: bool) -> list[dict]:
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=url).sync() as env:
        env.reset(env_id=ENV, seed=SEED, hint=int(hinted))
        for reply in REPLIES:
            if env.step({"message": reply}).done:
                break
        return env.state()["transcript"]


def _play_output(tmp_path, monkeypatch, capsys, hinted: bool) -> str:
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)

    def respond(model, messages):
        return REPLIES[sum(m["role"] == "assistant" for m in messages)]

    with ScriptedServer(respond, api_key=KEY) as llm:
        config = tmp_path / "play.yaml"
        config.write_text(yaml.safe_dump({"name": "protocol", "players": [
            {"name": "s", "provider": "openai", "model": "m-s", "roles": ["solver"],
             "base_url": llm.base_url, "api_key_env": "ENVDUELS_TEST_KEY", "max_retries": 0,
             "temperature": 0.0}], "tournament": {"environments": [ENV], "max_turns": 24}}))
        capsys.readouterr()
        play_command(ENV, config=config, player="s", human=False, hint=hinted, seed=SEED,
                     unsafe_no_sandbox=False)
        return capsys.readouterr().out


def _printed(transcript: list[dict]) -> str:
    """A transcript as `envduels play` prints it."""
    out = io.StringIO()
    show = _printer(Console(file=out, highlight=False, emoji=False, markup=False))
    for entry in transcript:
        show(entry)
    return out.getvalue()



@pytest.fixture(scope="module", params=[False, True], ids=["unhinted", "hinted"])
def engine(request) -> tuple[bool, list[dict]]:
    hinted = request.param
    transcript = _engine(hinted)
    assert [e["role"] for e in transcript[:2]] == ["system", "user"]
    assert transcript[1]["content"].startswith("Hint: " if hinted else "Observation: ")
    assert any(e.get("format_error") for e in transcript)
    assert transcript[-1] == {"role": "outcome", "content": "success: terminated with reward 1",
                              "outcome": "success"}
    return hinted, transcript


def test_engine_play_and_gym_transcripts_are_identical(engine, tmp_path, monkeypatch, capsys):
    hinted, transcript = engine
    assert _gym(hinted) == transcript
    assert _play_output(tmp_path, monkeypatch, capsys, hinted) == _printed(transcript)


def test_the_training_rollout_s_transcript_is_the_engine_s(engine):
    hinted, transcript = engine
    assert _rollout(hinted) == transcript


def test_the_server_s_transcript_is_the_engine_s(engine, request):
    pytest.importorskip("openenv.core.generic_client",
                        reason="the serve extra is not installed: pip install 'envduels[serve]'")
    hinted, transcript = engine
    server = request.getfixturevalue("server")
    assert _served(server.url, hinted) == transcript
