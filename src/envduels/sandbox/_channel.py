"""The parent's side of one worker: framed requests with deadlines, output capture, kill.

Everything is driven by the event loop (`add_reader` on the pipes and on a pidfd), so hundreds
of workers need no thread each. Every way a call can fail ends in `fail()`: the whole process
tree is killed and the call raises EnvFault with one line saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import math
import os
import re
import select
import shutil
import signal
import threading
import time
from array import array
from collections import deque
from typing import NoReturn, TypeAlias

from envduels._text import valid_text

from ._launcher import (
    LAUNCHER_GRACE_S,
    Launched,
    children,
    end_under_launcher,
    host,
    kill_launcher,
)
from ._limits import EnvFault, SandboxLimits

# A decoded JSON value, as the frames carry them (keys are always strings in JSON).
JSON: TypeAlias = "str | int | float | bool | None | list[JSON] | dict[str, JSON]"
Frame: TypeAlias = "dict[str, JSON]"   # one request or reply


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"non-finite number {name}")


def _finite_float(text: str) -> float:
    """A JSON number with a fraction or exponent; `1e400` would otherwise become inf (in an
    info dict, say), which strict JSON readers of the store and the reports refuse."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"non-finite number {text[:20]}")
    return value


# Frames are parsed only after their nesting is known to be shallow: `json.loads` and `_valid`
# recurse once per level, so 200 KB of `[[[...` would otherwise raise RecursionError (or worse)
# in the parent. An honest worker nests at most a few levels beyond `_plain`'s cap of 20.
MAX_DEPTH = 64
FREEZE_GRACE_S = 0.002
# Linear time, also on hostile input: escapes go first, so that a string is a plain "[^"]*"
# (a pattern with escapes inside backtracks quadratically on `["\"\"\"...` with no end).
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*"')
_BRACKETS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")   # signed: +1, +1, -1, -1
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[{]}")


# The worker caps `info` (INFO_MAX_TOKENS in _worker.py); beyond it a frame holds at most an
# observation's characters and a few short fields. Commas, colons, quotes and opening brackets
# bound the values that json.loads and `_valid` build (each costs microseconds on the event
# loop) and the strings `_too_deep` blanks, so a frame with more is refused before either
# runs: counting them is a fast C scan.
INFO_MAX_TOKENS = 10000
_FRAME_SLACK_TOKENS = 4096   # keys, ids, flags, an error's text and detail (2,300 characters)


def _token_limit(observation_max_chars: int) -> int:
    """The most commas, colons, quotes and opening brackets an honest reply holds: a full
    info, an observation of nothing but such characters, and the reply's own fields."""
    return INFO_MAX_TOKENS + observation_max_chars + _FRAME_SLACK_TOKENS


def _tokens(frame: bytes) -> int:
    return sum(frame.count(c) for c in (b",", b":", b'"', b"[", b"{"))


