"""The training episode loop in the real sandbox, with a scripted token policy (one token per
character), and the rescue driven through the TRL adapter's rollout logic."""

from __future__ import annotations

import asyncio
import time

import pytest

from envduels.engine.solving import FORMAT_ERROR, SYSTEM_PROMPT, first_turn, next_turn
from envduels.envs import EnvSpec
from envduels.rl import HintedRescue
from envduels.rl._episodes import EpisodeRequest, budget_reason, hint_levels, play_episodes
from envduels.sandbox import EnvPool, SandboxLimits

LOCK = '''
class Lock:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.n = 0
        return f"lock {seed}", {}

    def step(self, action):
        self.n += 1
        if action == "\\\\boxed{open}":
            return "opened", 1.0, True, False, {}
        if action == "\\\\boxed{crash}":
            raise RuntimeError("boom")
        return f"shut {self.n}", 0.0, False, False, {}
'''
SPEC = EnvSpec(id="lock", source=LOCK, max_turns=5, hints={"hint": "say open"},
               benchmark_seeds=(11, 12))
EOT = 0


class CharPolicy:
    """Tokens are characters (ord); a turn ends with token 0. Replies are scripted per
    episode (by the seed in the first observation) and per turn; hinted episodes answer from
    `hinted`."""

    def __init__(self, replies: dict[int, list[str]], hinted: dict[int, list[str]] | None = None):
        self.replies, self.hinted = replies, hinted or {}
        self.batches: list[int] = []

    @staticmethod
    def _enc(text: str) -> list[int]:
        return [ord(c) for c in text]

    def prompt_ids(self, messages):
        return self._enc("".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>")

    def turn_ids(self, messages, reply_ids):
        closing = [] if reply_ids[-1:] == [EOT] else [EOT]
        return closing + self._enc(f"<user>{messages[-1]['content']}<assistant>")

    def generate(self, contexts):
        self.batches.append(len(contexts))
        out = []
        for ctx in contexts:
            text = "".join(chr(t) if t else "|" for t in ctx)
            seed = int(text.split("lock ", 1)[1].split("\n", 1)[0].split("<", 1)[0])
            script = self.hinted if "Hint: " in text else self.replies
            turn = text.count("<assistant>") - 1
            out.append(self._enc(script[seed][turn]) + [EOT])
        return out

    def decode(self, ids):
        return "".join(chr(t) for t in ids if t != EOT)


def _play(requests, policy, max_turns=None, **options):
    async def go():
        async with EnvPool(warm=0, max_warm=len(requests)) as pool:
            return await play_episodes(requests, policy, pool, max_turns=max_turns, **options)
    return asyncio.run(go())


def test_an_episode_follows_the_duel_protocol_and_masks_the_environment_turns():
    policy = CharPolicy({11: ["no box", "\\boxed{shut}", "\\boxed{open}"]})
    (ro,) = _play([EpisodeRequest(SPEC, 11)], policy)
    assert (ro.outcome, ro.turns, ro.reward) == ("success", 3, 1.0)
    assert [m["role"] for m in ro.messages] == ["system", "user", "assistant", "user", "assistant",
                                                "user", "assistant"]
    assert ro.messages[0]["content"] == SYSTEM_PROMPT
    assert ro.messages[1]["content"] == first_turn("lock 11", hint=None)
    assert ro.messages[3]["content"] == FORMAT_ERROR
    assert ro.messages[5]["content"] == next_turn("shut 1")
    model = "".join(chr(t) for t, m in zip(ro.completion_ids, ro.mask, strict=True) if m)
    env = "".join(chr(t) for t, m in zip(ro.completion_ids, ro.mask, strict=True) if not m and t)
    assert model.replace("\x00", "") == "no box\\boxed{shut}\\boxed{open}"
    assert env == f"<user>{FORMAT_ERROR}<assistant><user>{next_turn('shut 1')}<assistant>"


def test_a_hinted_episode_has_the_hint_first_in_its_prompt_and_nowhere_in_an_unhinted_one():
    policy = CharPolicy({11: ["\\boxed{x}"] * 5}, hinted={11: ["\\boxed{open}"]})
    cold, hinted = _play([EpisodeRequest(SPEC, 11), EpisodeRequest(SPEC, 11, 1)], policy)
    assert hinted.messages[1]["content"] == first_turn("lock 11", hint="say open")
    assert hinted.messages[1]["content"].startswith("Hint: say open\n\n")
    assert "say open" not in "".join(chr(t) for t in cold.prompt_ids + cold.completion_ids)
    assert (cold.outcome, cold.reason) == ("failure", "turn cap 5 reached")
    assert hinted.outcome == "success"
    assert policy.batches[0] == 2   # both episodes in one batched generation


def test_the_turn_cap_lowers_the_environments_own_and_a_fault_is_incomplete_with_reward_0():
    policy = CharPolicy({11: ["\\boxed{x}"] * 5, 12: ["\\boxed{crash}"]})
    capped, faulted = _play([EpisodeRequest(SPEC, 11), EpisodeRequest(SPEC, 12)], policy,
                            max_turns=2)
    assert (capped.outcome, capped.turns, capped.reason) == ("failure", 2, "turn cap 2 reached")
    assert (faulted.outcome, faulted.reward) == ("incomplete", 0.0)
    assert "boom" in faulted.reason
    assert policy.batches == [2, 1]


SLOW = '''
import time

class Slow:
    def __init__(self, max_turns=30):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return f"lock {seed}", {}

    def step(self, action):
        time.sleep(0.8)                 # just under the 1.5 s step deadline, every turn
        return "still thinking", 0.0, False, False, {}
'''


def test_one_slow_environment_cannot_stretch_a_batch_past_its_wall_budget():
    slow_spec = EnvSpec(id="slow", source=SLOW, max_turns=30)
    policy = CharPolicy({11: ["\\boxed{open}"], 21: ["\\boxed{x}"] * 30})

    async def go():
        async with EnvPool(SandboxLimits(step_timeout_s=1.5), warm=0, max_warm=2) as pool:
            began = time.monotonic()
            played = await play_episodes([EpisodeRequest(SPEC, 11), EpisodeRequest(slow_spec, 21)],
                                         policy, pool, episode_wall_s=3.0)
            return played, time.monotonic() - began

    (fast, slow), elapsed = asyncio.run(go())
    # 30 turns of 0.8 s would hold the batch 24 s; the budget is 3 s (slack for a loaded host)
    assert elapsed < 10, elapsed
    assert (fast.outcome, fast.reward) == ("success", 1.0)
    assert (slow.outcome, slow.reward) == ("incomplete", 0.0)
    assert slow.reason == budget_reason(3.0) == (
        "harness limit: the per-episode wall budget (episode_wall_s=3 s of environment time) "
        "ran out")
    assert 1 <= slow.turns <= 4
    assert slow.transcript[-2] == {"role": "env", "action": "\\boxed{x}",
                                   "fault": budget_reason(3.0)}   # the step it cut short


def test_a_wall_budget_must_be_positive():
    with pytest.raises(ValueError, match="episode_wall_s must be above 0 seconds, got 0"):
        _play([EpisodeRequest(SPEC, 11)], CharPolicy({}), episode_wall_s=0)


def test_hint_levels_follow_the_environments_hints():
    assert hint_levels(SPEC) == (1,)
    assert hint_levels(EnvSpec(id="g", source="", hints={"hint_1": "a", "hint_2": "b"})) == (1, 2)
    assert hint_levels(EnvSpec(id="n", source="")) == ()


def test_the_adapter_re_rolls_an_all_failing_group_with_the_hint_and_keeps_a_mixed_one():
    pytest.importorskip("trl", reason="needs the train extra: pip install 'envduels[train]'")
    from envduels.rl.grpo import EpisodeRollouts, Task

    policy = CharPolicy({11: ["\\boxed{x}"] * 5, 12: ["\\boxed{open}"]},
                        hinted={11: ["\\boxed{open}"]})
    rescue = HintedRescue()
    rollouts = EpisodeRollouts([Task(SPEC, 11), Task(SPEC, 12)], rescue, max_turns=1,
                               max_new_tokens=8, temperature=1.0)
    kept = rollouts.roll_out([Task(SPEC, 11), Task(SPEC, 12)], 2, policy)
    assert [[r.request.hint_level for r in g] for g in kept] == [[1, 1], [0, 0]]
    assert [[r.reward for r in g] for g in kept] == [[1.0, 1.0], [1.0, 1.0]]
    c = rescue.end_step(1)
    assert (c.groups, c.hinted_group_fraction, c.rescued_group_fraction,
            c.rescued_trainable_group_fraction, c.no_hint_success_fraction) == (2, 0.5, 0.5, 0.0, 0.5)
    assert policy.batches == [4, 2]   # both groups cold in one batch, then the re-roll


def test_the_same_environment_and_seed_twice_in_a_step_are_played_in_separate_waves():
    pytest.importorskip("trl", reason="needs the train extra: pip install 'envduels[train]'")
    from envduels.rl.grpo import EpisodeRollouts, Task

    policy = CharPolicy({11: ["\\boxed{x}"]}, hinted={11: ["\\boxed{x}"]})
    rescue = HintedRescue()
    rollouts = EpisodeRollouts([Task(SPEC, 11)], rescue, max_turns=1, max_new_tokens=8,
                               temperature=1.0)
    kept = rollouts.roll_out([Task(SPEC, 11), Task(SPEC, 11)], 2, policy)
    assert [[r.request.hint_level for r in g] for g in kept] == [[1, 1], [1, 1]]
    assert [r.levels for r in rescue.closed] == [(0, 1), (0, 1)]
    assert rescue.end_step(1).exhausted_group_fraction == 1.0


def test_a_self_hint_replaces_the_author_s_and_rescues_an_environment_without_one():
    pytest.importorskip("trl", reason="needs the train extra: pip install 'envduels[train]'")
    from dataclasses import replace

    from envduels.rl.grpo import EpisodeRollouts, Task

    bare = replace(SPEC, hints={})   # no author's hint: the plain rescue keeps it unhinted
    policy = CharPolicy({11: ["\\boxed{x}"]}, hinted={11: ["\\boxed{open}"]})
    written = []

    def self_hint(task, level, pol):
        written.append((task.key, level, pol is policy))
        return "try the word open"

    rescue = HintedRescue()
    rollouts = EpisodeRollouts([Task(bare, 11)], rescue, max_turns=1, max_new_tokens=8,
                               temperature=1.0, self_hint=self_hint)
    kept = rollouts.roll_out([Task(bare, 11)], 2, policy)
    assert written == [(("lock", 11), 1, True)]   # one hint for the whole re-rolled group
    assert [r.reward for r in kept[0]] == [1.0, 1.0]
    assert kept[0][0].messages[1]["content"].startswith("Hint: try the word open\n\nObservation: lock 11")
    assert rescue.end_step(1).rescued_group_fraction == 1.0


@pytest.mark.slow
def test_smollm2_turn_tokens_are_exactly_the_chat_template_of_the_whole_conversation():
    pytest.importorskip("trl", reason="needs the train extra: pip install 'envduels[train]'")
    from transformers import AutoTokenizer

    from envduels.players._local import resolve_model_file
    from envduels.rl.grpo import HFPolicy

    gguf = resolve_model_file("smollm2-135m-instruct")
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    policy = HFPolicy(model=None, tokenizer=tok)
    messages = [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": first_turn("lock 11", hint="say open")}]
    ids = policy.prompt_ids(messages)
    for reply_text, ends in (("I say \\boxed{3}", True), ("cut off mid", False)):
        reply = tok(reply_text, add_special_tokens=False)["input_ids"] + ([policy.eos_id] if ends else [])
        messages += [{"role": "assistant", "content": policy.decode(reply)},
                     {"role": "user", "content": next_turn("shut 1")}]
        ids += reply + policy.turn_ids(messages, reply)
    whole = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert ids == tok(whole, add_special_tokens=False)["input_ids"]
