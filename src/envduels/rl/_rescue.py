"""The hinted rescue: a GRPO group that learned nothing is rolled out again with the hint.

GRPO normalises rewards within a group of rollouts of one prompt; a group whose rewards are all
equal has zero advantage and teaches nothing. On hard environments most groups of a weak policy
are all failures. The recipe of the EnvDuels paper's training code: start every group without
the hint; if *all* its rewards are 0, regenerate the whole group **once** with `hint_1`, on the
same environment and seed; keep every group afterwards (constant ones included: no refill, no
dynamic sampling). `HintedRescue(escalate=True)` adds one more re-roll with `hint_2` where the
environment has one (graded escalation; off by default, as in the paper). Not SAGE (arXiv
2602.03143), where the model writes itself a hint from a reference solution: the hint here is
the author's, the one the duel measured (docs/training.md).

The policy is pure and trainer-independent: a trainer rolls a group out, hands its rewards to
`decide`, and re-rolls at the level it returns until it returns None. Counters are per step.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field

GroupKey = tuple[str, int]
"""A GRPO group's identity: (environment id, seed). Every rollout of a group plays this pair."""

NO_HINT = 0
HINT_1 = 1
HINT_2 = 2


def is_success(reward: float) -> bool:
    """An episode's reward counts as a success when it is above 0 (SPEC §2: terminated with
    reward > 0; the rollout's reward is 1.0 for a success and 0.0 otherwise)."""
    return reward > 0


@dataclass(frozen=True)
class GroupRecord:
    """One closed group: what it played at each level, and which rollouts were kept.

    `levels` lists the hint levels rolled out, in order (always starting with 0, the unhinted
    roll); `rewards[i]` are the rewards of the roll at `levels[i]`. The kept rollouts are the
    last roll's: `kept_level`, `kept_rewards`.
    """

    key: GroupKey
    levels: tuple[int, ...]
    rewards: tuple[tuple[float, ...], ...]

    @property
    def kept_level(self) -> int:
        return self.levels[-1]

    @property
    def kept_rewards(self) -> tuple[float, ...]:
        return self.rewards[-1]

    @property
    def hinted(self) -> bool:
        """Re-rolled with a hint at least once."""
        return len(self.levels) > 1

    @property
    def constant(self) -> bool:
        """The kept rollouts all have the same reward: zero GRPO advantage."""
        kept = self.kept_rewards
        return all(math.isclose(r, kept[0]) for r in kept)

    @property
    def any_success(self) -> bool:
        return any(is_success(r) for r in self.kept_rewards)


@dataclass(frozen=True)
class RescueCounters:
    """One step's counters over the groups closed in that step (each fraction's denominator is
    `groups`, except `no_hint_success_fraction`'s; every fraction is None when its denominator
    is 0).

    - `no_hint_success_fraction`: unhinted rollouts with a success / all unhinted rollouts (every
      group's first roll, so this is the policy's cold pass rate on the step's prompts).
    - `hinted_group_fraction`: groups re-rolled with a hint at least once (their unhinted
      rollouts all had reward 0 and the environment has a hint).
    - `rescued_group_fraction`: hinted groups whose kept (last) roll has at least one success.
    - `rescued_trainable_group_fraction`: hinted groups whose kept roll is not constant (its
      rewards differ, so GRPO's advantage is not zero: the rescue made the group trainable).
    - `constant_group_fraction`: groups whose kept rollouts all have the same reward, hinted or
      not (all failures, or all successes): they contribute no policy gradient.
    - `exhausted_group_fraction`: hinted groups whose kept roll still has no success (the
      rescue tried every level it was allowed and failed; the group is kept anyway).

    Also `groups` (closed groups), `no_hint_rollouts` and `hinted_rollouts` (the rescue's cost).
    """

    step: int
    groups: int
    no_hint_rollouts: int
    hinted_rollouts: int
    no_hint_success_fraction: float | None
    hinted_group_fraction: float | None
    rescued_group_fraction: float | None
    rescued_trainable_group_fraction: float | None
    constant_group_fraction: float | None
    exhausted_group_fraction: float | None

    def to_json(self) -> dict[str, int | float | None]:
        return asdict(self)

    @classmethod
    def of(cls, step: int, records: Sequence[GroupRecord]) -> RescueCounters:
        """The counters of `records`, the groups closed in step `step`."""
        n = len(records)
        cold = [r for rec in records for r in rec.rewards[0]]
        hinted = [rec for rec in records if rec.hinted]

        def share(count: int, of: int) -> float | None:
            return count / of if of else None

        return cls(
            step=step,
            groups=n,
            no_hint_rollouts=len(cold),
            hinted_rollouts=sum(len(r) for rec in hinted for r in rec.rewards[1:]),
            no_hint_success_fraction=share(sum(is_success(r) for r in cold), len(cold)),
            hinted_group_fraction=share(len(hinted), n),
            rescued_group_fraction=share(sum(rec.any_success for rec in hinted), n),
            rescued_trainable_group_fraction=share(sum(not rec.constant for rec in hinted), n),
            constant_group_fraction=share(sum(rec.constant for rec in records), n),
            exhausted_group_fraction=share(sum(not rec.any_success for rec in hinted), n),
        )


