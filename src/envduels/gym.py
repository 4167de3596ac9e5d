"""Any EnvDuels environment as a `gymnasium.Env`, running in the sandbox.

    env = envduels.gym.make("twenty_questions")            # a library environment
    ids = envduels.gym.register_export("out/")              # one gym id per exported environment
    env = gymnasium.make(ids[0], hint_in_first_observation=True)
    obs, info = env.reset(seed=info_seed)                   # info["envduels"]["benchmark_seeds"]
    obs, reward, terminated, truncated, info = env.step("I guess \\boxed{42}")

Contract (what a trainer may rely on):
- Observations and actions are strings (`gymnasium.spaces.Text`); either space contains any
  Unicode text up to its length (actions: `ACTION_SEARCH_MAX_CHARS`, the end of a reply the
  engine searches for the action). By default an action is the policy's whole reply and the environment receives its last balanced `\\boxed{...}` (wrapper
  included), exactly as in a duel; a reply without one costs the turn and observes the duel's
  format-error message (`parse_reply=False` passes the action through untouched).
- Every `reset` starts a fresh sandboxed instance (closing the previous one), so episodes never
  share state. `reset(seed=None)` draws the environment seed from the Gymnasium RNG, so a seeded
  reset followed by unseeded ones is reproducible. `options={"hint": bool}` overrides
  `hint_in_first_observation` for that episode; `options={"benchmark_index": i}` plays the i-th
  benchmark seed.
- `info["envduels"]` holds `env_id`, `seed`, `hinted`, `benchmark_seeds` (reset) and `turn`,
  `success` (terminated with reward > 0), `format_error`, `fault` (step). The environment's own
  info keys are passed through beside it.
- The turn cap is a duel's (`envs.turn_cap`): the environment's `max_turns`, lowered to the
  `max_turns` given; the environment is constructed with its own `max_turns`, as in a duel.
  Reaching the cap returns `truncated=True`. An environment fault (raise, timeout, limit) ends the episode with
  `truncated=True` and the reason in `info["envduels"]["fault"]`; the next `reset` starts afresh.
- `close()` kills the worker process tree; calling it twice is fine.
- The rules are a duel's, from the one protocol (`envduels.duel.protocol`, shared with the
  engine and `envduels serve`); `env.transcript` is the episode's transcript exactly as a duel
  records it for the same seed, condition and replies.

Hint-resampled training: roll out a group of episodes on one seed without the hint; if every
rollout fails, replay the group with `reset(seed=s, options={"hint": True})` (the hint is prepended
to the first observation as `Hint: ...`, as in the duel's hinted condition) and train on those.
"""

from __future__ import annotations

import contextlib
import string
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium
from gymnasium import spaces

from envduels._text import valid_text
from envduels.duel.protocol import (
    ACTION_SEARCH_MAX_CHARS,
    FORMAT_ERROR,
    Episode,
    hint_prefix,
    turn_cap,
)
from envduels.errors import UserError

if TYPE_CHECKING:
    from envduels.envs import EnvSpec

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

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length


class EnvDuelsGymEnv(gymnasium.Env[str, str]):
    """One EnvDuels environment (`envduels.envs.EnvSpec`) behind the Gymnasium API."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        spec: Any,
        *,
        hint_in_first_observation: bool = False,
        parse_reply: bool = True,
        max_turns: int | None = None,
        limits: Any | None = None,
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
        self.observation_space = AnyText(max_length=obs_max, min_length=0, charset=ACTION_CHARSET)
        self.action_space = AnyText(max_length=action_max_length, min_length=0, charset=ACTION_CHARSET)
        self._instance: Any | None = None
        self._episode: Episode | None = None
        self._seed: int | None = None

    # -- the Gymnasium API ----------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start a fresh episode in a fresh sandboxed instance; see the module docstring."""
        super().reset(seed=seed)
        options = dict(options or {})
        if "benchmark_index" in options:
            index = int(options["benchmark_index"])
            if not 0 <= index < len(self.benchmark_seeds):
                raise ValueError(f"benchmark_index {index} out of range: {len(self.benchmark_seeds)} benchmark seeds")
            env_seed = self.benchmark_seeds[index]
        elif seed is not None:
            env_seed = int(seed)
        else:
            env_seed = int(self.np_random.integers(0, _SEED_HIGH))
        hinted = bool(options.get("hint", self.hint_in_first_observation)) and bool(self.env_spec.hint)
        self._close_instance()
        try:
            self._instance = self._open()
            obs, env_info = self._instance.reset(env_seed)
        except Exception as err:
            self._close_instance()
            if _is_fault(err):
                raise RuntimeError(f"environment {self.env_spec.id} failed on reset: {_reason(err)}") from err
            raise
        self._seed = env_seed
        self._episode = Episode(self.max_turns, hint=self.env_spec.hint if hinted else None)
        self._episode.start(obs)
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

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """One turn: (observation, reward, terminated, truncated, info); see the module docstring."""
        episode = self._episode
        if episode is None or episode.done or self._instance is None:
            raise gymnasium.error.ResetNeeded("call reset() before step() and after an episode ends")
        # the duel's rules, from the one protocol: the turn, the box, the format error, the cap
        env_action = episode.act(valid_text(action), parse=self.parse_reply)
        meta = {"turn": episode.turn, "success": False, "format_error": False, "fault": None}
        if env_action is None:
            meta["format_error"] = True
            return self._clip(FORMAT_ERROR), 0.0, False, episode.done, {NAMESPACE: meta}
        try:
            result = self._instance.step(env_action)
        except Exception as err:
            if not _is_fault(err):
                raise
            meta["fault"] = _reason(err)
            episode.step_failed(meta["fault"])
            episode.end("incomplete", f"environment fault: {meta['fault']}")
            self._close_instance()
            return self._clip(f"Environment error: {meta['fault']}"), 0.0, False, True, {NAMESPACE: meta}
        episode.observe(result.observation, result.reward, result.terminated, result.truncated)
        terminated = bool(result.terminated)
        truncated = bool(result.truncated) or (episode.done and not terminated)
        reward = float(result.reward)
        meta["success"] = episode.success
        info = dict(result.info or {})
        info[NAMESPACE] = meta
        return self._clip(result.observation), reward, terminated, truncated, info

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """The current (or last) episode's transcript, exactly as a duel records it for the same
        seed, condition and replies: the solver's system prompt and user turns as the duel words
        them (the observations this adapter returns are the environment's own, hint-prefixed),
        the replies, the steps and the outcome (`duel.protocol.Episode`). Empty before the
        first reset."""
        return list(self._episode.transcript) if self._episode is not None else []

    def close(self) -> None:
        """Kill the sandboxed worker; idempotent."""
        self._close_instance()

    # -- helpers ----------------------------------------------------------------------------

    def _open(self) -> Any:
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
        return text[: self.observation_space.max_length]

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at shutdown the worker dies with its parent anyway
            self._close_instance()


