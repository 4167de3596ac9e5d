"""Sandboxed environment instances on the nodes of a Ray cluster (`executor: {kind: ray}`).

`RayEnvPool` has the surface of `EnvPool` (`open`, `expect`, `ready`, `aclose`) and hands out
`RemoteEnvInstance`s with the surface of `EnvInstance`, so validation, episodes and the Gym
adapter run unchanged. What stays on the driver: everything but the environment code (players,
limits, the response cache, the run database). What runs on the cluster: one `SandboxHost` actor
per node, each holding an ordinary `EnvPool` there, so every instance is the same bubblewrap
sandbox as on one machine (docs/engine.md, "Executors").

Why hosts and not one actor per instance: a Ray actor is a fresh Python worker process (about a
second of CPU to import Ray); an episode's sandbox costs about 20 ms. A host per node declares the
node's CPUs and the memory of the sandboxes it may hold, so Ray places and accounts for the
environment code, and a sandbox costs what it costs locally.

Faults: a node, host or worker that is lost raises `SandboxLost` on the driver, a
`SandboxStartError` (the host's fault): an episode in flight ends `error` (retried on resume),
a validation attempt stays unjudged. Nothing the environment does is reported that way: its
faults arrive as values and are raised as `EnvFault` here, exactly as locally.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import Iterable
from types import ModuleType
from typing import Any

from ._limits import (
    EnvFault,
    SandboxLimits,
    SandboxLost,
    SandboxStartError,
    SandboxUnavailable,
    check_open,
)
from ._remote import InstanceHost, RemoteEnvInstance, raise_reply

__all__ = ["RayEnvPool", "RemoteEnvInstance", "SandboxHost", "SandboxLost", "connect"]

DEFAULT_SANDBOXES_PER_CPU = 4
HOST_START_TIMEOUT_S = 120.0   # episodes mostly wait for the model; a waiting sandbox is frozen


def _ray() -> ModuleType:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        from envduels.errors import UserError
        raise UserError("executor.kind is 'ray' but Ray is not installed: "
                        "pip install 'envduels[ray]'") from None
    return ray


def connect(address: str | None = None) -> ModuleType:
    """Join the Ray cluster at `address` ('auto': the one this machine belongs to) unless this
    process is connected already. Usage reporting is off. Returns the `ray` module."""
    ray = _ray()
    if not ray.is_initialized():
        _check_reachable(address)
        try:
            ray.init(address=address or "auto", logging_level="WARNING", log_to_driver=False,
                     include_dashboard=False)
        except (ConnectionError, RuntimeError, ValueError) as err:
            from envduels.errors import UserError
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserError(f"cannot join the Ray cluster at {address or 'auto'!r} ({first}); "
                            "start one with `ray start --head` or set executor.address") from None
    return ray


def _check_reachable(address: str | None) -> None:
    """A HOST:PORT nobody answers on is a one-line error now: Ray itself retries it for minutes,
    logging every attempt."""
    from envduels._net import unreachable

    if not address or address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    from envduels.errors import UserError
    if not host or not port.isdigit():
        raise UserError(f"executor.address {address!r} is not HOST:PORT or 'auto'")
    if (why := unreachable(host, int(port), timeout_s=5)) is not None:
        raise UserError(f"cannot reach the Ray cluster at {address} ({why}); "
                        "start it with `ray start --head` or fix executor.address")


# ---------------------------------------------------------------- on the node

class SandboxHost(InstanceHost):
    """Runs sandboxed instances on its node. A Ray async actor; every method returns plain
    values (environment faults are values, so a `RayTaskError` always means the host broke)."""

    def __init__(self, limits: dict[str, Any], unsafe_no_sandbox: bool, capacity: int) -> None:
        super().__init__(SandboxLimits(**limits), unsafe_no_sandbox, warm=0, max_warm=capacity)

    async def check(self) -> tuple[str, str]:
        """("ok", node id) after starting and stopping one sandbox here, or ("unavailable",
        reason) when bubblewrap cannot run on this node."""
        import ray
        node = ray.get_runtime_context().get_node_id()
        try:
            pool = self._env_pool()
            channel = await pool._spawn()
            await channel.close()
        except SandboxUnavailable as err:
            return "unavailable", f"node {node[:12]}: {err}"
        except EnvFault:
            pass   # a passing start failure is the work's to report, as locally
        return "ok", node


# ---------------------------------------------------------------- on the driver

@dataclasses.dataclass
class _Host:
    actor: Any
    node: str
    capacity: int
    open: int = 0
    dead: str | None = None


class RayEnvPool:
    """`EnvPool` on a Ray cluster: one `SandboxHost` per alive node (started by `start()`),
    each holding at most `capacity` sandboxes (`sandboxes_per_cpu` × the node's CPUs unless
    given). `open()` goes to the host with the most free room and waits when every host is full.
    Nodes that join after `start()` are not used by this pool."""

    def __init__(self, limits: SandboxLimits, *, unsafe_no_sandbox: bool = False,
                 address: str | None = None, sandboxes_per_cpu: int = DEFAULT_SANDBOXES_PER_CPU,
                 capacity_per_node: int | None = None) -> None:
        self.limits = limits
        self.unsafe_no_sandbox = unsafe_no_sandbox
        self.address = address
        self.sandboxes_per_cpu = sandboxes_per_cpu
        self.capacity_per_node = capacity_per_node
        self._hosts: list[_Host] = []
        self._room: asyncio.Condition | None = None
        self._closed = False

    async def __aenter__(self) -> RayEnvPool:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def hosts(self) -> list[str]:
        """Node ids of the live hosts."""
        return [h.node for h in self._hosts if h.dead is None]

    async def start(self) -> None:
        """Start a host on every alive node and check that each can run a sandbox there.
        SandboxUnavailable names the first node that cannot."""
        if self._hosts:
            return
        ray = connect(self.address)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        host_cls = ray.remote(SandboxHost)
        limits = dataclasses.asdict(self.limits)
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            resources = node.get("Resources", {})
            cpus = int(resources.get("CPU", 0))
            if cpus < 1:
                continue   # e.g. a head started with --num-cpus=0: nothing may run there
            capacity = self.capacity_per_node or self.sandboxes_per_cpu * cpus
            # never ask for more memory than the node has: the host would wait forever
            capacity = max(1, min(capacity, int(resources.get("memory", 0))
                                  // (self.limits.memory_mb * 2**20) or capacity))
            actor = host_cls.options(
                num_cpus=cpus, memory=capacity * self.limits.memory_mb * 2**20,
                max_concurrency=max(64, 4 * capacity), max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            ).remote(limits, self.unsafe_no_sandbox, capacity)
            self._hosts.append(_Host(actor, node["NodeID"], capacity))
        if not self._hosts:
            raise SandboxStartError("the Ray cluster has no alive node")
        try:
            replies = await asyncio.wait_for(
                asyncio.gather(*(self._remote(h, h.actor.check) for h in self._hosts),
                               return_exceptions=True), HOST_START_TIMEOUT_S)
        except TimeoutError:
            from envduels.errors import UserError
            raise UserError(
                f"the Ray cluster did not start a sandbox host on every node within "
                f"{HOST_START_TIMEOUT_S:.0f} s (each asks for its node's CPUs and "
                "sandboxes_per_cpu x sandbox.memory_mb of memory; another job may hold them): "
                "free the cluster or lower executor.sandboxes_per_cpu") from None
        for reply in replies:
            if isinstance(reply, SandboxLost):   # that node is gone already: the others work
                continue
            if isinstance(reply, BaseException):
                raise reply
            if reply[0] == "unavailable":
                raise SandboxUnavailable(reply[1])

    async def _remote(self, host: _Host, method: Any, *args: Any) -> Any:
        """Call `method` of `host`'s actor; SandboxLost when the host, its worker or its node
        is gone (and the host is not used again)."""
        ray = _ray()
        if host.dead is not None:
            raise SandboxLost(host.dead)
        try:
            return await method.remote(*args)
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                ray.exceptions.NodeDiedError, ray.exceptions.ObjectLostError,
                ray.exceptions.ActorUnavailableError) as err:
            host.dead = f"the cluster lost the sandbox's node or process ({type(err).__name__})"
            self.slot_freed()
            raise SandboxLost(host.dead) from None
        except ray.exceptions.RayError as err:
            # anything else Ray raises (a host that broke, disk or object store full, an RPC
            # failure) is the cluster's fault for this call, never the environment's
            raise SandboxLost(f"the cluster failed this call ({type(err).__name__})") from None

    async def host_call(self, host: _Host, iid: int, op: str,
                        arg: int | str | list[Any] | None) -> tuple[Any, ...]:
        return await self._remote(host, host.actor.call, iid, op, arg)

    async def host_close(self, host: _Host, iid: int, *, wait: bool) -> None:
        ref = host.actor.close.remote(iid)
        if wait:
            with contextlib.suppress(Exception):
                await ref

    def slot_freed(self) -> None:
        if self._room is not None:
            room = self._room

            async def notify() -> None:
                async with room:
                    room.notify_all()
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().create_task(notify())

    @property
    def ready(self) -> int:
        """Free sandbox slots on live hosts (sandboxes themselves start on their node)."""
        return sum(h.capacity - h.open for h in self._hosts if h.dead is None)

    def expect(self, opens: int | None) -> None:
        """Spread a batch announcement over the hosts, in proportion to their capacity."""
        live = [h for h in self._hosts if h.dead is None]
        total = sum(h.capacity for h in live) or 1
        for h in live:
            share = None if opens is None else -(-opens * h.capacity // total)
            h.actor.expect.remote(share)

    def prepare(self, sources: Iterable[str], *, replay: bool = False, instances: int = 0) -> None:
        """As `EnvPool.prepare`, on as many live hosts as `instances` asks for (at least
        one), those with the most free room (where opens go), each forking its share."""
        live = sorted((h for h in self._hosts if h.dead is None),
                      key=lambda h: h.capacity - h.open, reverse=True)
        spread = max(1, min(max(0, instances), len(live)))
        share = -(-max(0, instances) // spread)
        for h in live[:spread]:
            h.actor.prepare.remote(list(dict.fromkeys(sources)), replay, share)

    async def open(self, source: str, *, class_name: str | None = None,
                   max_turns: int | None = None, replay: bool = False,
                   apart_from: object | None = None) -> RemoteEnvInstance:
        """As `EnvPool.open` (`replay` included), on the host with the most free room;
        `apart_from` (a replay's play's `holder`) is never chosen while another host lives."""
        check_open(self._closed, source, max_turns)
        await self.start()
        if self._room is None:
            self._room = asyncio.Condition()
        async with self._room:
            while True:
                live = [h for h in self._hosts if h.dead is None]
                if not live:
                    raise SandboxLost("every node of the Ray cluster that held sandboxes is lost")
                live = [h for h in live if h is not apart_from] or live
                host = max(live, key=lambda h: h.capacity - h.open)
                if host.open < host.capacity:
                    host.open += 1
                    break
                await self._room.wait()
        try:
            reply = await self._remote(host, host.actor.open, source, class_name, max_turns,
                                       replay)
        except BaseException:
            host.open -= 1
            self.slot_freed()
            raise
        if reply[0] != "ok":
            host.open -= 1
            self.slot_freed()
            raise_reply(reply)
        _, iid, name, turns, oracle, pid = reply[:6]
        return RemoteEnvInstance(self, host, iid, class_name=name, max_turns=turns,
                                 has_oracle=oracle, pid=pid, node=host.node)

    async def aclose(self) -> None:
        """Kill every sandbox of every host and stop the hosts (the cluster keeps running)."""
        self._closed = True
        ray = _ray()
        hosts, self._hosts = self._hosts, []
        live = [h for h in hosts if h.dead is None]
        await asyncio.gather(*(self._remote(h, h.actor.shutdown) for h in live),
                             return_exceptions=True)
        for h in hosts:
            with contextlib.suppress(Exception):
                ray.kill(h.actor)
