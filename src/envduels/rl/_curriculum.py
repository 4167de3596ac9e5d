"""A curriculum: which (environment, seed) a trainer plays next, drawn by what the duel measured
or by what training has found so far.

GRPO learns nothing from a group whose rewards are all equal. OpenEnv's RFC 013 pilot measured
79.5% of GRPO groups with zero gradient under uniform task sampling, 71.5% with a
learnability-weighted curriculum. envduels exports each environment's panel `learnability`
(p(1 - p), p the panel's no-hint pass rate: the variance of a 0/1 reward, largest at p = 1/2),
and the hinted rescue records which groups it turned trainable. `Curriculum` draws from either:

- `by="learnability"`: environment e is drawn with probability learnability(e) / Σ learnability;
  an environment with learnability 0 is never drawn, one without a measured learnability (a
  library environment, a run without panel results) is left out and listed in `unmeasured`.
- `by="trainable"`: environment e is drawn with probability proportional to
  (t(e) + 1) / (g(e) + 2), where g(e) counts its groups closed so far and t(e) those whose kept
  rollouts were trainable (their rewards differ: a nonzero GRPO advantage, the rescue's re-rolls
  counted); `observe` feeds it the rescue's closed groups. The +1/+2 (Laplace's rule) starts
  every environment at 1/2 and never rules one out for an unlucky first group.

Within an environment the seed is drawn uniformly from its seeds (`training_seeds`: its
benchmark seeds, or seeds derived from its id when it has none, as the TRL adapter plays it). `probabilities()` states the
probability of every (environment, seed); `draw` draws from exactly those. Pure: the standard
library only; each call to `draw` uses the `random.Random` it is given.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from envduels.envs import benchmark_seeds
from envduels.errors import UserError
from envduels.rl._rescue import GroupKey, GroupRecord

if TYPE_CHECKING:
    from envduels.envs import EnvSpec

Basis = Literal["learnability", "trainable"]
BASES: tuple[Basis, ...] = ("learnability", "trainable")


def measured_learnability(value: object) -> float | None:
    """`value` as a learnability (a finite number in [0, 1]), or None: not measured. What an
    export or a server sends is untrusted; anything else counts as unmeasured."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and 0.0 <= value <= 1.0 else None


DERIVED_SEEDS = 4
"""Seeds an environment without benchmark seeds (a bare `.py` file) is trained on:
`envs.benchmark_seeds(0, id, DERIVED_SEEDS)`, run-independent."""


def training_seeds(env_id: str, seeds: Sequence[int]) -> tuple[int, ...]:
    """The seeds a trainer plays `env_id` on: its benchmark `seeds`, or, without any, the
    `DERIVED_SEEDS` seeds `envs.benchmark_seeds` derives for it with run seed 0."""
    return tuple(int(s) for s in seeds) or tuple(benchmark_seeds(0, env_id, DERIVED_SEEDS))


def panel_learnability(record: Mapping[str, object]) -> float | None:
    """`record["panel"]["learnability"]` (an export row's metadata, a `GET /environments`
    entry) as `measured_learnability` reads it; None without one."""
    panel = record.get("panel")
    return measured_learnability(panel.get("learnability")) if isinstance(panel, Mapping) else None


