"""Validation (SPEC §3): is an environment fit to be played?

Checks, in order, each failure one actionable line:
1. static (no code runs): the source parses; one environment class (or `class_name`); hint rules;
2. in the sandbox, per benchmark seed: the contract (a probe episode up to the turn cap; the
   sandbox enforces types and deadlines, and any `EnvFault` becomes the reason), determinism (a
   second fresh instance, same seed and actions, must give identical observations, rewards and
   flags), the oracle (play `oracle_action()` every turn; it must end `terminated` with reward
   > 0 within the cap), its replay (the recorded actions in a fresh instance that never had
   `oracle_action` called must give the identical trajectory) and a perturbed oracle (the
   oracle's actions, each slightly changed, played twice: identical trajectories);
3. across seeds: an environment whose every seed gives the same initial observation, the same
   probe trajectory and the same oracle play (actions included) ignores its seed. That makes an
   authored environment invalid; a fixed-pool one (library, export: the reference format lets
   an instance ignore its seed) stays valid with a warning and the flag `seed_ignored`;
4. the degenerate-policy battery (`envs._battery`) and, when it wins nothing, the answer check
   (`envs._answer_check`): flags on a valid environment, never reasons.

The probe actions are not all public: besides `PROBE_ACTIONS`, each seed's probe draws
`DRAWN_PROBES` actions of plausible shapes (numbers, words, letters, coordinates, lists) from
an RNG seeded by `probe_seed`, the source's hash and the seed, and shuffles them in, a drawn one
first. The same inputs give the same probes, but an environment cannot know them: a run's
salt holds a random secret kept in its database (so a resume draws the same probes), and
`envduels validate` draws a fresh secret per invocation.

The first failing sandbox check ends the sandbox checks (later ones would only repeat it); the
static reasons are always all reported.
"""

from __future__ import annotations

import contextlib
import random
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from envduels.config import HINT_MAX_CHARS
from envduels.envs._answer_check import check_answers
from envduels.envs._battery import FIXED_ANSWER, BatteryFindings, Policy, run_battery
from envduels.envs._spec import EnvSpec, OracleStatus, Verdict
from envduels.envs._static import StaticError, check_hint, find_env_class, parse_source
from envduels.envs._turns import turn_cap
from envduels.sandbox import EnvFault, EnvInstance, SandboxPool, SandboxStartError

if TYPE_CHECKING:   # a run validates in whichever sandboxes it plays in, a Ray cluster's too
    from envduels.sandbox.ray_pool import RayEnvPool, RemoteEnvInstance

PROBE_ACTIONS = (
    "\\boxed{1}",
    "\\boxed{A}",
    "\\boxed{0 1}",
    "\\boxed{up}",
    "\\boxed{}",
    "\\boxed{yes}",
    "\\boxed{2}",
    "\\boxed{hello world}",
)
"""Actions of the probe episode: arbitrary, sometimes malformed, as a solver's would be. An
environment must answer each with an observation, never by raising."""

DRAWN_PROBES = 8
"""Probe actions drawn on top of `PROBE_ACTIONS` (see `probe_actions`)."""

SEED_IGNORED = "seed_ignored"
"""The verdict flag of a fixed-pool environment that ignores its seed (valid, with a warning)."""

_WORDS = ("left", "right", "down", "north", "east", "take", "move", "swap", "fill", "pour", "no",
          "guess", "red", "blue", "open", "flip", "push", "pass", "stop", "cat", "apple", "stone")

VALIDATION_MAX_TURNS = 1000
"""Turn cap of validation when the caller gives none (`envduels validate`): an environment may
declare `max_turns=10**9`, and no solver is ever given more turns than the tournament's cap."""

VALIDATION_BUDGET_S = 120.0
"""Default wall-clock budget of one `validate_env` call, all seeds and episodes together."""

Step = tuple[str, float, bool, bool]