@dataclass
class _Open:
    levels: list[int]
    rewards: list[tuple[float, ...]] = field(default_factory=list)


class HintedRescue:
    """Decides, group by group, whether to re-roll it with a hint; keeps the step's counters.

    Use per group: roll it out unhinted, then

        level = rescue.decide(key, rewards, hint_levels=levels_the_environment_has)
        while level is not None:
            rewards = roll_out(key, hint=level)
            level = rescue.decide(key, rewards, hint_levels=...)

    and once per optimiser step `rescue.end_step(step)` for the counters. Deterministic: the
    decision depends only on the rewards, the levels tried and `hint_levels`.
    """

    def __init__(self, *, escalate: bool = False) -> None:
        """`escalate`: after a `hint_1` re-roll that still has no success, re-roll once more
        with `hint_2` where the environment has one. Off by default (the paper never shows
        `hint_2` during training)."""
        self.escalate = escalate
        self._open: dict[GroupKey, _Open] = {}
        self._closed: list[GroupRecord] = []

    def decide(self, key: GroupKey, rewards: Sequence[float], *,
               hint_levels: Collection[int] = (HINT_1,)) -> int | None:
        """Record the rewards of `key`'s latest roll; return the hint level to re-roll the whole
        group with (1 or 2), or None: keep this roll and close the group.

        The first call for a key (or the first after it closed) is its unhinted roll.
        `hint_levels` are the levels the environment offers (`(1,)` for a plain hint, `(1, 2)`
        for a graded pair, `()` for none). Rules: an unhinted roll with no success is re-rolled
        at level 1 when offered; a level-1 roll with no success is re-rolled at level 2 only when
        `escalate` is on and level 2 is offered; everything else is kept.
        """
        if not rewards:
            raise ValueError(f"group {key} has no rollouts")
        group = self._open.setdefault(key, _Open(levels=[NO_HINT]))
        group.rewards.append(tuple(float(r) for r in rewards))
        level = group.levels[-1]
        if not any(is_success(r) for r in rewards):
            nxt = level + 1
            allowed = nxt == HINT_1 or (nxt == HINT_2 and self.escalate)
            if allowed and nxt in hint_levels:
                group.levels.append(nxt)
                return nxt
        del self._open[key]
        self._closed.append(GroupRecord(key, tuple(group.levels), tuple(group.rewards)))
        return None

    @property
    def closed(self) -> list[GroupRecord]:
        """The groups closed since the last `end_step`, in closing order."""
        return list(self._closed)

    def end_step(self, step: int) -> RescueCounters:
        """The counters of the groups closed since the last call; starts the next step. A group
        still waiting for its re-roll's rewards stays open into the next step."""
        counters = RescueCounters.of(step, self._closed)
        self._closed = []
        return counters