def _is_fault(err: BaseException) -> bool:
    from envduels.sandbox import EnvFault

    return isinstance(err, EnvFault)


def _reason(err: BaseException) -> str:
    return str(getattr(err, "reason", None) or err)


def make(name_or_path: str | Path | EnvSpec, **kwargs: Any) -> EnvDuelsGymEnv:
    """An adapter for an `EnvSpec` or for the one environment a string names, read by
    `envduels.envs.resolve` as `envduels validate` and `play` read it (a library name, a `.py`
    file, an export folder holding one environment, `FOLDER/ENV_ID`); kwargs go to
    `EnvDuelsGymEnv`. UserError when it names none or several."""
    from envduels.envs import EnvSpec, resolve

    spec = name_or_path if isinstance(name_or_path, EnvSpec) else resolve(name_or_path).one()
    return EnvDuelsGymEnv(spec, **kwargs)


def gym_id(env_id: str, namespace: str = NAMESPACE) -> str:
    """The Gymnasium id of an environment: `<namespace>/<sanitised id>-v0`.

    Letters, digits, `_`, `.` and `-` (all legal in a Gymnasium name) are kept, so `a-b` and
    `a_b` get different ids; any other character becomes `_` (`:` would make Gymnasium import a
    module). Two ids that still collide are refused when registered.
    """
    safe = "".join(c if c.isalnum() or c in "_.-" else "_" for c in env_id) or "env"
    return f"{namespace}/{safe}-v0"


def _register(specs: list[Any], namespace: str, defaults: dict[str, Any]) -> list[str]:
    ids = []
    mine: dict[str, str] = {}
    for spec in specs:
        gid = gym_id(spec.id, namespace)
        other = mine.get(gid)
        if other is None and gid in gymnasium.registry:
            other = getattr(gymnasium.registry[gid].kwargs.get("spec"), "id", None)
        if other is not None and other != spec.id:
            raise UserError(
                f"environments {other!r} and {spec.id!r} both map to the Gymnasium id {gid!r}; "
                "rename one of them or register it under another namespace"
            )
        mine[gid] = spec.id
        gymnasium.register(
            id=gid,
            entry_point=EnvDuelsGymEnv,
            kwargs={"spec": spec, **defaults},
            disable_env_checker=True,
            nondeterministic=False,
        )
        ids.append(gid)
    return ids


def register_export(out_dir: str | Path, *, namespace: str = NAMESPACE, **defaults: Any) -> list[str]:
    """Register one Gymnasium id per environment of an EnvDuels export folder; returns the ids in
    manifest order. The folder is read with `envs.load_export` (paths may not escape it; hashes
    are checked): UserError naming the row otherwise. `defaults` go to `EnvDuelsGymEnv`."""
    from envduels.envs import load_export

    return _register(load_export(out_dir), namespace, defaults)


def register_library(*, namespace: str = NAMESPACE, **defaults: Any) -> list[str]:
    """Register every reference library environment; returns the ids."""
    from envduels.envs import library_env, library_names

    return _register([library_env(n) for n in library_names()], namespace, defaults)


def make_vec(name_or_path: str | Path | EnvSpec, num_envs: int, *, address: str | None = None,
             **kwargs: Any) -> Any:
    """A Gymnasium vector environment of `num_envs` copies of one environment (as `make`), whose
    sandboxes run on the Ray cluster at `address` ('auto', HOST:PORT, or the cluster this
    process is connected to) and step concurrently. Needs `pip install 'envduels[ray]'`;
    conventions in `envduels._gym_vector`."""
    from envduels._gym_vector import RayVectorEnv

    return RayVectorEnv(make(name_or_path).env_spec, num_envs, address=address, **kwargs)