class Curriculum:
    """Draws (environment, seed) groups for a trainer; see the module docstring for the rules.

    `seeds` maps each environment id to its seeds (at least one each); `learnability` maps ids
    to their panel learnability (None: not measured), needed when `by="learnability"`.
    UserError (one line) when no environment can be drawn.
    """

    def __init__(self, seeds: Mapping[str, Sequence[int]], *, by: Basis = "learnability",
                 learnability: Mapping[str, float | None] | None = None) -> None:
        if by not in BASES:
            raise UserError(f"curriculum {by!r} is unknown; use one of: {', '.join(BASES)}")
        empty = [e for e, s in seeds.items() if not s]
        if not seeds or empty:
            raise UserError("a curriculum needs environments with seeds"
                            + (f"; {empty[0]} has none" if empty else ""))
        self.by: Basis = by
        self.seeds: dict[str, tuple[int, ...]] = {e: tuple(int(x) for x in s)
                                                  for e, s in seeds.items()}
        given = learnability or {}
        self.learnability = {e: measured_learnability(given.get(e)) for e in self.seeds}
        self.unmeasured = [e for e, v in self.learnability.items() if v is None]
        self._groups = dict.fromkeys(self.seeds, 0)
        self._trainable = dict.fromkeys(self.seeds, 0)
        if by == "learnability":
            if len(self.unmeasured) == len(self.seeds):
                raise UserError("no environment has a measured learnability (library "
                                "environments and runs without panel results have none); "
                                "use the curriculum 'trainable'")
            if not any(self.learnability.values()):
                raise UserError("every environment has learnability 0 (the panel solved all "
                                "or none of each): nothing there to learn from; use the "
                                "curriculum 'trainable' or other environments")

    @classmethod
    def from_specs(cls, specs: Iterable[EnvSpec], *, by: Basis = "learnability") -> Curriculum:
        """From environments as an export folder loads them (`envs.load_export`): their
        benchmark seeds, and the panel learnability `envduels export` writes in their metadata."""
        specs = list(specs)
        return cls({s.id: training_seeds(s.id, s.benchmark_seeds) for s in specs}, by=by,
                   learnability={s.id: panel_learnability(s.metadata) for s in specs})

    @classmethod
    def from_listing(cls, environments: Iterable[Mapping[str, object]], *,
                     by: Basis = "learnability") -> Curriculum:
        """From `GET /environments` of `envduels serve` (its `environments` list: `id`,
        `benchmark_seeds`, `panel`), so that any trainer that reads it draws the same way.
        UserError (one line) for an entry without an id or seeds."""
        seeds: dict[str, Sequence[int]] = {}
        learn: dict[str, float | None] = {}
        for n, entry in enumerate(environments):
            env_id, env_seeds = entry.get("id"), entry.get("benchmark_seeds")
            if not isinstance(env_id, str) or not isinstance(env_seeds, list) or not all(
                    isinstance(s, int) and not isinstance(s, bool) for s in env_seeds):
                raise UserError(f"environment {n} of the listing has no id or no list of integer "
                                "benchmark_seeds; pass GET /environments' `environments` list")
            seeds[env_id] = training_seeds(env_id, env_seeds)
            learn[env_id] = panel_learnability(entry)
        return cls(seeds, by=by, learnability=learn)

    def weights(self) -> dict[str, float]:
        """Each environment's probability of being drawn (they sum to 1; 0 for one never
        drawn)."""
        if self.by == "learnability":
            raw = {e: v or 0.0 for e, v in self.learnability.items()}
        else:
            raw = {e: (self._trainable[e] + 1) / (self._groups[e] + 2) for e in self.seeds}
        total = math.fsum(raw.values())
        return {e: w / total for e, w in raw.items()}

    def probabilities(self) -> dict[GroupKey, float]:
        """The probability of drawing each (environment, seed): its environment's weight shared
        equally by its seeds."""
        return {(e, s): w / len(self.seeds[e]) for e, w in self.weights().items()
                for s in self.seeds[e]}

    def draw(self, n: int, rng: random.Random) -> list[GroupKey]:
        """`n` (environment, seed) groups drawn independently with `probabilities()`."""
        drawable = [(k, p) for k, p in self.probabilities().items() if p > 0]
        keys, probs = zip(*drawable, strict=True)
        return list(rng.choices(keys, weights=probs, k=n))

    def observe(self, records: Iterable[GroupRecord]) -> None:
        """Count closed groups (`HintedRescue`'s records) for `by="trainable"`; a group of an
        environment this curriculum does not hold is ignored."""
        for record in records:
            env_id = record.key[0]
            if env_id in self._groups:
                self._groups[env_id] += 1
                self._trainable[env_id] += not record.constant