def _drawn_action(rng: random.Random) -> str:
    """One action of a shape a solver might send: a number, a word, a letter, coordinates, a
    list, a move."""
    shape = rng.randrange(8)
    if shape == 0:
        inner = str(rng.randint(-20, 10**rng.randint(1, 6)))
    elif shape == 1:
        inner = rng.choice(_WORDS)
    elif shape == 2:
        inner = rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    elif shape == 3:
        inner = f"{rng.randint(0, 9)},{rng.randint(0, 9)}"
    elif shape == 4:
        inner = " ".join(str(rng.randint(0, 20)) for _ in range(rng.randint(2, 5)))
    elif shape == 5:
        inner = f"{rng.choice(_WORDS)} {rng.randint(1, 9)}"
    elif shape == 6:
        inner = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 8)))
    else:
        inner = f"{rng.randint(1, 9)} {rng.choice('+-*/')} {rng.randint(1, 9)}"
    return f"\\boxed{{{inner}}}"


def probe_actions(probe_seed: str, source_sha256: str) -> list[str]:
    """The probe episode's actions: `PROBE_ACTIONS` and `DRAWN_PROBES` drawn ones, shuffled with
    a drawn one first. Deterministic in its arguments, and the same for every benchmark seed of
    one validation: "the environment ignores its seed" compares the seeds' probe trajectories,
    which differ under different actions even when the seed is ignored."""
    rng = random.Random(f"envduels-probe/v1|{probe_seed}|{source_sha256}")
    drawn = [_drawn_action(rng) for _ in range(DRAWN_PROBES)]
    rest = drawn[1:] + list(PROBE_ACTIONS)
    rng.shuffle(rest)
    return [drawn[0], *rest]


_NUMBER = re.compile(r"-?\d+")


def perturbed(action: str, rng: random.Random) -> str:
    """`action` slightly changed, as a solver's near miss: a number moved by one, else the
    boxed text with one character changed, doubled or dropped, or its case swapped."""
    inner = action[len("\\boxed{"):-1] if action.startswith("\\boxed{") and action.endswith("}") else action
    numbers = list(_NUMBER.finditer(inner))
    if numbers and rng.random() < 0.6:
        m = rng.choice(numbers)
        inner = f"{inner[:m.start()]}{int(m.group()) + rng.choice((-1, 1))}{inner[m.end():]}"
    elif inner:
        i = rng.randrange(len(inner))
        how = rng.randrange(4)
        if how == 0:
            inner = inner[:i] + rng.choice("abcxyz019 ") + inner[i + 1:]
        elif how == 1:
            inner = inner[:i] + inner[i] + inner[i:]
        elif how == 2:
            inner = inner[:i] + inner[i + 1:]
        else:
            inner = inner.swapcase() if inner.swapcase() != inner else inner + "x"
    else:
        inner = "0"
    return f"\\boxed{{{inner}}}"


@dataclass
class _Episode:
    initial: str
    steps: list[Step] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)

    @property
    def won(self) -> bool:
        return bool(self.steps) and self.steps[-1][2] and self.steps[-1][1] > 0

    def trajectory(self) -> list[object]:
        return [self.initial, *self.steps]


class _Failed(Exception):
    def __init__(self, reason: str, oracle: OracleStatus = "skipped") -> None:
        super().__init__(reason)
        self.reason = reason
        self.oracle = oracle


