"""`envduels.gym.EnvDuelsGymEnv`: one EnvDuels environment behind the Gymnasium API.

Its own module so that `envduels._gym_vector` (the Ray vector environment, whose
sub-environments are these with a remote sandbox) and `envduels.gym` (the public entry points,
which build both) import it without importing each other. The contract a trainer relies on is
`envduels.gym`'s docstring.
"""

from __future__ import annotations

import contextlib
import string
from typing import TYPE_CHECKING, Protocol, TypedDict

import gymnasium
from gymnasium import spaces

from envduels._text import valid_text
from envduels.duel.faults import Phase, fail
from envduels.duel.protocol import (
    ACTION_SEARCH_MAX_CHARS,
    FORMAT_ERROR,
    Episode,
    hint_prefix,
    turn_cap,
)

if TYPE_CHECKING:
    from envduels.envs import EnvSpec
    from envduels.sandbox import SandboxLimits, StepResult


class SyncInstance(Protocol):
    """What the adapter needs of a sandboxed environment instance, blocking
    (`sandbox.SyncEnvInstance`, or a remote one driven from a thread)."""

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, object]]: ...
    def step(self, action: str) -> StepResult: ...
    def close(self) -> None: ...


class GymOptions(TypedDict, total=False):
    """The keyword arguments of `EnvDuelsGymEnv` after its spec (`make`, `register_*` pass
    them through)."""

    hint_in_first_observation: bool
    parse_reply: bool
    max_turns: int | None
    limits: SandboxLimits | None
    unsafe_no_sandbox: bool
    action_max_length: int


Info = dict[str, object]
"""A step's or reset's `info`: the environment's own keys, and `info["envduels"]`."""


# The engine searches the last ACTION_SEARCH_MAX_CHARS characters of a reply for its answer; the
# action space holds any Unicode text up to that length (a longer reply is still stepped, its
# tail searched, as in a duel, but it is outside the space).
ACTION_MAX_CHARS = ACTION_SEARCH_MAX_CHARS
ACTION_CHARSET = string.ascii_letters + string.digits + string.punctuation + " \n"
NAMESPACE = "envduels"
_SEED_HIGH = 2**63 - 1


class AnyText(spaces.Text):
    """A `Text` space whose members may use any Unicode character (environments print freely);
    samples still draw from `charset`."""

    def contains(self, x: object) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length


