"""`envduels.gym.make_vec`: a Gymnasium vector environment whose sandboxes run in this machine's
harness worker processes (`LocalVectorEnv`) or on a Ray cluster (`RayVectorEnv`).

Each sub-environment behaves exactly like `envduels.gym.EnvDuelsGymEnv` (same observations,
format errors, turn cap, hint option, faults as truncation); only where its sandbox runs
differs. The `num_envs` sub-environments step concurrently: one call to `step(actions)` sends
every action to its node at once and returns when all have answered.

Gymnasium conventions: observations and actions are tuples of strings (`batch_space(Text)`),
rewards float64 and flags bool arrays, `infos` a dict of arrays with `_key` masks
(`VectorEnv._add_info`). Autoreset is NEXT_STEP: the `step` after a sub-environment's episode
ended resets it (reward 0, both flags False) and ignores its action, as Gymnasium's own vector
environments do by default.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar, Unpack

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from envduels._gym_env import EnvDuelsGymEnv, GymOptions, Info

if TYPE_CHECKING:
    from envduels.envs import EnvSpec
    from envduels.sandbox import HarnessPool, RemoteEnvInstance, StepResult
    from envduels.sandbox.ray_pool import RayEnvPool

T = TypeVar("T")


class VecOptions(GymOptions, total=False):
    """`make_vec`'s keyword arguments: `EnvDuelsGymEnv`'s, the sandboxes a Ray node holds per
    CPU, and the harness workers on this machine (None: one per core)."""

    sandboxes_per_cpu: int
    workers: int | None


class _Loop:
    """An event loop in a daemon thread: the Ray pool's calls are awaited there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                        name="envduels-ray-vector")
        self._thread.start()

    def run(self, coro: Coroutine[object, object, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


class _SyncRemote:
    """A `RemoteEnvInstance` with the blocking surface `EnvDuelsGymEnv` uses."""

    def __init__(self, loop: _Loop, instance: RemoteEnvInstance) -> None:
        self._loop, self._instance = loop, instance

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, object]]:
        return self._loop.run(self._instance.reset(seed))

    def step(self, action: str) -> StepResult:
        return self._loop.run(self._instance.step(action))

    def close(self) -> None:
        self._loop.run(self._instance.close(wait=False))


class _RemoteGymEnv(EnvDuelsGymEnv):
    def __init__(self, spec: EnvSpec, *, loop: _Loop, pool: RayEnvPool | HarnessPool,
                 **kwargs: Unpack[GymOptions]) -> None:
        super().__init__(spec, **kwargs)
        self._loop, self._pool = loop, pool

    def _open(self) -> _SyncRemote:
        instance = self._loop.run(self._pool.open(self.env_spec.source,
                                                  class_name=self.env_spec.class_name,
                                                  max_turns=self.env_spec.max_turns))
        return _SyncRemote(self._loop, instance)


