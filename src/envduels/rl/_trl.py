"""TRL's `GRPOTrainer` on EnvDuels environments: multi-turn rollouts in the sandbox, hinted rescue.

The hook is TRL's own `rollout_func` (`GRPOTrainer(rollout_func=...)`): TRL hands it the
step's prompts (each repeated `num_generations` times, one run of copies per group) and takes
back, per rollout, `prompt_ids`, `completion_ids`, `logprobs` and any extra fields, which it
forwards to the reward functions; an `env_mask` field marks the completion tokens the model
sampled (1) and those the environment wrote (0), and TRL leaves the 0s out of the loss.
`environment_factory`, TRL's other hook, exposes an environment's methods as tools and needs a
chat template with tool calling, which SmolLM2's lacks (docs/training.md).

Each dataset row names one (environment, seed): a group. `EpisodeRollouts` plays the group's
rollouts without the hint (`rl.play_episodes`), asks `HintedRescue` whether to re-roll it, plays
the hinted re-roll on the same seed when told, and returns the kept rollouts; the hint sits in
the prompt, which TRL never trains on. `RescueLog` writes the rescue's counters to
`rescue.jsonl`, one row per optimiser step. With a `Curriculum`, the rows are placeholders and
each group's (environment, seed) is drawn from the curriculum when the group is rolled out, so
that the draw can use what training found so far (`by="trainable"`).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from transformers import PreTrainedTokenizerBase, TrainerCallback

from envduels.rl._curriculum import Basis, Curriculum, panel_learnability, training_seeds
from envduels.rl._episodes import (
    EPISODE_WALL_S,
    EpisodeRequest,
    Rollout,
    TokenPolicy,
    hint_levels,
    play_episodes,
)
from envduels.rl._model import HFPolicy, load_model
from envduels.rl._rescue import HINT_1, NO_HINT, GroupKey, HintedRescue

if TYPE_CHECKING:
    from transformers import (
        PreTrainedModel,
        TrainerControl,
        TrainerState,
        TrainingArguments,
    )
    from trl import GRPOTrainer

    from envduels.envs import EnvSpec
    from envduels.sandbox import SandboxLimits

RESCUE_LOG = "rescue.jsonl"
MODEL_DIR = "model"


@dataclass(frozen=True)
class Task:
    """One dataset row: an environment and a seed (a GRPO group plays it `num_generations`
    times). `name` is the row's `prompt` text in TRL's dataset and logs."""

    spec: EnvSpec
    seed: int

    @property
    def key(self) -> GroupKey:
        return (self.spec.id, self.seed)

    @property
    def name(self) -> str:
        return f"{self.spec.id} seed {self.seed}"


def tasks_of(specs: Sequence[EnvSpec]) -> list[Task]:
    """One task per (environment, training seed): its benchmark seeds, or, without any, the
    run-independent seeds `envs.benchmark_seeds` derives for it (`training_seeds`)."""
    return [Task(spec, s) for spec in specs for s in training_seeds(spec.id, spec.benchmark_seeds)]


SelfHint = Callable[[Task, int, TokenPolicy], str]
"""Writes the hint a re-roll of a task shows at a hint level, with the policy in training."""

RolloutBatch = dict[str, list[list[int]] | list[float] | list[int] | None]
"""What `rollout_func` gives TRL for a step: per rollout, the fields TRL reads
(`prompt_ids`, `completion_ids`, `logprobs`, `env_mask`) and the extra ones it forwards to
the reward functions (`env_reward`, `hint_level`)."""


class EpisodeRollouts:
    """TRL's `rollout_func`: rolls out each group of the step in the sandbox, with the rescue.

    Groups of the step are played together (one batched generation per turn across all of
    them); a group whose (environment, seed) already appears earlier in the step is played in a
    later wave, so the rescue never confuses two groups of one key.

    Without a `curriculum`, each group's prompt is a task's `name`. With one, the prompts are
    placeholders and each group's task is drawn from `curriculum` with `rng` as it is rolled
    out; the curriculum then `observe`s every group the rescue closes. `rescue_enabled=False`
    never re-rolls (GRPO without the rescue: a baseline; the counters still count).
    `self_hint(task, level, policy)`, when given, writes the hint a re-roll shows (SAGE-style:
    the model's own, e.g. from the environment's oracle play) in place of the author's, for
    every environment, with or without an author's hint (docs/training.md).
    """

    def __init__(self, tasks: Sequence[Task], rescue: HintedRescue, *, max_turns: int | None,
                 max_new_tokens: int, temperature: float, limits: SandboxLimits | None = None,
                 unsafe_no_sandbox: bool = False, episode_wall_s: float = EPISODE_WALL_S,
                 curriculum: Curriculum | None = None,
                 rng: random.Random | None = None, rescue_enabled: bool = True,
                 self_hint: SelfHint | None = None) -> None:
        self.tasks = {t.name: t for t in tasks}
        if len(self.tasks) != len(tasks):
            raise ValueError("two tasks share a name: environment ids must be unique")
        self.by_key = {t.key: t for t in tasks}
        self.rescue = rescue
        self.max_turns = max_turns
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.limits = limits
        self.unsafe_no_sandbox = unsafe_no_sandbox
        self.episode_wall_s = episode_wall_s
        self.curriculum = curriculum
        self.rng = rng if rng is not None else random.Random(0)
        self.rescue_enabled = rescue_enabled
        self.self_hint = self_hint
        if curriculum is not None and (missing := set(curriculum.probabilities()) - set(self.by_key)):
            raise ValueError(f"the curriculum draws groups no task plays: {sorted(missing)[:3]}")

    def __call__(self, prompts: list[str], trainer: GRPOTrainer) -> RolloutBatch:
        size = trainer.num_generations
        tokenizer = trainer.processing_class
        if size is None or not isinstance(tokenizer, PreTrainedTokenizerBase):
            raise RuntimeError("rollout_func needs a GRPOTrainer with num_generations and a "
                               f"tokenizer as its processing_class (got {type(tokenizer)})")
        tasks = self.groups_of(prompts, size)
        model = trainer.accelerator.unwrap_model(trainer.model)
        policy = HFPolicy(model, tokenizer, max_new_tokens=self.max_new_tokens,
                          temperature=self.temperature)
        kept = self.roll_out(tasks, size, policy)
        rollouts = [r for group in kept for r in group]
        eos = policy.eos_id
        return {
            "prompt_ids": [r.prompt_ids for r in rollouts],
            # an episode whose environment failed on reset has no turn: one masked token
            "completion_ids": [r.completion_ids or [eos] for r in rollouts],
            "logprobs": None,
            "env_mask": [r.mask or [0] for r in rollouts],
            "env_reward": [r.reward for r in rollouts],
            "hint_level": [r.request.hint_level for r in rollouts],
        }

    def groups_of(self, prompts: Sequence[str], size: int) -> list[Task]:
        """The task of each group of the step's `prompts` (runs of `size` identical prompts):
        the task the prompt names, or, with a curriculum, one drawn from it."""
        groups = [prompts[i:i + size] for i in range(0, len(prompts), size)]
        for group in groups:
            if len(group) != size or any(p != group[0] for p in group):
                raise RuntimeError(f"rollout_func expects runs of {size} identical prompts; got {group!r}")
        if self.curriculum is None:
            return [self.tasks[group[0]] for group in groups]
        return [self.by_key[k] for k in self.curriculum.draw(len(groups), self.rng)]

    def roll_out(self, tasks: Sequence[Task], size: int, policy: TokenPolicy
                 ) -> list[list[Rollout]]:
        """The kept rollouts of each group (`size` each), after the rescue; in task order."""
        kept: list[list[Rollout]] = [[] for _ in tasks]
        closed_before = len(self.rescue.closed)
        for wave in _waves([t.key for t in tasks]):
            level = {i: NO_HINT for i in wave}
            while level:
                shown = {i: self._shown(tasks[i], lvl, policy) for i, lvl in level.items()}
                requests = [EpisodeRequest(shown[i], tasks[i].seed, lvl)
                            for i, lvl in level.items() for _ in range(size)]
                played = asyncio.run(self._play(requests, policy))
                again: dict[int, int] = {}
                for n, i in enumerate(level):
                    kept[i] = played[n * size:(n + 1) * size]
                    offered = self._offered(tasks[i]) if self.rescue_enabled else ()
                    nxt = self.rescue.decide(tasks[i].key, [r.reward for r in kept[i]],
                                             hint_levels=offered)
                    if nxt is not None:
                        again[i] = nxt
                level = again
        if self.curriculum is not None:
            self.curriculum.observe(self.rescue.closed[closed_before:])
        return kept

    def _offered(self, task: Task) -> tuple[int, ...]:
        """The hint levels a re-roll of `task` may use: the environment's, or level 1 for
        every environment when the hint is the model's own."""
        return (HINT_1,) if self.self_hint is not None else hint_levels(task.spec)

    def _shown(self, task: Task, level: int, policy: TokenPolicy) -> EnvSpec:
        """The spec a roll at `level` plays: the task's, or with a self-hint, the task's with
        the hint `self_hint` wrote in place of the author's."""
        if level == NO_HINT or self.self_hint is None:
            return task.spec
        return replace(task.spec, hints={"hint": self.self_hint(task, level, policy)})

    async def _play(self, requests: list[EpisodeRequest], policy: TokenPolicy
                    ) -> list[Rollout]:
        from envduels.sandbox import SandboxLimits, sandbox_pool

        limits = self.limits if self.limits is not None else SandboxLimits()
        async with sandbox_pool(limits, unsafe_no_sandbox=self.unsafe_no_sandbox, warm=0,
                                max_warm=len(requests)) as pool:
            pool.expect(len(requests))
            return await play_episodes(requests, policy, pool, max_turns=self.max_turns,
                                       episode_wall_s=self.episode_wall_s)


