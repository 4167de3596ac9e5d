"""Instances held by another process: the host that holds them, and the caller's proxy.

Two pools hold their sandboxes outside the caller's process: `HarnessPool` (local harness
worker processes, `_harness.py`) and `RayEnvPool` (a host actor per Ray node, `ray_pool.py`).
Both use these pieces:

- `InstanceHost` runs in the holding process: an ordinary `EnvPool` and its open instances by
  id. Every method returns plain values (tuples of JSON-able values): environment faults are
  values, so an exception that crosses the process boundary always means the host broke.
- `RemoteEnvInstance` is the caller's side: the surface of `EnvInstance` (reset, step,
  oracle_action, close, alive, output, pid), the same faults, plus `SandboxLost` when the process
  that held the sandbox is gone.

Replies: ("ok", ...), ("fault", reason, detail, kind) with kind one of FAULT_KINDS,
("lost", reason), ("unavailable", reason).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

from ._instance import Played, StepResult
from ._limits import (
    EnvFault,
    HarnessCapacity,
    SandboxLimits,
    SandboxLost,
    SandboxStartError,
    SandboxUnavailable,
)

if TYPE_CHECKING:
    from ._instance import EnvInstance
    from ._pool import EnvPool

# the class of fault a reply names, by the name it travels under (most specific first)
FAULT_KINDS: dict[str, type[EnvFault]] = {
    "capacity": HarnessCapacity, "lost": SandboxLost, "start": SandboxStartError, "env": EnvFault,
}


def fault_reply(fault: EnvFault) -> tuple[str, str, str, str]:
    """`fault` as a reply value; `raise_reply` raises it again as the same class."""
    kind = next(k for k, cls in FAULT_KINDS.items() if isinstance(fault, cls))
    return ("fault", fault.reason, fault.detail, kind)


def fault_of(reply: tuple[Any, ...] | list[Any]) -> EnvFault:
    """The fault a "fault" reply (`fault_reply`'s) names, as its own class."""
    _, reason, detail, fault_kind = reply
    return FAULT_KINDS.get(fault_kind, SandboxStartError)(reason, detail)


def raise_reply(reply: tuple[Any, ...] | list[Any]) -> None:
    """Raise what a non-"ok" reply says (nothing for "ok")."""
    kind = reply[0]
    if kind == "fault":
        raise fault_of(reply)
    if kind == "lost":
        raise SandboxLost(reply[1])
    if kind == "unavailable":
        raise SandboxUnavailable(reply[1])


class InstanceHost:
    """Holds sandboxed instances for callers in other processes (see the module docstring).

    `pool_options` go to the `EnvPool` (warm, max_warm, templates), made on first use."""

    def __init__(self, limits: SandboxLimits, unsafe_no_sandbox: bool,
                 **pool_options: Any) -> None:
        self._limits = limits
        self._unsafe = unsafe_no_sandbox
        self._pool_options = pool_options
        self._pool: EnvPool | None = None
        self._instances: dict[int, EnvInstance] = {}
        self._ids = itertools.count(1)

    def _env_pool(self) -> EnvPool:
        if self._pool is None:
            from ._pool import EnvPool
            self._pool = EnvPool(self._limits, unsafe_no_sandbox=self._unsafe,
                                 **self._pool_options)
        return self._pool

    @property
    def open_instances(self) -> int:
        return len(self._instances)

    def uses_templates(self) -> bool:
        """Whether this host's instances come from templates now (`EnvPool.uses_templates`)."""
        return self._env_pool().uses_templates

    def expect(self, opens: int | None) -> None:
        self._env_pool().expect(opens)

    async def prepare(self, sources: list[str], replay: bool = False, instances: int = 0) -> None:
        """`EnvPool.prepare`: start these templates (and fork instances ahead) in the
        background."""
        self._env_pool().prepare(sources, replay=bool(replay), instances=int(instances))

    async def open(self, source: str, class_name: str | None,
                   max_turns: int | None, replay: bool = False) -> tuple[Any, ...]:
        """("ok", id, class name, max turns, has oracle, pid, ready workers) or a fault."""
        pool = self._env_pool()
        try:
            instance = await pool.open(source, class_name=class_name, max_turns=max_turns,
                                       replay=replay)
        except SandboxUnavailable as err:
            return ("unavailable", str(err))
        except EnvFault as fault:
            return fault_reply(fault)
        iid = next(self._ids)
        self._instances[iid] = instance
        return ("ok", iid, instance.class_name, instance.max_turns, instance.has_oracle,
                instance.pid, pool.ready)

    async def call(self, iid: int, op: str, arg: int | str | list[Any] | None) -> tuple[Any, ...]:
        instance = self._instances.get(iid)
        if instance is None:   # a restarted host: the instance died with its predecessor
            return ("lost", "the sandbox's host was restarted")
        try:
            # the caller's RemoteEnvInstance checked the argument's type already
            if op == "reset" and (arg is None or isinstance(arg, int)):
                obs, info = await instance.reset(arg)
                return ("ok", obs, info)
            if op == "step" and isinstance(arg, str):
                return ("ok", dataclasses.astuple(await instance.step(arg)))
            if op == "oracle_action":
                return ("ok", await instance.oracle_action())
            if op == "output":
                return ("ok", instance.output, instance.alive)
            if op == "run" and _run_arg(arg):
                played = await instance.run(arg[0], arg[1])
                return ("ok", None if played.start is None else list(played.start),
                        [dataclasses.astuple(step) for step in played.steps],
                        None if played.fault is None else fault_reply(played.fault))
        except EnvFault as fault:
            return fault_reply(fault)
        raise ValueError(f"unknown op {op!r} (or a wrong argument for it: {type(arg).__name__})")

    async def close(self, iid: int, wait: bool = False) -> None:
        """Kill instance `iid`; with `wait`, return once no process of it is left."""
        instance = self._instances.pop(iid, None)
        if instance is not None:
            await instance.close(wait=wait)

    async def shutdown(self) -> None:
        self._instances.clear()
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.aclose()


def _run_arg(arg: object) -> TypeGuard[list[Any]]:
    """Whether `arg` is `run`'s [seed, actions]: an int or None, and a list of str."""
    return (isinstance(arg, list) and len(arg) == 2
            and (arg[0] is None or (isinstance(arg[0], int) and not isinstance(arg[0], bool)))
            and isinstance(arg[1], list) and all(isinstance(a, str) for a in arg[1]))


class Holder(Protocol):
    """What a `RemoteEnvInstance` knows of the process holding it."""

    open: int
    dead: str | None


class Transport(Protocol):
    """The pool side of a `RemoteEnvInstance`: how calls reach the holder."""

    async def host_call(self, holder: Any, iid: int, op: str,
                        arg: int | str | list[Any] | None) -> tuple[Any, ...]: ...

    async def host_close(self, holder: Any, iid: int, *, wait: bool) -> None: ...

    def slot_freed(self) -> None: ...


class RemoteEnvInstance:
    """An `EnvInstance` held by another process (a harness worker, a Ray node's host): same
    methods, same faults, plus `SandboxLost` when that process goes away. Calls are
    serialized, as locally; after a fault every call raises the same fault again."""

    def __init__(self, transport: Transport, holder: Holder, iid: int, *, class_name: str,
                 max_turns: int, has_oracle: bool, pid: int, node: str = "") -> None:
        self._transport, self._host, self._iid = transport, holder, iid
        self.class_name, self.max_turns, self.has_oracle = class_name, max_turns, has_oracle
        self.pid = pid           # in its holder's pid space, for diagnostics
        self.node = node
        self._lock = asyncio.Lock()
        self._dead: tuple[Any, ...] | None = None   # the reply that ended it
        self._ending: asyncio.Task[None] | None = None   # its kill after a cancelled call
        self._output = ""
        self._closed = False

    @property
    def holder(self) -> Holder:
        """The process (record) that holds this instance."""
        return self._host

    @property
    def alive(self) -> bool:
        return self._dead is None and not self._closed

    @property
    def output(self) -> str:
        """What the environment printed so far, as of its last `fetch_output()`."""
        return self._output

    async def _call(self, op: str, arg: int | str | list[Any] | None) -> tuple[Any, ...]:
        async with self._lock:
            if self._dead is not None:
                raise_reply(self._dead)   # the same fault again: the host's stays the host's
            if self._closed:
                raise EnvFault("instance is closed")
            try:
                reply = await self._transport.host_call(self._host, self._iid, op, arg)
            except SandboxLost as err:
                self._dead = ("lost", err.reason)
                raise
            except asyncio.CancelledError:
                # as in-process: the environment is somewhere inside the call, so nothing it
                # says later can be trusted; its holder kills it now, not at its deadline
                if self._dead is None:
                    self._dead = ("fault", f"{op} was cancelled", "", "env")
                if self._host.dead is None:
                    self._ending = asyncio.get_running_loop().create_task(
                        self._transport.host_close(self._host, self._iid, wait=False))
                raise
            if reply[0] != "ok":
                self._dead = tuple(reply)
                raise_reply(reply)
            return tuple(reply)

    async def reset(self, seed: int | None = None) -> tuple[str, dict]:
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
        _, obs, info = await self._call("reset", seed)
        return obs, info

    async def step(self, action: str) -> StepResult:
        if not isinstance(action, str):
            raise TypeError(f"action must be a str, got {type(action).__name__}")
        _, values = await self._call("step", action)
        return StepResult(*values)

    async def run(self, seed: int | None, actions: list[str]) -> Played:
        """As `EnvInstance.run`, in one round trip to the holder."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
        if not all(isinstance(a, str) for a in actions):
            raise TypeError("actions must be strs")
        _, start, steps, fault = await self._call("run", [seed, list(actions)])
        played = Played(None if start is None else (start[0], start[1]),
                        [StepResult(*values) for values in steps])
        if fault is None:
            return played
        self._dead = tuple(fault)   # as after a fault of its own call: every later one raises it
        return dataclasses.replace(played, fault=fault_of(fault))

    async def oracle_action(self) -> str:
        _, action = await self._call("oracle_action", None)
        return action

    async def fetch_output(self) -> str:
        """Bring the environment's printed output over from its holder (diagnostics)."""
        with contextlib.suppress(EnvFault):
            _, self._output, _alive = await self._call("output", None)
        return self._output

    async def close(self, *, wait: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        self._host.open -= 1
        self._transport.slot_freed()
        if self._host.dead is None:
            await self._transport.host_close(self._host, self._iid, wait=wait)
