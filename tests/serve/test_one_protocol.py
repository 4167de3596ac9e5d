"""One protocol (issue 21, issue 23): the engine, `envduels play`, the Gym adapter,
`envduels serve` and the training rollout (`envduels.rl`) give identical transcripts for the
same environment, seed, condition and replies, because all five drive
`envduels.duel.protocol.Episode`; and for the same fault (issue 31) the same outcome and reason,
because all five ask `envduels.duel.faults` what it means."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from envduels.duel.outcomes import Outcome
from envduels.engine.commands import play_command
from envduels.engine.play import _printer
from envduels.engine.solving import EpisodeTask, play_episode
from envduels.envs import EnvSpec, library_env
from envduels.gym import make
from envduels.sandbox import EnvPool, SandboxLimits, SandboxStartError
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


# -- faults (issue 31): what a failure means for an episode is `duel.faults`' alone, so every
# driver ends the same failure with the same outcome and reason, in the same transcript ----------

FAULTY = Path(__file__).parent / "fixtures" / "faulty.py"
HOST_LIMITS = SandboxLimits(frame_max_bytes=8)
"""No worker can start under these: its greeting is longer than the protocol's cap (a host-side
setting, so a failure the host owns: `SandboxStartError`, an `error` by the vocabulary)."""
FAULTS = {   # scenario: (seed, replies, limits, the outcome and reason every driver records)
    "the reset raises": (13, ["\\boxed{win}"], SandboxLimits(), Outcome.INCOMPLETE,
                         "environment failed to start: reset raised ValueError: no such seed"),
    "a step raises": (2, ["\\boxed{wait}", "no box here", "\\boxed{crash}"], SandboxLimits(),
                      Outcome.INCOMPLETE,
                      "environment fault: step raised ZeroDivisionError: crashed on purpose"),
    "no sandbox can start": (2, ["\\boxed{win}"], HOST_LIMITS, Outcome.ERROR,
                             "sandbox error: the sandbox failed to start: protocol violation"),
}


def _faulty() -> EnvSpec:
    return EnvSpec(id="faulty", source=FAULTY.read_text(), class_name="FaultyEnv", max_turns=4)


class Replies:
    """A solver answering `replies` in order (the engine's and `play`'s player)."""

    def __init__(self, replies: list[str]) -> None:
        self.replies, self.turn = replies, 0

    async def chat(self, messages, *, call_id, role, max_tokens=None):
        from envduels.players import ChatResult, Usage

        self.turn += 1
        return ChatResult(text=self.replies[self.turn - 1], finish_reason="stop",
                          usage=Usage(calls=1, input_tokens=1, output_tokens=1))


def _engine_fault(seed, replies, limits) -> tuple[str, str, list[dict]]:
    spec = _faulty()

    async def main():
        task = EpisodeTask(key="k", env=spec, solver="s", seed=seed, trial=0, hinted=False,
                           max_turns=spec.max_turns)
        async with EnvPool(limits, warm=0) as pool:
            return await play_episode(task, Replies(replies), lambda: pool.open(
                spec.source, class_name=spec.class_name, max_turns=spec.max_turns))
    result = asyncio.run(main())
    return result.outcome, result.reason, _without_usage(result.transcript)


def _gym_fault(seed, replies, limits) -> tuple[str, str, list[dict]]:
    env = make(_faulty(), limits=limits)
    try:
        try:
            env.reset(seed=seed)
        except RuntimeError as err:   # a reset that fails raises, with the episode's reason
            assert str(err) == f"environment faulty failed on reset: {_fault(env.transcript)}"
        else:
            for reply in replies:
                *_, terminated, truncated, _info = env.step(reply)
                if terminated or truncated:
                    break
        last = env.transcript[-1]
        return last["outcome"], last["content"].split(": ", 1)[1], env.transcript
    finally:
        env.close()


def _fault(transcript: list[dict]) -> str:
    """The fault a failed start or step reported: the reason after its wording."""
    return transcript[-1]["content"].split(": ", 2)[2]


def _rollout_fault(seed, replies, limits) -> tuple[str, str, list[dict]]:
    from envduels.rl._episodes import EpisodeRequest, play_episodes

    class Tokens(ScriptedTokens):
        def generate(self, contexts):
            self.turn += 1
            return [[ord(c) for c in replies[self.turn - 1]] + [0] for _ in contexts]

    async def main():
        async with EnvPool(limits, warm=0) as pool:
            return await play_episodes([EpisodeRequest(_faulty(), seed, 0)], Tokens(), pool)
    (rollout,) = asyncio.run(main())
    return rollout.outcome, rollout.reason, rollout.transcript


def _served_fault(url: str, seed: int, replies: list[str], env_id: str):
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=url).sync() as env:
        try:
            env.reset(env_id=env_id, seed=seed)
            for reply in replies:
                if env.step({"message": reply}).done:
                    break
        except Exception as err:   # the client hears it: an ended episode, or no sandbox
            assert "the episode ended" in str(err) or "no sandbox could start" in str(err)
        state = env.state()
        return state["outcome"], state["reason"], state["transcript"]


@pytest.fixture(scope="module")
def faulty_server() -> Iterator[str]:
    """`envduels serve`'s app, in this process on 127.0.0.1, serving the faulty environment
    twice: as any catalog serves it, and under limits no worker can start with."""
    pytest.importorskip("openenv.core.generic_client",
                        reason="the serve extra is not installed: pip install 'envduels[serve]'")
    import threading

    import uvicorn

    from envduels.serve._app import build_app
    from envduels.serve._catalog import Served
    from envduels.view.commands import bind, url_of

    spec = _faulty()
    served = {"faulty": Served(spec, SandboxLimits(), spec.max_turns, None),
              "faulty-host": Served(dataclasses.replace(spec, id="faulty-host"), HOST_LIMITS,
                                    spec.max_turns, None)}
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(build_app(served, max_sessions=4,
                                                     allowed_hosts=["127.0.0.1"]),
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield url_of(sock).rstrip("/")
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()


@pytest.fixture(scope="module", params=list(FAULTS))
def fault(request) -> tuple[str, list[dict]]:
    name = request.param
    seed, replies, limits, outcome, reason = FAULTS[name]
    got_outcome, got_reason, transcript = _engine_fault(seed, replies, limits)
    assert (got_outcome, got_reason.startswith(reason)) == (outcome, True), got_reason
    return name, transcript


def test_a_fault_ends_the_gym_episode_as_it_ends_the_engine_s(fault):
    name, transcript = fault
    seed, replies, limits, outcome, _ = FAULTS[name]
    assert _gym_fault(seed, replies, limits) == (outcome, transcript[-1]["content"].split(
        ": ", 1)[1], transcript)


def test_a_fault_ends_the_served_episode_as_it_ends_the_engine_s(fault, faulty_server):
    name, transcript = fault
    seed, replies, limits, outcome, _ = FAULTS[name]
    env_id = "faulty-host" if limits is HOST_LIMITS else "faulty"
    assert _served_fault(faulty_server, seed, replies, env_id) == (
        outcome, transcript[-1]["content"].split(": ", 1)[1], transcript)


def test_a_fault_ends_the_rollout_as_it_ends_the_engine_s_and_the_host_s_ends_the_batch(fault):
    name, transcript = fault
    seed, replies, limits, outcome, _ = FAULTS[name]
    if outcome is Outcome.ERROR:   # no reward of the batch would be honest: it raises
        with pytest.raises(SandboxStartError, match="protocol violation"):
            _rollout_fault(seed, replies, limits)
        return
    assert _rollout_fault(seed, replies, limits) == (
        outcome, transcript[-1]["content"].split(": ", 1)[1], transcript)


@pytest.fixture(scope="module", params=[n for n, f in FAULTS.items() if f[2] is not HOST_LIMITS])
def environment_fault(request) -> tuple[str, list[dict]]:
    """A fault of the environment itself (a run config reaches no host fault: `play` takes
    its limits from one)."""
    seed, replies, limits, _, _ = FAULTS[request.param]
    return request.param, _engine_fault(seed, replies, limits)[2]


def test_a_fault_prints_in_play_as_the_engine_records_it(environment_fault, tmp_path,
                                                          monkeypatch, capsys):
    name, transcript = environment_fault
    seed, replies, _, _, _ = FAULTS[name]
    monkeypatch.setenv("ENVDUELS_TEST_KEY", KEY)
    with ScriptedServer(lambda model, messages: replies[sum(
            m["role"] == "assistant" for m in messages)], api_key=KEY) as llm:
        config = tmp_path / "play.yaml"
        config.write_text(yaml.safe_dump({"name": "faults", "players": [
            {"name": "s", "provider": "openai", "model": "m-s", "roles": ["solver"],
             "base_url": llm.base_url, "api_key_env": "ENVDUELS_TEST_KEY", "max_retries": 0}],
            "tournament": {"environments": [str(FAULTY)], "max_turns": 24}}))
        capsys.readouterr()
        assert play_command(str(FAULTY), config=config, player="s", human=False, hint=False,
                            seed=seed, unsafe_no_sandbox=False) == 1
        assert capsys.readouterr().out == _printed(transcript)