def _waves(keys: Sequence[GroupKey]) -> list[list[int]]:
    """Indices of `keys` split into waves in which no key repeats, first occurrences first."""
    waves: list[list[int]] = []
    seen: list[set[GroupKey]] = []
    for i, key in enumerate(keys):
        n = next((w for w, s in enumerate(seen) if key not in s), len(waves))
        if n == len(waves):
            waves.append([])
            seen.append(set())
        waves[n].append(i)
        seen[n].add(key)
    return waves


def env_reward(completions: list[object], env_reward: list[float], **_: object
               ) -> list[float | None]:
    """GRPO's reward: the episode's success (1.0) or not (0.0), as the rollout recorded it."""
    return [float(r) for r in env_reward]


class RescueLog(TrainerCallback):
    """Appends the rescue's counters of each optimiser step to `path` (one JSON row per step),
    with `environments`: how many of the step's groups each environment had (what a curriculum
    drew)."""

    def __init__(self, rescue: HintedRescue, path: Path) -> None:
        self.rescue = rescue
        self.path = path

    def on_step_end(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kwargs: object) -> None:
        played = Counter(record.key[0] for record in self.rescue.closed)
        row = {**self.rescue.end_step(state.global_step).to_json(),
               "environments": dict(sorted(played.items()))}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