class EnvDuelsGymEnv(gymnasium.Env[str, str]):
    """One EnvDuels environment (`envduels.envs.EnvSpec`) behind the Gymnasium API."""

    metadata = {"render_modes": []}   # Gymnasium's class attribute; each instance adds its own

    def __init__(
        self,
        spec: EnvSpec,
        *,
        hint_in_first_observation: bool = False,
        parse_reply: bool = True,
        max_turns: int | None = None,
        limits: SandboxLimits | None = None,
        unsafe_no_sandbox: bool = False,
        action_max_length: int = ACTION_MAX_CHARS,
    ) -> None:
        from envduels.sandbox import SandboxLimits

        self.env_spec = spec
        self.hint_in_first_observation = hint_in_first_observation
        self.parse_reply = parse_reply
        self.max_turns = turn_cap(spec.max_turns, max_turns)
        self.limits = limits if limits is not None else SandboxLimits()
        self.unsafe_no_sandbox = unsafe_no_sandbox
        self.benchmark_seeds: list[int] = [int(s) for s in spec.benchmark_seeds]
        self.metadata = {**type(self).metadata, "env_id": spec.id, "benchmark_seeds": list(self.benchmark_seeds)}
        # the cap already includes the sandbox's truncation marker slack; the hint adds its prefix
        obs_max = self.limits.observation_max_chars + len(hint_prefix(spec.hint)) + 256
        self._observation_max = obs_max
        self.observation_space = AnyText(max_length=obs_max, min_length=0, charset=ACTION_CHARSET)
        self.action_space = AnyText(max_length=action_max_length, min_length=0, charset=ACTION_CHARSET)
        self._instance: SyncInstance | None = None
        self._episode: Episode | None = None
        self._seed: int | None = None

    # -- the Gymnasium API ----------------------------------------------------------------

    def reset(self, *, seed: int | None = None,
              options: dict[str, object] | None = None) -> tuple[str, Info]:
        """Start a fresh episode in a fresh sandboxed instance; see the module docstring."""
        super().reset(seed=seed)
        options = dict(options or {})
        if "benchmark_index" in options:
            index = _as_int(options["benchmark_index"], "benchmark_index")
            if not 0 <= index < len(self.benchmark_seeds):
                raise ValueError(f"benchmark_index {index} out of range: {len(self.benchmark_seeds)} benchmark seeds")
            env_seed = self.benchmark_seeds[index]
        elif seed is not None:
            env_seed = int(seed)
        else:
            env_seed = int(self.np_random.integers(0, _SEED_HIGH))
        hinted = bool(options.get("hint", self.hint_in_first_observation)) and bool(self.env_spec.hint)
        self._close_instance()
        self._episode = episode = Episode(self.max_turns,
                                          hint=self.env_spec.hint if hinted else None)
        try:
            self._instance = self._open()
            obs, env_info = self._instance.reset(env_seed)
        except Exception as err:   # the episode ends as `duel.faults` says; reset cannot return
            self._close_instance()
            fault = fail(episode, err, Phase.START)
            raise RuntimeError(f"environment {self.env_spec.id} failed on reset: {fault}") from err
        self._seed = env_seed
        episode.start(obs)
        if hinted:
            obs = hint_prefix(self.env_spec.hint) + obs
        info = dict(env_info or {})
        info[NAMESPACE] = {
            "env_id": self.env_spec.id,
            "seed": env_seed,
            "hinted": hinted,
            "benchmark_seeds": list(self.benchmark_seeds),
        }
        return self._clip(obs), info

    def step(self, action: str) -> tuple[str, float, bool, bool, Info]:
        """One turn: (observation, reward, terminated, truncated, info); see the module docstring."""
        episode = self._episode
        if episode is None or episode.done or self._instance is None:
            raise gymnasium.error.ResetNeeded("call reset() before step() and after an episode ends")
        # the duel's rules, from the one protocol: the turn, the box, the format error, the cap
        env_action = episode.act(valid_text(action), parse=self.parse_reply)
        meta: dict[str, object] = {"turn": episode.turn, "success": False, "format_error": False,
                                   "fault": None}
        if env_action is None:
            meta["format_error"] = True
            return self._clip(FORMAT_ERROR), 0.0, False, episode.done, {NAMESPACE: meta}
        try:
            result = self._instance.step(env_action)
        except Exception as err:   # the episode ends as `duel.faults` says
            meta["fault"] = fault = fail(episode, err, Phase.STEP)
            self._close_instance()
            return self._clip(f"Environment error: {fault}"), 0.0, False, True, {NAMESPACE: meta}
        episode.observe(result.observation, result.reward, result.terminated, result.truncated)
        terminated = bool(result.terminated)
        truncated = bool(result.truncated) or (episode.done and not terminated)
        reward = float(result.reward)
        meta["success"] = episode.success
        info: dict[str, object] = dict(result.info or {})
        info[NAMESPACE] = meta
        return self._clip(result.observation), reward, terminated, truncated, info

    @property
    def transcript(self) -> list[dict[str, object]]:
        """The current (or last) episode's transcript, exactly as a duel records it for the same
        seed, condition and replies: the solver's system prompt and user turns as the duel words
        them (the observations this adapter returns are the environment's own, hint-prefixed),
        the replies, the steps and the outcome (`duel.protocol.Episode`). Empty before the
        first reset."""
        return [dict(entry) for entry in self._episode.transcript] if self._episode is not None else []

    def close(self) -> None:
        """Kill the sandboxed worker; idempotent."""
        self._close_instance()

    # -- helpers ----------------------------------------------------------------------------

    def _open(self) -> SyncInstance:
        from envduels.sandbox import open_env_sync

        return open_env_sync(
            self.env_spec.source,
            class_name=self.env_spec.class_name,
            max_turns=self.env_spec.max_turns,
            limits=self.limits,
            unsafe_no_sandbox=self.unsafe_no_sandbox,
            shared=True,   # one pool per process: each reset forks from the template
        )

    def _close_instance(self) -> None:
        instance, self._instance = self._instance, None
        if instance is not None:
            instance.close()

    def _clip(self, text: str) -> str:
        return text[: self._observation_max]

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at shutdown the worker dies with its parent anyway
            self._close_instance()


def _as_int(value: object, name: str) -> int:
    """An option's integer value, read as `int(value)` reads a number or a numeral."""
    if isinstance(value, int | float | str):
        return int(value)
    raise TypeError(f"options[{name!r}] must be an integer, got {type(value).__name__}")