class _Budget:
    """The wall-clock budget of one validation."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds

    def check(self, seed: int, what: str, turn: int) -> None:
        if time.monotonic() > self.deadline:
            at = f" before turn {turn}" if turn else ""
            raise _Failed(
                f"seed {seed}, {what}{at}: validation ran past its {self.seconds:g} s budget: make "
                "reset and step faster, or end episodes in fewer turns",
                _status_if_fault(what),
            )


def _status_if_fault(what: str) -> OracleStatus:
    """The verdict's `oracle` when the episode `what` faults: its own failure for the oracle's
    play or replay; "passed" for the perturbed oracle, which runs only after the oracle won and
    replayed; "skipped" for the probes, which run before the oracle does."""
    if what.startswith("oracle"):
        return "failed"
    return "passed" if what.startswith("perturbed") else "skipped"


def _short(text: str, limit: int = 60) -> str:
    one_line = " ".join(text.split())
    return repr(one_line if len(one_line) <= limit else one_line[: limit - 1] + "…")


def _first_difference(a: _Episode, b: _Episode) -> str:
    ta, tb = a.trajectory(), b.trajectory()
    for turn, (x, y) in enumerate(zip(ta, tb, strict=False)):
        if x != y:
            if turn == 0:
                return f"the initial observations differ ({_short(str(x))} vs {_short(str(y))})"
            xs, ys = x, y
            assert isinstance(xs, tuple) and isinstance(ys, tuple)
            if xs[0] != ys[0]:
                return f"turn {turn} observations differ ({_short(xs[0])} vs {_short(ys[0])})"
            return f"turn {turn} (reward, terminated, truncated) differ ({xs[1:]} vs {ys[1:]})"
    return f"the episodes have different lengths ({len(ta) - 1} vs {len(tb) - 1} turns)"


async def _run_episode(
    pool: SandboxPool | RayEnvPool,
    spec: EnvSpec,
    class_name: str,
    seed: int,
    cap: int,
    *,
    actions: list[str] | None = None,
    use_oracle: bool = False,
    policy: Policy | None = None,
    what: str,
    budget: _Budget,
) -> _Episode:
    """Reset a fresh instance with `seed` and step it until terminated/truncated or `cap` turns,
    with `actions` (cycled), or, if `use_oracle`, with `oracle_action()` each turn, or with what
    `policy` answers to the last observation (until it answers None)."""
    turn, call = 0, "loading"
    instance: EnvInstance | RemoteEnvInstance | None = None
    try:
        budget.check(seed, what, turn)
        instance = await pool.open(spec.source, class_name=class_name, max_turns=spec.max_turns)
        call = "reset"
        initial, _info = await instance.reset(seed)
        episode = _Episode(initial)
        observation = initial
        for turn in range(1, cap + 1):
            budget.check(seed, what, turn)
            if use_oracle:
                call = "oracle_action"
                action = await instance.oracle_action()
            elif policy is not None:
                next_action = policy.act(observation)
                if next_action is None:
                    break
                action = next_action
            else:
                assert actions
                action = actions[(turn - 1) % len(actions)]
            call = "step"
            result = await instance.step(action)
            episode.actions.append(action)
            episode.steps.append((result.observation, result.reward, result.terminated, result.truncated))
            observation = result.observation
            if result.terminated or result.truncated:
                break
        return episode
    except SandboxStartError:
        raise  # the host's failure, not the environment's: never a reason against it
    except _Failed:
        raise
    except Exception as fault:
        # last resort for anything else: a value the parent could not take is the
        # environment's doing, and must be a reason, never an exception out of validation
        reason = fault.reason if isinstance(fault, EnvFault) else " ".join(
            f"its answer could not be read ({type(fault).__name__}: {fault})".split())[:200]
        where = "while loading" if call == "loading" else f"in {call}" + (f" (turn {turn})" if turn else "")
        raise _Failed(f"seed {seed}, {what}: {where}: {reason}",
                      _status_if_fault(what)) from None
    finally:
        if instance is not None:
            with contextlib.suppress(Exception):
                await instance.close()


async def _check_seed(
    pool: SandboxPool | RayEnvPool, spec: EnvSpec, class_name: str, seed: int, cap: int, has_oracle: bool,
    budget: _Budget, probe_seed: str,
) -> tuple[_Episode, _Episode | None]:
    probes = probe_actions(probe_seed, spec.source_sha256)
    probe = await _run_episode(pool, spec, class_name, seed, cap, actions=probes,
                               what="probe episode", budget=budget)
    again = await _run_episode(pool, spec, class_name, seed, cap, actions=probes,
                               what="determinism check", budget=budget)
    if probe.trajectory() != again.trajectory():
        raise _Failed(
            f"seed {seed}: not deterministic: two fresh instances given the same seed and actions "
            f"diverge: {_first_difference(probe, again)}; draw all randomness from "
            "random.Random(seed) in reset, never the global random module or the clock"
        )
    if not has_oracle:
        return probe, None
    oracle = await _run_episode(pool, spec, class_name, seed, cap, use_oracle=True,
                                what="oracle check", budget=budget)
    if not oracle.won:
        if oracle.steps and oracle.steps[-1][2]:
            how = f"the episode ended at turn {len(oracle.steps)} with reward {oracle.steps[-1][1]}"
        elif oracle.steps and oracle.steps[-1][3]:
            how = f"the episode was truncated at turn {len(oracle.steps)}"
        else:
            how = f"no win within the {cap}-turn cap"
        raise _Failed(
            f"seed {seed}: playing oracle_action() each turn does not win ({how}): make "
            "oracle_action return a winning action for the current state",
            "failed",
        )
    replay = await _run_episode(pool, spec, class_name, seed, cap, actions=oracle.actions,
                                what="oracle replay", budget=budget)
    if replay.trajectory() != oracle.trajectory():
        raise _Failed(
            f"seed {seed}: replaying the oracle's {len(oracle.actions)} actions in a fresh instance "
            f"does not reproduce its win: {_first_difference(oracle, replay)}; oracle_action "
            "must only read the state, never change it",
            "failed",
        )
    rng = random.Random(f"envduels-perturb/v1|{probe_seed}|{spec.source_sha256}|{seed}")
    near = [perturbed(a, rng) for a in oracle.actions]
    first = await _run_episode(pool, spec, class_name, seed, cap, actions=near,
                               what="perturbed oracle", budget=budget)
    second = await _run_episode(pool, spec, class_name, seed, cap, actions=near,
                                what="perturbed oracle", budget=budget)
    if first.trajectory() != second.trajectory():
        raise _Failed(
            f"seed {seed}: not deterministic: two fresh instances given the same seed and the "
            f"oracle's actions slightly changed diverge: {_first_difference(first, second)}; "
            "draw all randomness from random.Random(seed) in reset, never the global random "
            "module or the clock",
            "passed",
        )
    return probe, oracle


async def _has_oracle(pool: SandboxPool | RayEnvPool, spec: EnvSpec, class_name: str) -> bool:
    instance = await pool.open(spec.source, class_name=class_name, max_turns=spec.max_turns)
    try:
        return instance.has_oracle
    finally:
        await instance.close()


async def validate_env(
    spec: EnvSpec,
    pool: SandboxPool | RayEnvPool,
    *,
    seeds: list[int],
    require_oracle: bool,
    hint_max_chars: int = HINT_MAX_CHARS,
    max_turns: int | None = None,
    budget_s: float = VALIDATION_BUDGET_S,
    fixed_pool: bool = False,
    probe_seed: str = "",
    degenerate_battery: bool = True,
) -> Verdict:
    """Validate `spec` on `seeds` using sandboxed instances from `pool` (never in-process).

    Every hint in `spec.hints` is checked against the hint rules; an empty `hints` (a bare file)
    skips them. The turn cap is `turn_cap(spec.max_turns, max_turns)`, `max_turns` defaulting to
    `VALIDATION_MAX_TURNS`. The sandbox checks together get `budget_s` seconds of wall clock:
    past it, the verdict is invalid with a reason naming the seed, check and turn (checked
    before every sandbox call, so the overshoot is at most one call's own sandbox deadline). An
    environment without `oracle_action` is valid with `oracle="absent"` unless `require_oracle`.
    `probe_seed` salts the drawn probe actions (a run passes its fingerprint and its random
    secret, `envduels validate` a fresh random one per invocation, so an author cannot know
    them). With `fixed_pool` (a library or export environment), ignoring the seed
    is a warning and the flag `seed_ignored`, not a reason. A valid environment then meets the
    degenerate-policy battery (`envs._battery`; `degenerate_battery=False` skips it, for
    measuring what it costs): its findings are `Verdict.battery`, and a policy without
    intelligence that wins most seeds adds the flag `trivial` or `hint_is_key` with a warning;
    when none does, the answer check (`envs._answer_check`) adds `fixed_answer` when the
    oracle's winning answer is the same on `duel.answers.ANSWER_SEEDS` seeds (the benchmark
    ones, then seeds drawn from `probe_seed`; an oracle that does not win on a drawn seed makes
    the environment invalid, as on a benchmark seed).
    Never raises for anything the environment does; `SandboxUnavailable` comes from the pool,
    and `SandboxStartError` (a sandbox that could not start: the host's failure, never held
    against the environment) propagates.
    """
    if not seeds:
        raise ValueError("validate_env needs at least one seed")
    reasons: list[str] = []
    class_name: str | None = None
    try:
        class_name = find_env_class(parse_source(spec.source), spec.class_name)
    except StaticError as err:
        reasons.append(err.reason)
    for key, text in spec.hints.items():
        prefix = "" if key == "hint" else f"{key}: "
        reasons.extend(prefix + r for r in check_hint(text, hint_max_chars))
    if class_name is None:
        return Verdict(False, reasons, "skipped", spec.class_name, list(seeds))

    cap = turn_cap(spec.max_turns, VALIDATION_MAX_TURNS if max_turns is None else max_turns)
    budget = _Budget(budget_s)
    oracle_status: OracleStatus = "skipped"
    warnings: list[str] = []
    flags: list[str] = []
    battery: BatteryFindings | None = None
    try:
        try:
            has_oracle = await _has_oracle(pool, spec, class_name)
        except SandboxStartError:
            raise
        except EnvFault as fault:
            raise _Failed(f"the environment does not load: {fault.reason}") from None
        if not has_oracle and require_oracle:
            raise _Failed(
                f"{class_name} has no oracle_action: add oracle_action() returning a winning "
                "action for the current state (required here)",
                "absent",
            )
        probes, oracles = [], []
        for seed in seeds:
            probe, oracle = await _check_seed(pool, spec, class_name, seed, cap, has_oracle, budget,
                                              probe_seed)
            probes.append(probe)
            oracles.append(oracle)
        oracle_status = "passed" if has_oracle else "absent"
        if len(seeds) > 1 and _ignores_seed(probes, oracles) and fixed_pool:
            warnings.append(
                f"every one of the {len(seeds)} benchmark seeds gives the same instance: the "
                "environment ignores its seed, so its seeds are repeats of one fixed instance "
                "(allowed for a fixed pool)")
            flags.append(SEED_IGNORED)
        elif len(seeds) > 1 and _ignores_seed(probes, oracles):
            raise _Failed(
                f"every one of the {len(seeds)} benchmark seeds gives the same initial observation "
                "and the same trajectories: the environment ignores its seed; build each "
                "instance from random.Random(seed) in reset",
                oracle_status,
            )

        async def play(seed: int, policy: Policy) -> bool:
            policy.begin()
            episode = await _run_episode(pool, spec, class_name, seed, cap, policy=policy,
                                         what=f"degenerate-policy battery ({policy.name})",
                                         budget=budget)
            return episode.won

        async def oracle_final(seed: int) -> str:
            oracle = await _run_episode(pool, spec, class_name, seed, cap, use_oracle=True,
                                        what="oracle check on a drawn seed", budget=budget)
            if not oracle.won:
                raise _Failed(
                    f"seed {seed} (drawn for the answer check): playing oracle_action() each turn "
                    "does not win: make oracle_action return a winning action on every seed",
                    "failed")
            return oracle.actions[-1]

        if not degenerate_battery:
            return Verdict(True, [], oracle_status, class_name, list(seeds), warnings=warnings,
                           flags=flags)
        salt = f"{probe_seed}|{spec.source_sha256}"
        try:
            found = await run_battery(play, list(seeds), spec.hint, salt)
        except _Failed as failure:   # the oracle's verdict stands; the fault is the reason
            raise _Failed(failure.reason, oracle_status) from None
        if found.flag is None and has_oracle:
            finals = {seed: o.actions[-1] for seed, o in zip(seeds, oracles, strict=True) if o}
            answers = await check_answers(oracle_final, finals, salt,
                                          draw=SEED_IGNORED not in flags)
            found.answer_seeds = answers.seeds
            found.answers = {str(seed): digest for seed, digest in answers.by_seed.items()}
            if answers.fixed:
                found.flag, found.detail = FIXED_ANSWER, answers.detail
        battery = found.to_json()
        if found.flag is not None:
            warnings.append(found.detail)
            flags.append(found.flag)
    except _Failed as failure:
        reasons.append(failure.reason)
        oracle_status = failure.oracle
    return Verdict(not reasons, reasons, oracle_status, class_name, list(seeds),
                   warnings=warnings if not reasons else [], flags=flags if not reasons else [],
                   battery=battery if not reasons else None)


def _ignores_seed(probes: list[_Episode], oracles: list[_Episode | None]) -> bool:
    """True when every seed gave the same probe trajectory and the same oracle play (its
    actions included: a lock whose code changes with the seed shows it only in the actions)."""

    def oracle_play(episode: _Episode | None) -> object:
        return (episode.trajectory(), episode.actions) if episode else None

    same_probes = all(p.trajectory() == probes[0].trajectory() for p in probes)
    same_oracles = all(oracle_play(o) == oracle_play(oracles[0]) for o in oracles)
    return same_probes and same_oracles