@dataclass(frozen=True)
class TrainSettings:
    """What one GRPO training run on EnvDuels environments needs.

    `group`: rollouts per group (TRL's `num_generations`); `groups_per_step`: groups per
    optimiser step (default: one per environment); `max_turns` lowers each environment's own
    turn cap; `max_new_tokens` caps one reply; `escalate` turns on the graded `hint_2` re-roll;
    `episode_wall_s` is each rollout batch's wall budget on its environments (`play_episodes`:
    an episode still running when it is spent ends `incomplete`).
    `rescue=False` trains without the hinted rescue (a baseline). `curriculum` draws each group's
    (environment, seed) by the specs' panel learnability or by the share of each environment's
    groups that were trainable so far (`Curriculum`); None plays every (environment, seed) once
    per epoch in TRL's shuffled order.
    """

    specs: tuple[EnvSpec, ...]
    out: Path
    steps: int
    group: int
    max_turns: int | None = None
    model: str | None = None
    groups_per_step: int | None = None
    max_new_tokens: int = 64
    temperature: float = 1.0
    learning_rate: float = 1e-6
    escalate: bool = False
    seed: int = 0
    unsafe_no_sandbox: bool = False
    episode_wall_s: float = EPISODE_WALL_S
    rescue: bool = True
    curriculum: Basis | None = None


