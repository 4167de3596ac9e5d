"""EnvInstance: one environment instance in its own worker, with strict result checks."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field

from ._channel import JSON, Frame, WorkerChannel
from ._limits import EnvFault, SandboxLimits


@dataclass(frozen=True)
class StepResult:
    """What one `step` returned, after validation (types are exactly these)."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, JSON] = field(default_factory=dict)


@dataclass(frozen=True)
class Played:
    """What `run(seed, actions)` got: the reset's (observation, info), None if it faulted;
    the steps that ran, in order; and the fault that ended it early (returned, not raised),
    or None when every action was played."""

    start: tuple[str, dict[str, JSON]] | None
    steps: list[StepResult]
    fault: EnvFault | None = None


def truncate_observation(text: str, cap: int, total: int | None = None) -> str:
    """Keep the first `cap` characters and say visibly how many of `total` were cut."""
    total = len(text) if total is None or total < len(text) else total
    if total <= cap:
        return text
    return text[:cap] + f"\n...[truncated {total - cap} characters]"


def _type_name(value: object) -> str:
    if isinstance(value, dict) and set(value) == {"$type"}:
        return str(value["$type"])
    return {dict: "dict", list: "list", str: "str", bool: "bool", int: "int", float: "float",
            type(None): "NoneType"}.get(type(value), type(value).__name__)


class EnvInstance:
    """One loaded environment in its own sandboxed worker process.

    Calls are serialized; each has the pool's per-call wall deadline. Any EnvFault (the
    environment raised, timed out, broke a limit, returned a wrong type, violated the protocol
    or exited) kills the worker: every later call raises EnvFault too. `close()` is idempotent
    and leaves no process behind.
    """

    def __init__(self, channel: WorkerChannel, limits: SandboxLimits, *, class_name: str,
                 max_turns: int, has_oracle: bool) -> None:
        self._channel = channel
        self._limits = limits
        self._lock = asyncio.Lock()
        self.class_name = class_name
        self.max_turns = max_turns
        self.has_oracle = has_oracle

    @property
    def output(self) -> str:
        """What the environment printed on stdout/stderr so far (capped), for diagnostics."""
        self._channel.drain_output()
        return self._channel.output.decode("utf-8", "replace")

    async def fetch_output(self) -> str:
        """`output`, as `RemoteEnvInstance.fetch_output` brings it over from its holder: one
        call for callers that may hold either."""
        return self.output

    holder = None
    """The harness process holding it, other than the caller's (`RemoteEnvInstance.holder`):
    none, it is held by this one."""

    @property
    def pid(self) -> int:
        """Host pid of the outer sandbox process (bwrap; for an instance forked from a
        template, its init), for diagnostics and tests. Never signal it: once the instance
        has exited the kernel may give the number to another process (the harness signals
        a forked instance through its pidfd)."""
        return self._channel.pid

    @property
    def alive(self) -> bool:
        return self._channel.dead is None

    async def _call(self, op: str, payload: Frame) -> Frame:
        async with self._lock:
            reply = await self._channel.call({"op": op, **payload}, op,
                                             self._limits.step_timeout_s)
            if reply.get("ok") is not True:
                error = reply.get("error")
                reason = error if isinstance(error, str) and error else f"{op} failed"
                detail = reply.get("detail")
                detail = detail if isinstance(detail, str) else ""
                raise await self._fault(reason.splitlines()[0][:500] if reason else reason,
                                        detail)
            return reply

    async def _fault(self, reason: str, detail: str = "") -> EnvFault:
        fault = await self._channel.fail(reason)
        if detail:
            fault.detail = detail
        return fault

    async def reset(self, seed: int | None = None) -> tuple[str, dict[str, JSON]]:
        """Start an episode; returns (observation, info)."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
        reply = await self._call("reset", {"seed": seed})
        obs = await self._observation(reply, "reset")
        info = reply.get("info")
        if not isinstance(info, dict) or set(info) == {"$type"}:
            raise await self._fault(f"reset returned info of type {_type_name(info)}; expected a dict")
        return obs, info

    async def step(self, action: str) -> StepResult:
        """Play one action (the solver's `\\boxed{...}` string)."""
        if not isinstance(action, str):
            raise TypeError(f"action must be a str, got {type(action).__name__}")
        reply = await self._call("step", {"action": action})
        obs = await self._observation(reply, "step")
        raw = reply.get("reward")
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise await self._fault(f"step returned reward of type {_type_name(raw)}; "
                                    "expected a finite int or float")
        try:   # an int of 400 digits is valid JSON, and float() of it raises OverflowError
            reward = float(raw)
        except OverflowError:
            bits = raw.bit_length() if isinstance(raw, int) else 0
            raise await self._fault("step returned a reward out of range (an int of "
                                    f"{bits} bits; a float holds at most 1024)") from None
        if not math.isfinite(reward):
            raise await self._fault(f"step returned a non-finite reward ({reward})")
        flags = []
        for name in ("terminated", "truncated"):
            value = reply.get(name)
            if type(value) is not bool:
                raise await self._fault(f"step returned {name} of type {_type_name(value)}; "
                                        "expected True or False")
            flags.append(value)
        info = reply.get("info")
        if not isinstance(info, dict) or set(info) == {"$type"}:
            raise await self._fault(f"step returned info of type {_type_name(info)}; expected a dict")
        return StepResult(obs, reward, flags[0], flags[1], info)

    async def oracle_action(self) -> str:
        """The environment's own winning next action; EnvFault if absent or it misbehaves."""
        if not self.has_oracle:
            if self._channel.dead is not None:
                raise EnvFault(self._channel.dead)
            raise EnvFault("the environment has no oracle_action")
        reply = await self._call("oracle_action", {})
        action = reply.get("action")
        if not isinstance(action, str):
            raise await self._fault(f"oracle_action returned {_type_name(action)}; expected a str")
        return action

    async def _observation(self, reply: Frame, op: str) -> str:
        value, total = reply.get("observation"), reply.get("observation_chars")
        if not isinstance(value, str):
            raise await self._fault(f"{op} returned an observation of type {_type_name(value)}; "
                                    "expected a str")
        total = total if type(total) is int else None
        if total is not None:   # a forged count of 4,000 digits would lengthen the marker by that
            total = min(total, self._limits.memory_mb << 20)   # no str inside is longer
        return truncate_observation(value, self._limits.observation_max_chars, total)

    async def run(self, seed: int | None, actions: list[str]) -> Played:
        """`reset(seed)`, then `step` each action in order, up to the first fault: a whole
        known episode in one call (the replay audit's; through a harness worker or a Ray node
        it is one round trip instead of one per step)."""
        try:
            start = await self.reset(seed)
        except EnvFault as fault:
            return Played(None, [], fault)
        steps: list[StepResult] = []
        for action in actions:
            try:
                steps.append(await self.step(action))
            except EnvFault as fault:
                return Played(start, steps, fault)
        return Played(start, steps)

    async def close(self, *, wait: bool = True) -> None:
        """Kill the worker and everything it started; safe to call more than once.

        With `wait` (the default) no process of the instance is left when it returns. With
        `wait=False` the tree is killed at once and collected in the background, off the
        caller's path; `EnvPool.aclose()` still waits for that collection.
        """
        await self._channel.close(wait=wait)
