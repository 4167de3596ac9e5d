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

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Unpack

import gymnasium

from envduels._gym_env import (
    ACTION_CHARSET,
    ACTION_MAX_CHARS,
    NAMESPACE,
    AnyText,
    EnvDuelsGymEnv,
    GymOptions,
)
from envduels.errors import UserError

if TYPE_CHECKING:
    from envduels._gym_vector import PoolVectorEnv, VecOptions
    from envduels.envs import EnvSpec

__all__ = ["ACTION_CHARSET", "ACTION_MAX_CHARS", "NAMESPACE", "AnyText", "EnvDuelsGymEnv",
           "gym_id", "make", "make_vec", "register_export", "register_library"]


def make(name_or_path: str | Path | EnvSpec, **kwargs: Unpack[GymOptions]) -> EnvDuelsGymEnv:
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


def _register(specs: list[EnvSpec], namespace: str, defaults: GymOptions) -> list[str]:
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
            entry_point="envduels.gym:EnvDuelsGymEnv",   # Gymnasium imports it by name
            kwargs={"spec": spec, **defaults},
            disable_env_checker=True,
            nondeterministic=False,
        )
        ids.append(gid)
    return ids


def register_export(out_dir: str | Path, *, namespace: str = NAMESPACE, **defaults: Unpack[GymOptions]) -> list[str]:
    """Register one Gymnasium id per environment of an EnvDuels export folder; returns the ids in
    manifest order. The folder is read with `envs.load_export` (paths may not escape it; hashes
    are checked): UserError naming the row otherwise. `defaults` go to `EnvDuelsGymEnv`."""
    from envduels.envs import load_export

    return _register(load_export(out_dir), namespace, defaults)


def register_library(*, namespace: str = NAMESPACE, **defaults: Unpack[GymOptions]) -> list[str]:
    """Register every reference library environment; returns the ids."""
    from envduels.envs import library_env, library_names

    return _register([library_env(n) for n in library_names()], namespace, defaults)


def make_vec(name_or_path: str | Path | EnvSpec, num_envs: int, *, address: str | None = None,
             **kwargs: Unpack[VecOptions]) -> PoolVectorEnv:
    """A Gymnasium vector environment of `num_envs` copies of one environment (as `make`) that
    step concurrently. Its sandboxes run on the Ray cluster at `address` ('auto', HOST:PORT)
    when one is given or this process is connected to a cluster (needs `pip install
    'envduels[ray]'`), else in this machine's harness worker processes (`workers`, default one
    per core). Conventions in `envduels._gym_vector`."""
    from envduels._gym_vector import LocalVectorEnv, RayVectorEnv

    spec = make(name_or_path).env_spec
    ray = sys.modules.get("ray")
    if address is None and not (ray is not None and ray.is_initialized()):
        options = {k: v for k, v in kwargs.items() if k != "sandboxes_per_cpu"}
        return LocalVectorEnv(spec, num_envs, **options)   # type: ignore[arg-type]
    options = {k: v for k, v in kwargs.items() if k != "workers"}
    return RayVectorEnv(spec, num_envs, address=address, **options)   # type: ignore[arg-type]