class PoolVectorEnv(VectorEnv):
    """`num_envs` copies of one environment, each in its own sandbox held by another process
    (see the subclasses). kwargs as `EnvDuelsGymEnv` (hint_in_first_observation, parse_reply,
    max_turns, limits)."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}   # each instance adds its env_id

    def _make_pool(self) -> RayEnvPool | HarnessPool:
        raise NotImplementedError

    async def _start_pool(self) -> None:
        pass

    def __init__(self, spec: EnvSpec, num_envs: int, **kwargs: Unpack[GymOptions]) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.num_envs = num_envs
        self._loop = _Loop()
        try:
            self._pool = self._make_pool()
            self._loop.run(self._start_pool())
        except BaseException:
            self._loop.stop()
            raise
        self.envs = [_RemoteGymEnv(spec, loop=self._loop, pool=self._pool, **kwargs)
                     for _ in range(num_envs)]
        self._threads = ThreadPoolExecutor(max_workers=num_envs, thread_name_prefix="envduels-vec")
        first = self.envs[0]
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(first.observation_space, num_envs)
        self.action_space = batch_space(first.action_space, num_envs)
        self.metadata = {**type(self).metadata, "env_id": spec.id}
        self._needs_reset = np.ones(num_envs, dtype=bool)

    def reset(self, *, seed: int | list[int | None] | None = None,
              options: dict[str, object] | None = None) -> tuple[tuple[str, ...], Info]:
        """Reset every sub-environment; an int `seed` gives sub-environment i the seed
        `seed + i`, a list gives one each. `options` go to every sub-environment."""
        if seed is None or isinstance(seed, int):
            seeds: list[int | None] = [None if seed is None else seed + i
                                       for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"{len(seeds)} seeds for {self.num_envs} environments")
        results = list(self._threads.map(
            lambda i: self.envs[i].reset(seed=seeds[i], options=options), range(self.num_envs)))
        infos: Info = {}
        for i, (_obs, info) in enumerate(results):
            infos = self._add_info(infos, info, i)
        self._needs_reset[:] = False
        return tuple(obs for obs, _ in results), infos

    def step(self, actions: Iterable[str]) -> tuple[tuple[str, ...], np.ndarray, np.ndarray,
                                                    np.ndarray, Info]:
        """Step every sub-environment at once (NEXT_STEP autoreset, see the module docstring)."""
        actions = list(actions)
        if len(actions) != self.num_envs:
            raise ValueError(f"{len(actions)} actions for {self.num_envs} environments")

        def one(i: int) -> tuple[str, float, bool, bool, Info]:
            if self._needs_reset[i]:
                obs, info = self.envs[i].reset()
                return obs, 0.0, False, False, info
            return self.envs[i].step(actions[i])

        results = list(self._threads.map(one, range(self.num_envs)))
        rewards = np.array([r[1] for r in results], dtype=np.float64)
        terminated = np.array([r[2] for r in results], dtype=bool)
        truncated = np.array([r[3] for r in results], dtype=bool)
        infos: Info = {}
        for i, r in enumerate(results):
            infos = self._add_info(infos, r[4], i)
        self._needs_reset = terminated | truncated
        return tuple(r[0] for r in results), rewards, terminated, truncated, infos

    def close_extras(self, **kwargs: object) -> None:
        for env in self.envs:
            env.close()
        self._threads.shutdown(wait=True)
        self._loop.run(self._pool.aclose())
        self._loop.stop()


class LocalVectorEnv(PoolVectorEnv):
    """Sandboxes in this machine's harness worker processes (`workers`, None: one per core):
    the sub-environments' sandbox work is spread over the cores."""

    def __init__(self, spec: EnvSpec, num_envs: int, *, workers: int | None = None,
                 **kwargs: Unpack[GymOptions]) -> None:
        self._workers = workers
        self._options = kwargs
        super().__init__(spec, num_envs, **kwargs)

    def _make_pool(self) -> HarnessPool:
        from envduels.sandbox import HarnessPool, SandboxLimits

        self._harness = HarnessPool(self._options.get("limits") or SandboxLimits(),
                                    unsafe_no_sandbox=self._options.get("unsafe_no_sandbox", False),
                                    workers=self._workers, warm=0)
        return self._harness

    async def _start_pool(self) -> None:
        await self._harness.start()


class RayVectorEnv(PoolVectorEnv):
    """Sandboxes on the Ray cluster at `address` (joined, or the one this process is connected
    to), `sandboxes_per_cpu` per CPU of each node."""

    def __init__(self, spec: EnvSpec, num_envs: int, *, address: str | None = None,
                 sandboxes_per_cpu: int = 4, **kwargs: Unpack[GymOptions]) -> None:
        self._address, self._per_cpu = address, sandboxes_per_cpu
        self._options = kwargs
        super().__init__(spec, num_envs, **kwargs)

    def _make_pool(self) -> RayEnvPool:
        from envduels.sandbox import SandboxLimits
        from envduels.sandbox.ray_pool import RayEnvPool

        self._ray_pool = RayEnvPool(self._options.get("limits") or SandboxLimits(),
                                    unsafe_no_sandbox=self._options.get("unsafe_no_sandbox", False),
                                    address=self._address, sandboxes_per_cpu=self._per_cpu)
        return self._ray_pool

    async def _start_pool(self) -> None:
        await self._ray_pool.start()   # a host per node, each checking its sandbox