@dataclass
class Trained:
    """A finished training run: the trained `model` and its `tokenizer` (in memory), and the
    folder it was saved to (None when not saved)."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    model_dir: Path | None


def train(settings: TrainSettings, *, model: PreTrainedModel | None = None,
          tokenizer: PreTrainedTokenizerBase | None = None,
          save: bool = True) -> Trained:
    """Train with TRL's GRPOTrainer for `settings.steps` steps. `OUT/rescue.jsonl` gets one row
    of rescue counters per step (the file is started afresh); with `save`, the model goes to
    `OUT/model`. `model`/`tokenizer` default to `load_model(settings.model)`; a model passed in
    is trained in place."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    tasks = tasks_of(settings.specs)
    # before the model loads: a curriculum that cannot draw is the user's to fix at once
    curriculum = None if settings.curriculum is None else curriculum_of(tasks, settings.curriculum)
    if model is None or tokenizer is None:
        model, tokenizer = load_model(settings.model)
    out = settings.out
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / RESCUE_LOG
    log_path.write_text("", encoding="utf-8")
    per_step = settings.groups_per_step or len(settings.specs)
    rescue = HintedRescue(escalate=settings.escalate)
    rollouts = EpisodeRollouts(tasks, rescue, max_turns=settings.max_turns,
                               max_new_tokens=settings.max_new_tokens,
                               temperature=settings.temperature,
                               unsafe_no_sandbox=settings.unsafe_no_sandbox,
                               curriculum=curriculum, rng=random.Random(settings.seed),
                               rescue_enabled=settings.rescue,
                               episode_wall_s=settings.episode_wall_s)
    rows = ([{"prompt": t.name} for t in tasks] if curriculum is None else
            [{"prompt": f"curriculum draw {i}"} for i in range(settings.steps * per_step)])
    config = GRPOConfig(
        output_dir=str(out / "trainer"),
        max_steps=settings.steps,
        per_device_train_batch_size=per_step * settings.group,
        gradient_accumulation_steps=1,
        num_generations=settings.group,
        max_completion_length=settings.max_new_tokens,
        temperature=settings.temperature,
        learning_rate=settings.learning_rate,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=not _has_cuda(),
        bf16=False,
        seed=settings.seed,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=env_reward,
        args=config,
        train_dataset=Dataset.from_list(rows),
        rollout_func=rollouts,
        callbacks=[RescueLog(rescue, log_path)],
    )
    trainer.train()
    trained = trainer.accelerator.unwrap_model(trainer.model)
    if not save:
        return Trained(trained, tokenizer, None)
    model_dir = out / MODEL_DIR
    trainer.save_model(str(model_dir))
    tokenizer.save_pretrained(str(model_dir))
    return Trained(trained, tokenizer, model_dir)


def curriculum_of(tasks: Sequence[Task], by: Basis) -> Curriculum:
    """A curriculum over `tasks`' (environment, seed) groups; each environment's learnability is
    its spec's panel result (an export's `metadata.panel.learnability`)."""
    seeds: dict[str, list[int]] = {}
    learnability: dict[str, float | None] = {}
    for task in tasks:
        seeds.setdefault(task.spec.id, []).append(task.seed)
        learnability[task.spec.id] = panel_learnability(task.spec.metadata)
    return Curriculum(seeds, by=by, learnability=learnability)


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())