def _too_deep(frame: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text `frame` opens more than `limit` nested brackets, found without
    recursion: strings are blanked, brackets become +1/-1 and the running sum is bounded."""
    if frame.count(b"[") + frame.count(b"{") <= limit:
        return False   # the usual frame: too few brackets to nest deeper
    text = _STRING.sub(b"", _ESCAPE.sub(b"_", frame))
    steps = array("b", text.translate(_BRACKETS, _NOT_BRACKETS))
    return max(itertools.accumulate(steps), default=0) > limit


def _valid(value: JSON) -> JSON:
    """`value` (decoded JSON) with every lone surrogate in its strings replaced by U+FFFD.

    Both directions cross a trust boundary: a solver's reply may hold lone surrogates (sent to
    the worker, which decodes strictly) and so may anything the environment returns or raises
    (kept in the store, which encodes UTF-8). Neither may stop an episode or a run.
    """
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, dict):
        return _valid_frame(value)
    if isinstance(value, list):
        return [_valid(v) for v in value]
    return value


def _valid_frame(frame: Frame) -> Frame:
    """`_valid` of one request or reply."""
    return {valid_text(k): _valid(v) for k, v in frame.items()}


log = logging.getLogger("envduels.sandbox")
_ADOPT_WARNED = threading.Event()


def _one_line(reason: str, limit: int = 500) -> str:
    """`reason` as one bounded line: the environment controls parts of it (its error text,
    its type names), and a reason is printed and stored as one line."""
    flat = _CONTROL.sub(" ", reason).strip(" ")
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


# What str.splitlines() breaks on. Other control characters are kept (the JSON verdict keeps
# them exactly); the terminal layer makes them printable.
_CONTROL = re.compile(r"[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]+")


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class WorkerChannel:
    """One live worker process. Not safe for concurrent calls: EnvInstance serializes them."""

    def __init__(self, launched: Launched, limits: SandboxLimits,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.launched = launched
        self.limits = limits
        self.loop = loop
        self.pid = launched.popen.pid
        self._born = time.monotonic()
        self.init_pid: int | None = None
        self.output = bytearray()
        self.dead: str | None = None          # the reason, once the worker is gone
        self._output_total = 0
        self._buf = bytearray()
        self._frames: deque[bytes] = deque()  # at most one: the reply to the call in flight
        self._in_flight = True                # a reply is expected (first: the greeting)
        self._freezing: asyncio.TimerHandle | None = None
        self._adopting: asyncio.Future[bool] | None = None
        self._problem: str | None = None      # a violation seen by a reader callback
        self._eof = False
        self._exited = False
        self._waiter: asyncio.Future[None] | None = None
        self._next_id = 1
        self._closed = False
        self._killed_by_us = False
        self._reaper: asyncio.Task[None] | None = None
        self.reaped = False                   # every process collected, every fd released
        self._pidfd: int | None = None
        # a forked instance's pidfd came from its clone (by pid it could be a reused one) and
        # is its ForkedProcess's to close
        self._own_pidfd = not launched.forked
        if launched.forked:
            self._pidfd = getattr(launched.popen, "pidfd", None)
        else:
            with contextlib.suppress(OSError, AttributeError):
                self._pidfd = os.pidfd_open(self.pid)
        self._oom_fd: int | None = None
        if launched.cgroup is not None:
            self._oom_fd = launched.cgroup.oom_eventfd()
        loop.add_reader(launched.response_r, self._on_response)
        loop.add_reader(launched.output_r, self._on_output)
        if self._pidfd is not None:
            loop.add_reader(self._pidfd, self._on_exit)
        if self._oom_fd is not None:
            loop.add_reader(self._oom_fd, self._on_oom)

    @property
    def usable(self) -> bool:
        """Alive, and nothing has happened to it since its last call."""
        return self.dead is None and not (self._exited or self._eof or self._problem
                                          or self._frames or self._buf)

    # ----- event-loop callbacks -------------------------------------------------------------
    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _woken_within(self, seconds: float) -> None:
        """Until `_wake` (a frame, EOF, the exit) or `seconds` pass, whichever is first."""
        self._waiter = self.loop.create_future()
        timer = self.loop.call_later(seconds, self._wake)
        try:
            await self._waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _on_response(self) -> None:
        try:
            data = os.read(self.launched.response_r, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._eof = True
            self.loop.remove_reader(self.launched.response_r)
            self._wake()
            return
        if self._problem is not None:
            return   # already condemned: drop, never buffer
        if not self._in_flight or self._frames:
            # Nothing may speak between calls (a thread or child flooding frames while the
            # solver thinks grew this buffer without bound), nor after the one reply.
            self._problem = ("protocol violation: unsolicited data from the environment "
                             + ("between calls" if not self._in_flight else "after its reply"))
            self.kill()
            self._wake()
            return
        self._buf += data
        while len(self._buf) >= 4 and self._problem is None:
            size = int.from_bytes(self._buf[:4], "big")
            if size > self.limits.frame_max_bytes:
                self._problem = (f"protocol violation: a frame of {size} bytes exceeds the "
                                 f"{self.limits.frame_max_bytes} byte cap")
                self.kill()
                break
            if len(self._buf) < 4 + size:
                break
            self._frames.append(bytes(self._buf[4:4 + size]))
            del self._buf[:4 + size]
            if self._buf:
                self._problem = ("protocol violation: unsolicited data from the environment "
                                 "after its reply")
                self.kill()
        self._wake()

    def _on_output(self) -> None:
        if self._closed:
            return
        try:
            data = os.read(self.launched.output_r, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.loop.remove_reader(self.launched.output_r)
            return
        self._output_total += len(data)
        room = self.limits.output_cap_bytes - len(self.output)
        if room > 0:
            self.output += data[:room]
        if self._output_total > self.limits.output_cap_bytes and self._problem is None:
            self._problem = (f"output flood: more than {self.limits.output_cap_bytes} bytes "
                             "on stdout/stderr")
            self.kill()
            self._wake()

    def _on_oom(self) -> None:
        if self._oom_fd is not None:
            with contextlib.suppress(OSError):
                os.read(self._oom_fd, 8)
        if self._problem is None:
            self._problem = f"memory limit exceeded ({self.limits.memory_mb} MiB)"
            self.kill()
            self._wake()

    def drain_output(self) -> None:
        """Read whatever output is already in the pipe (so `output` is current after a call)."""
        if self._closed:
            return
        for _ in range(64):
            before = self._output_total
            self._on_output()
            if self._output_total == before or self._problem is not None:
                return

    def _on_exit(self) -> None:
        self._exited = True
        if self._pidfd is not None:
            self.loop.remove_reader(self._pidfd)
        self._wake()

    # ----- calls ----------------------------------------------------------------------------
    async def wait_ready(self, timeout: float) -> None:
        """Wait for the worker's greeting (id 0)."""
        await self._receive(0, "start-up", time.monotonic() + timeout, timeout)
        if self.launched.forked:
            # its own pid 1 (which joined the instance's freezer group before the worker
            # existed: nothing to adopt)
            self.init_pid = self.pid
            return
        self.init_pid = self._find_init()
        group = self.launched.cgroup
        if group is not None and self.limits.freeze_idle and group.freezer is not None:
            # Every process of the sandbox exists now and no environment code has run yet.
            # Moving a process between v2 groups waits for an RCU grace period (~4 ms each,
            # measured), so it runs in a thread while the worker waits in the pool; the first
            # call waits for it. The idle worker itself is not frozen: it only waits for `load`.
            self._adopting = self.loop.run_in_executor(None, group.adopt, group.pids_inside())

    async def adopted(self) -> None:
        """Wait until the sandbox has joined its freezer group (started by `wait_ready`), so
        that the first call's deadline is the environment's alone."""
        if self._adopting is not None:
            await asyncio.shield(self._adopting)

    async def call(self, msg: Frame, what: str, timeout: float) -> Frame:
        """Send `msg` and return the worker's reply dict; EnvFault (and a dead worker) on any
        timeout, exit, flood or protocol violation. `what` names the call in reasons."""
        if self.dead is not None:
            raise EnvFault(self.dead)
        if not self._frames and not self._buf and self._readable_now():
            self._on_response()     # drain it now: data is unsolicited, EOF means it died
        if self._problem is not None:
            raise await self.fail(self._problem)
        if self._frames or self._buf:
            raise await self.fail("protocol violation: unsolicited data from the environment "
                                  f"before {what}")
        if self._eof or self._exited:
            raise await self._died(what)
        rid = self._next_id
        self._next_id += 1
        msg = {"id": rid, **_valid_frame(msg)}
        data = json.dumps(msg, ensure_ascii=False).encode("utf-8")
        if len(data) > self.limits.frame_max_bytes:
            raise await self.fail(f"{what} request of {len(data)} bytes exceeds the "
                                  f"{self.limits.frame_max_bytes} byte frame cap")
        deadline = time.monotonic() + timeout
        self._in_flight = True
        self._thaw()
        try:
            if self._adopting is not None:   # before any environment code runs or forks
                if not await asyncio.shield(self._adopting) and not _ADOPT_WARNED.is_set():
                    _ADOPT_WARNED.set()
                    log.warning("sandbox running with reduced protection: a sandbox could not "
                                "join its freezer group and is not frozen between calls")
                self._adopting = None
            await self._send(len(data).to_bytes(4, "big") + data, deadline, what, timeout)
            reply = await self._receive(rid, what, deadline, timeout)
            self._freeze()
            return reply
        except asyncio.CancelledError:
            # The worker is somewhere inside the call: nothing it says later can be trusted.
            if self.dead is None:
                self.dead = f"{what} was cancelled"
            self.kill()
            self._reaper = self.loop.create_task(self.reap())
            raise

    def _readable_now(self) -> bool:
        poller = select.poll()   # not select(): harnesses with many workers pass fd 1024
        poller.register(self.launched.response_r, select.POLLIN)
        return bool(poller.poll(0))

    async def _send(self, data: bytes, deadline: float, what: str, timeout: float) -> None:
        view = memoryview(data)
        fd = self.launched.request_w
        while view:
            try:
                n = os.write(fd, view)
                view = view[n:]
                continue
            except BlockingIOError:
                pass
            except BrokenPipeError:
                raise await self._died(what) from None
            ready: asyncio.Future[None] = self.loop.create_future()
            self.loop.add_writer(fd, _resolve, ready)
            try:
                await asyncio.wait_for(ready, max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise await self.fail(f"{what} timed out after {timeout:g} s") from None
            finally:
                self.loop.remove_writer(fd)

    async def _receive(self, rid: int, what: str, deadline: float,
                       timeout: float) -> Frame:
        while True:
            if self._problem is not None:
                raise await self.fail(self._problem)
            if self._frames:
                frame = self._frames.popleft()
                limit = _token_limit(self.limits.observation_max_chars)
                if frame.count(b'"') <= limit and _too_deep(frame):
                    raise await self.fail("protocol violation: a frame nested deeper than "
                                          f"{MAX_DEPTH} levels")
                if (tokens := _tokens(frame)) > limit:
                    raise await self.fail(f"protocol violation: a frame of {tokens} values "
                                          f"and strings (more than {limit}; info is capped)")
                try:
                    reply: JSON = json.loads(frame.decode("utf-8"),
                                             parse_constant=_reject_constant,
                                             parse_float=_finite_float)
                except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                    raise await self.fail(f"protocol violation: unreadable frame ({exc})") from None
                if not isinstance(reply, dict) or reply.get("id") != rid \
                        or type(reply.get("id")) is not int:
                    got = reply.get("id") if isinstance(reply, dict) else type(reply).__name__
                    raise await self.fail(f"protocol violation: reply id {got!r} does not match "
                                          f"request {rid} ({what})")
                if self._frames or self._buf:
                    raise await self.fail(f"protocol violation: extra data after the {what} reply")
                self._in_flight = False
                return _valid_frame(reply)
            if self._eof or self._exited:
                raise await self._died(what)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise await self.fail(f"{what} timed out after {timeout:g} s")
            await self._woken_within(remaining)

    # ----- death ------------------------------------------------------------------------------
    async def _died(self, what: str) -> EnvFault:
        """The worker went away by itself: wait briefly for its status and say why."""
        end = time.monotonic() + 1.0
        while self.launched.popen.poll() is None and time.monotonic() < end:
            await asyncio.sleep(0.005)
        return await self.fail(f"{self._exit_reason()} during {what}")

    def _exit_reason(self) -> str:
        group = self.launched.cgroup
        if group is not None and group.oom_kills() > 0:
            return f"memory limit exceeded ({self.limits.memory_mb} MiB)"
        if group is not None and self.launched.runtime == "gvisor" and group.pids_limit_hits():
            # gVisor does not enforce RLIMIT_NPROC; the Sentry stops at the host's pids limit
            return f"process limit exceeded ({self.limits.max_procs} processes)"
        rc = self.launched.popen.poll()
        if rc is None:
            return "worker stopped answering"
        sig = -rc if rc < 0 else (rc - 128 if self.launched.sandboxed and rc > 128 else 0)
        if sig == signal.SIGXCPU:
            return f"CPU time limit exceeded ({self.limits.cpu_s} s)"
        if sig == signal.SIGKILL:
            return self._sigkill_reason()
        if sig:
            return f"worker killed by {_signal_name(sig)}"
        return f"worker exited with status {rc}"

    def _sigkill_reason(self) -> str:
        """Why a SIGKILL that no limit of ours announced came: the hard CPU limit only where
        the sandbox's own CPU account shows it reached the limit (RLIMIT_CPU kills one process
        at cpu_s + 1 s of its own CPU, after SIGXCPU at cpu_s), else "unexplained", with the
        CPU it had used: never a limit that cannot be shown."""
        group = self.launched.cgroup
        if self.launched.runtime == "gvisor":
            # gVisor's Sentry kills at the limit by its own count of the app's CPU, which the
            # host's account of the sandbox does not match (it ran out ahead of it: measured
            # 0.89 s of host CPU at a 1 s limit on a loaded machine); a process cannot have
            # used cpu_s of CPU in less wall time than that
            if time.monotonic() - self._born >= self.limits.cpu_s:
                return f"CPU time limit exceeded ({self.limits.cpu_s} s)"
            return ("worker killed by SIGKILL, unexplained (not the CPU limit: the sandbox "
                    f"lived less than {self.limits.cpu_s} s; no out-of-memory kill)")
        used = group.cpu_seconds() if group is not None else None
        if used is not None and used >= self.limits.cpu_s:
            return f"CPU time limit exceeded ({self.limits.cpu_s} s)"
        if used is None:
            return ("worker killed by SIGKILL, unexplained (no out-of-memory kill; its CPU "
                    "time cannot be read here)")
        return (f"worker killed by SIGKILL, unexplained (not the CPU limit: {used:.2f} s used "
                f"of {self.limits.cpu_s} s; no out-of-memory kill)")

    async def fail(self, reason: str) -> EnvFault:
        """Kill the worker, remember `reason`, and return the EnvFault to raise."""
        reason = _one_line(reason)
        if self.dead is None:
            self.dead = reason
        self.drain_output()
        self.kill()
        await self.reap()
        return EnvFault(reason, self.output_tail())

    def output_tail(self, limit: int = 2000) -> str:
        return self.output[-limit:].decode("utf-8", "replace")

    def _find_init(self) -> int | None:
        return next(iter(children(self.pid)), None)

    def kill(self) -> None:
        """SIGKILL the sandbox now. A forked instance: its pid 1, through its pidfd (never a
        reused pid), whose death ends every process of the instance's pid namespace, and
        nothing of the instance lives outside it. A fresh sandbox: what runs under its
        launcher (bwrap's pid-namespace init; gVisor's sandbox and gofer), which the launcher
        collects before it exits; `reap` waits for that (and kills the launcher, and what is
        left in the cgroup, if it does not exit within LAUNCHER_GRACE_S)."""
        if self._killed_by_us:
            return
        self._killed_by_us = True
        if self._freezing is not None:
            self._freezing.cancel()
        if self.launched.forked:
            self.launched.popen.kill()
            return
        end_under_launcher(self.launched, self.init_pid)

    # ----- freezing between calls ---------------------------------------------------------------
    def _freeze(self) -> None:
        """Stop every process of the sandbox until the next call: between calls an environment
        may neither compute (burn the CPUs while the solver thinks) nor speak. Done after
        FREEZE_GRACE_S without a next call, so that back-to-back calls (validation, replay)
        pay no freeze and thaw; a sandbox runs at most FREEZE_GRACE_S (plus the event loop's
        delay) after each call."""
        group = self.launched.cgroup
        if group is not None and self.limits.freeze_idle and self.dead is None \
                and group.freezable:
            self._freezing = self.loop.call_later(FREEZE_GRACE_S, group.freeze)

    def _thaw(self) -> None:
        if self._freezing is not None:
            self._freezing.cancel()
            self._freezing = None
        group = self.launched.cgroup
        if group is not None:
            group.thaw()

    async def reap(self) -> None:
        """Collect the exit status of everything we started and release fds, cgroup, slot."""
        if self._closed:
            return
        self._closed = True
        # Nothing is read from here on: a pipe at EOF stays readable, and a reader left on it
        # would spin the event loop for as long as the collection below waits.
        for fd in (self.launched.response_r, self.launched.output_r):
            self.loop.remove_reader(fd)
        # Until our child is gone: a forked instance's init, or a fresh sandbox's launcher
        # once it has collected what ran under it (killed if it has not within the grace).
        # Its pidfd says when (_on_exit); without one, it is polled.
        end = time.monotonic() + 5.0
        grace = time.monotonic() + LAUNCHER_GRACE_S
        launcher_killed = self.launched.forked
        while self.launched.popen.poll() is None and (now := time.monotonic()) < end:
            if not launcher_killed and now >= grace:
                kill_launcher(self.launched)
                launcher_killed = True
            wait = (end if launcher_killed else grace) - now
            if self._pidfd is not None and not self._exited:
                await self._woken_within(wait)
            else:
                await asyncio.sleep(min(wait, 0.002))
        h = host()
        self.loop.remove_writer(self.launched.request_w)
        fds = [self.launched.response_r, self.launched.output_r, self.launched.request_w]
        for extra in (self._pidfd, self._oom_fd):
            if extra is not None:
                self.loop.remove_reader(extra)
                if extra != self._pidfd or self._own_pidfd:
                    fds.append(extra)
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        release = getattr(self.launched.popen, "release", None)
        if release is not None:   # a forked instance: let its pid go (_template.ForkedProcess)
            release()
        if self.launched.cgroup is not None and h.cgroups is not None:
            if not (self.launched.forked and self.launched.popen.poll() is not None):
                # (a forked instance whose pid 1 has exited has no process left: the kernel
                # ends a pid namespace's other processes before its init's exit is reported)
                self.launched.cgroup.kill_all()
            h.cgroups.discard(self.launched.cgroup)
        if self.launched.slot is not None:
            h.give_slot(self.launched.slot)
        if self.launched.scratch:
            shutil.rmtree(self.launched.scratch, ignore_errors=True)
        self.reaped = True

    async def close(self, *, wait: bool = True) -> None:
        """Kill the tree now; with `wait`, return once it is collected (also a background
        collection started earlier), else collect it in the background."""
        if self.dead is None:
            self.dead = "instance is closed"
        self.kill()
        if not wait:
            if self._reaper is None and not self._closed:
                self._reaper = self.loop.create_task(self.reap())
            return
        if self._reaper is not None:
            await asyncio.shield(self._reaper)
        await self.reap()
