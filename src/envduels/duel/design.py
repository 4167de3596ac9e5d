"""The work a tournament design implies: its authoring jobs and its episodes, and their counts.

One `Design` answers every question about how much a run does, so the scheduler (which
enumerates the work), `envduels estimate` and `envduels plan` (which bill it), `status` and the
viewer (which count what is left) and the run's checks (which know the ids authors write) can
never disagree:

- authoring: every player that authors writes `envs_per_author` environments per round, one
  `AuthoringSlot` each, under the id `authored_env_id(author, round, slot)`;
- solving: every player that solves plays every valid environment (not its own when
  `self_play` is off) on each of its benchmark seeds, `trials_per_seed` times, in both
  conditions: one `PairSlot` is the matched pair of a (solver, seed, trial), two episodes;
- an environment not written yet counts as if valid with `seeds_per_env` seeds (an upper bound
  until it is authored); a fixed-pool environment belongs to round 1.

Standard library only (it is the bottom layer): a `Design` is built from plain values, or from
anything shaped like a run config (`Design.of(cfg)`: `config.RunConfig` is one, matched by its
attribute names, never imported).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from envduels.duel.protocol import turn_cap

LIBRARY_AUTHOR = "library"
"""The author a fixed-pool environment that names none is recorded under."""


def authored_env_id(author: str, round_: int, slot: int) -> str:
    """Id of the environment `author` writes in `round_`, `slot` (unique within a run)."""
    return f"r{round_}-{author}-{slot}"


# -- what a design is read from ------------------------------------------------------------------

class DesignPlayer(Protocol):
    """A player as a design needs it (`config.PlayerConfig` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def authors(self) -> bool: ...
    @property
    def solves(self) -> bool: ...


class DesignTournament(Protocol):
    """A tournament's settings as a design needs them (`config.TournamentConfig` is one)."""

    @property
    def rounds(self) -> int: ...
    @property
    def envs_per_author(self) -> int: ...
    @property
    def seeds_per_env(self) -> int: ...
    @property
    def trials_per_seed(self) -> int: ...
    @property
    def max_turns(self) -> int: ...
    @property
    def author_repairs(self) -> int: ...
    @property
    def self_play(self) -> bool: ...


class DesignConfig(Protocol):
    """A run config as a design needs it (`config.RunConfig` is one)."""

    @property
    def players(self) -> Sequence[DesignPlayer]: ...
    @property
    def tournament(self) -> DesignTournament: ...


class DesignEnv(Protocol):
    """An environment a run recorded, as a design counts it (`store.EnvRecord` is one)."""

    @property
    def env_id(self) -> str: ...
    @property
    def author(self) -> str: ...
    @property
    def round(self) -> int: ...
    @property
    def valid(self) -> bool: ...
    @property
    def fixed_pool(self) -> bool: ...
    @property
    def benchmark_seeds(self) -> Sequence[int]: ...


# -- the design's units of work --------------------------------------------------------------------

@dataclass(frozen=True)
class Seat:
    """One player of the design: its name and its roles."""

    name: str
    authors: bool
    solves: bool


@dataclass(frozen=True)
class AuthoringSlot:
    """One environment an author writes: `env_id` in `round`, `slot`."""

    env_id: str
    author: str
    round: int
    slot: int


@dataclass(frozen=True)
class PairSlot:
    """One matched pair on an environment: `solver` plays `seed`, `trial` in both conditions
    (two episodes); `self_play` when the environment is the solver's own."""

    solver: str
    seed: int
    trial: int
    self_play: bool


@dataclass(frozen=True)
class SeatCost:
    """One player's share of a whole design, every environment valid: environments it writes,
    episodes it plays, and at most how many model calls each role makes."""

    environments: int = 0
    episodes: int = 0
    authoring_calls_max: int = 0
    solving_calls_max: int = 0


@dataclass(frozen=True)
class Design:
    """A tournament's design, from plain values. Every count of a run's work comes from here."""

    seats: tuple[Seat, ...]
    rounds: int
    envs_per_author: int
    seeds_per_env: int
    trials_per_seed: int
    max_turns: int
    author_repairs: int
    self_play: bool

    @classmethod
    def of(cls, cfg: DesignConfig) -> Design:
        """The design of a run config (anything shaped like `config.RunConfig`)."""
        t = cfg.tournament
        return cls(seats=tuple(Seat(p.name, p.authors, p.solves) for p in cfg.players),
                   rounds=t.rounds, envs_per_author=t.envs_per_author,
                   seeds_per_env=t.seeds_per_env, trials_per_seed=t.trials_per_seed,
                   max_turns=t.max_turns, author_repairs=t.author_repairs,
                   self_play=t.self_play)

    # -- authoring ------------------------------------------------------------------------

    @property
    def authors(self) -> tuple[Seat, ...]:
        return tuple(s for s in self.seats if s.authors)

    @property
    def solvers(self) -> tuple[Seat, ...]:
        return tuple(s for s in self.seats if s.solves)

    def authoring_jobs(self, rounds: Iterable[int] | None = None) -> list[AuthoringSlot]:
        """The environments authors write in `rounds` (default: every round of the design),
        round by round, in seat order, slot by slot."""
        chosen = range(1, self.rounds + 1) if rounds is None else sorted(set(rounds))
        return [AuthoringSlot(authored_env_id(a.name, rnd, slot), a.name, rnd, slot)
                for rnd in chosen for a in self.authors for slot in range(self.envs_per_author)]

    def authoring_jobs_of_round(self, rnd: int) -> list[AuthoringSlot]:
        """Round `rnd`'s environments in the order the scheduler starts them: author by author,
        slot by slot."""
        return self.authoring_jobs([rnd])

    def authored_ids(self) -> set[str]:
        """Every id the design's authors write, all rounds."""
        return {j.env_id for j in self.authoring_jobs()}

    def calls_per_job(self) -> tuple[int, int]:
        """The fewest and the most model calls one authoring job makes (repairs included)."""
        return 1, 1 + self.author_repairs

    # -- solving --------------------------------------------------------------------------

    def plays(self, solver: Seat, author: str) -> bool:
        """Whether `solver` plays an environment written by `author`."""
        return solver.solves and (self.self_play or solver.name != author)

    def episodes_per_env(self, solver: Seat, author: str, n_seeds: int) -> int:
        """How many episodes `solver` plays on one valid environment by `author` with
        `n_seeds` benchmark seeds: both conditions of every seed and trial; none when it does
        not solve, or when the environment is its own and `self_play` is off."""
        return n_seeds * self.trials_per_seed * 2 if self.plays(solver, author) else 0

    def pairs(self, author: str, seeds: Sequence[int]) -> list[tuple[Seat, list[PairSlot]]]:
        """Per solver in seat order, the matched pairs it plays on one valid environment by
        `author` with benchmark `seeds`: seed by seed, trial by trial."""
        return [(s, [PairSlot(s.name, seed, trial, s.name == author)
                     for seed in seeds for trial in range(self.trials_per_seed)])
                for s in self.seats if self.plays(s, author)]

    def turn_cap(self, env_max_turns: int) -> int:
        """The most solver turns an episode of an environment with its own `env_max_turns`
        gets in this design (`protocol.turn_cap` at the tournament's `max_turns`)."""
        return turn_cap(env_max_turns, self.max_turns)

    # -- counts ---------------------------------------------------------------------------

    def planned_episodes(self, envs: Iterable[DesignEnv], rounds: Iterable[int]) -> int:
        """Episodes `rounds` of a run play in all: every solver on each valid environment of
        those rounds in `envs` (the recorded ones; fixed-pool environments belong to round 1),
        plus each environment of those rounds not recorded yet, counted as if valid with
        `seeds_per_env` seeds."""
        chosen = set(rounds)
        envs = list(envs)
        total = sum(self.episodes_per_env(s, e.author, len(e.benchmark_seeds))
                    for e in envs if e.valid and (1 if e.fixed_pool else e.round) in chosen
                    for s in self.seats)
        known = {e.env_id for e in envs}
        return total + sum(self.episodes_per_env(s, job.author, self.seeds_per_env)
                           for job in self.authoring_jobs(chosen) if job.env_id not in known
                           for s in self.seats)

    def expected_episodes(self, envs: Iterable[DesignEnv]) -> int:
        """Episodes a complete run plays: every round of the design (and any recorded beyond
        it), environments not written yet counted as if valid."""
        envs = list(envs)
        last = max([self.rounds] + [e.round for e in envs if not e.fixed_pool])
        return self.planned_episodes(envs, range(1, last + 1))

    def pool_seeds(self, own_seeds: Sequence[int]) -> int:
        """How many benchmark seeds a fixed-pool environment is played on: its own, or
        `seeds_per_env` when it names none."""
        return len(own_seeds) or self.seeds_per_env

    def cost(self, pool: Iterable[tuple[str, int, int]]) -> dict[str, SeatCost]:
        """Per seat, exact counts of the whole design with every authored environment valid
        (an invalid one is not played: fewer episodes, never more); `pool` holds the fixed-pool
        environments as (author, seeds, own max_turns). Calls are upper bounds: every repair of
        every authoring job, every solver turn up to the turn cap."""
        env: dict[str, int] = {s.name: 0 for s in self.seats}
        episodes = dict(env)
        authoring = dict(env)
        solving = dict(env)
        written = self.envs_per_author * self.rounds
        batches: list[tuple[str, int, int]] = []   # (author, seeds, turn cap) per environment
        for a in self.authors:
            env[a.name] = written
            authoring[a.name] = written * self.calls_per_job()[1]
            batches += [(a.name, self.seeds_per_env, self.max_turns)] * written
        batches += [(author, seeds, self.turn_cap(max_turns)) for author, seeds, max_turns in pool]
        for author, seeds, cap in batches:
            for s in self.solvers:
                n = self.episodes_per_env(s, author, seeds)
                episodes[s.name] += n
                solving[s.name] += n * cap
        return {s.name: SeatCost(env[s.name], episodes[s.name], authoring[s.name],
                                 solving[s.name]) for s in self.seats}
