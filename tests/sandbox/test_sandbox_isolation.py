"""State that crosses sandboxes (issue 29, attacks 5-7): an instance starts from the state
every other instance of its environment starts from, cannot count what its siblings hold, and
writes nothing that a later sandbox, the harness or the user's session reads. Each test runs
under both runtimes (under bubblewrap the pool forks instances from a template; under gVisor
each is a fresh sandbox)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os

import pytest
from sandbox_helpers import FAST, env_source, needs_in_process_pool, uses_templates

from envduels.sandbox import EnvPool

pytestmark = pytest.mark.usefixtures("sandbox_runtime")

WIDE = dataclasses.replace(FAST, observation_max_chars=60_000, max_procs=128, open_files=256)

# ----- attack 6: instances count their forks -------------------------------------------------

# What an instance can read of the interpreter it starts in, at import and at its first reset:
# the collector's counts, allocated blocks, reference counts of objects every instance shares,
# the adaptive interpreter's state of every code object it can reach (counters in
# `_co_code_adaptive` advance as code runs), addresses of new objects and, through ctypes, a
# checksum of every page of its writable memory (the CPU-number word glibc's rseq area holds
# masked: the kernel writes the CPU the process last ran on there). The one thing an instance
# holds of its own is its host uid, which the harness claims at random (docs/templates.md):
# memory is compared between instances that were given the same one.
INTERPRETER = r'''
import ctypes, gc, os, sys, types, zlib

SHARED = (None, True, False, 0, 1, 255, (), "", b"", int, str, object, type, sys, gc, os)

def _code_state():
    seen, states = set(), []
    def code(c):
        if id(c) not in seen:
            seen.add(id(c))
            states.append(getattr(c, "_co_code_adaptive", c.co_code))
            for const in c.co_consts:
                if isinstance(const, types.CodeType):
                    code(const)
    for module in list(sys.modules.values()):
        for value in list(getattr(module, "__dict__", {}).values()):
            for item in [value, *vars(value).values()] if isinstance(value, type) else [value]:
                item = getattr(item, "__func__", item)
                if isinstance(item, types.FunctionType):
                    code(item.__code__)
    frame = sys._getframe()
    while frame is not None:
        code(frame.f_code)
        frame = frame.f_back
    return zlib.crc32(b"".join(sorted(states))), len(states)

def _rseq():
    libc = ctypes.CDLL(None)
    try:
        offset = ctypes.c_long.in_dll(libc, "__rseq_offset").value
    except ValueError:
        return None
    libc.pthread_self.restype = ctypes.c_void_p
    return libc.pthread_self() + offset

def _memory():
    rseq, pages = _rseq(), []
    with open("/proc/self/maps") as fh:
        maps = [line.split() for line in fh]
    for fields in maps:
        if not fields[1].startswith("rw") or fields[-1] in ("[vvar]", "[vsyscall]"):
            continue
        low, high = (int(x, 16) for x in fields[0].split("-"))
        for at in range(low, high, 4096):
            page = bytearray(ctypes.string_at(at, 4096))
            if rseq is not None and at <= rseq < at + 4096:
                page[rseq - at:rseq - at + 8] = bytes(8)   # cpu_id_start, cpu_id
            pages.append(zlib.crc32(page))
    return pages

def snapshot(memory):
    return {"count": list(gc.get_count()), "stats": gc.get_stats(),
            "blocks": sys.getallocatedblocks(), "refs": [sys.getrefcount(x) for x in SHARED],
            "code": _code_state(), "ids": [id(object()), id([]), id({})],
            "memory": _memory() if memory else None}

AT_IMPORT = snapshot(memory=True)

class Interpreter:
    def reset(self, seed=None):
        import json
        return json.dumps({"import": AT_IMPORT, "reset": snapshot(memory=False)}), {}
    def step(self, action):
        return "ok", 0.0, True, False, {}
'''


async def test_ten_instances_of_one_environment_read_identical_interpreter_state(
        sandbox_runtime: str) -> None:
    # On main a template's instances read rising collector counts and allocated blocks
    # (42, 44, 44, 45, 48, ... and 21231 ... 21240): episode N learned N.
    needs_in_process_pool()   # reads each instance's uid from its in-process channel
    async with EnvPool(dataclasses.replace(WIDE, memory_mb=512,
                                           observation_max_chars=200_000), warm=1) as pool:
        reports, uids = [], []
        for _ in range(10):
            # A fresh sandbox reads its `load` request in two pieces when it comes while the
            # sandbox still starts (timing, which stays open: docs/sandbox.md): each instance
            # here starts from a worker that waits for it.
            while not await uses_templates(pool) and pool.ready < 1:
                await asyncio.sleep(0.01)
            inst = await pool.open(INTERPRETER)
            try:
                reports.append(json.loads((await inst.reset(1))[0]))
                uids.append(inst._channel.launched.uid)
            finally:
                await inst.close()
        forked = pool.uses_templates
    assert forked == (sandbox_runtime == "bubblewrap")
    memory = {}
    for report, uid in zip(reports, uids, strict=True):
        if forked:   # raw memory: the same as every instance that holds the same host uid
            memory.setdefault(uid, []).append(report["import"].pop("memory"))
        else:
            # A fresh interpreter lays its address space out at random (ASLR), and with it
            # the order of what it keys by address: its blocks, reference counts and
            # specializations vary from one to the next at random, never with how many
            # came before. Its collector counts are the same in every one.
            for phase in report.values():
                for key in ("blocks", "refs", "code", "ids", "memory"):
                    phase.pop(key)
    first = reports[0]
    assert [r for r in reports if r != first] == [], [
        {phase: {k for k in first[phase] if r[phase][k] != first[phase][k]} for phase in r}
        for r in reports if r != first]
    for pages in memory.values():
        assert all(p == pages[0] for p in pages), [
            [i for i, (a, b) in enumerate(zip(p, pages[0], strict=False)) if a != b]
            for p in pages]


# ----- attack 7: siblings count each other ----------------------------------------------------

# `hold N` keeps N of everything the kernel counts per user: processes, pipe buffers (a 1 MiB
# pipe each), descriptors in flight (sent on a socket nobody reads) and queued signals.
# `probe` lowers its own limits and takes as many of each as it is then allowed: with a
# count shared with a sibling, the sibling's holdings show as what is left.
SIBLING = r'''
import fcntl, os, resource, signal, socket, threading, time

F_SETPIPE_SZ = 1031
HELD = []

def _sleeper():
    pid = os.fork()
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    return pid

def _big_pipe():
    reader, writer = os.pipe()
    os.close(writer)
    fcntl.fcntl(reader, F_SETPIPE_SZ, 1 << 20)   # 256 pages of the user's pipe allowance
    return reader

def hold(n):
    HELD.extend(_sleeper() for _ in range(n))
    HELD.extend(_big_pipe() for _ in range(n))
    sender, receiver = socket.socketpair()
    cargo, _ = os.pipe()
    HELD.extend((sender, receiver, cargo))
    for _ in range(n):
        try:
            sender.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, cargo.to_bytes(4, "little"))])
        except PermissionError:   # sendmsg is denied now (docs/sandbox.md): nothing in flight
            break
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
    for _ in range(n):   # real-time and sent by tgkill (kill() is not counted): each queued
        signal.pthread_kill(threading.get_ident(), signal.SIGRTMIN)

def _with_limit(which, limit, take, undo):
    soft, hard = resource.getrlimit(which)
    try:
        resource.setrlimit(which, (limit, hard))
    except (OSError, ValueError) as exc:   # gVisor keeps some limits to itself
        return type(exc).__name__
    taken = []
    try:
        while len(taken) < limit + 10:   # (gVisor does not enforce RLIMIT_NPROC)
            taken.append(take())
    except OSError:
        pass
    finally:
        resource.setrlimit(which, (soft, hard))
        for item in taken:
            undo(item)
    return len(taken)

def _processes():
    def undo(pid):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return _with_limit(resource.RLIMIT_NPROC, 20, _sleeper, undo)

def _pipe_buffers():
    pipes = []
    try:
        while len(pipes) < 100:
            reader, writer = os.pipe()
            os.close(writer)
            pipes.append(reader)
            fcntl.fcntl(reader, F_SETPIPE_SZ, 1 << 20)
    except OSError:
        pass
    for reader in pipes:
        os.close(reader)
    return len(pipes)

def _in_flight():
    sender, receiver = socket.socketpair()
    cargo, other = os.pipe()
    def send():
        sender.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, cargo.to_bytes(4, "little"))])
    count = _with_limit(resource.RLIMIT_NOFILE, 40, send, lambda _: None)
    for item in (sender, receiver):
        item.close()
    os.close(cargo)
    os.close(other)
    return count

def _signals():
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMAX])
    count = _with_limit(resource.RLIMIT_SIGPENDING, 40,
                        lambda: signal.pthread_kill(threading.get_ident(), signal.SIGRTMAX),
                        lambda _: None)
    signal.signal(signal.SIGRTMAX, signal.SIG_IGN)   # discards the queued ones
    return count

PROBES = {"processes": _processes, "pipe_buffers": _pipe_buffers, "in_flight": _in_flight,
          "signals": _signals}

class Sibling:
    def reset(self, seed=None):
        return "ready", {}
    def step(self, action):
        if action.startswith("hold "):
            hold(int(action.split()[1]))
            return "held", 0.0, False, False, {}
        import json
        return json.dumps({name: probe() for name, probe in PROBES.items()}), 0.0, False, False, {}
'''


async def test_two_concurrent_instances_cannot_tell_whether_the_other_holds_0_or_30(
        sandbox_runtime: str) -> None:
    # On main a session's instance read how many processes another client's episode held
    # (38, 7, 40, 10 while it held 30, 0, 30, 0): instances of one template shared a uid.
    # Pipe buffers and descriptors in flight are counted per uid the same way.
    seen, own = {}, {}
    async with EnvPool(WIDE, warm=0) as pool:
        for held in (0, 30, 0, 30):
            holder = await pool.open(SIBLING)
            prober = await pool.open(SIBLING)
            try:
                await holder.reset(1)
                await prober.reset(1)
                assert (await holder.step(f"hold {held}")).observation == "held"
                seen.setdefault(held, []).append(
                    json.loads((await prober.step("probe")).observation))
                # the probe does see what is held where it is counted: in the holder itself
                own[held] = json.loads((await holder.step("probe")).observation)
            finally:
                await holder.close()
                await prober.close()
    assert seen[0] == seen[30], seen
    assert own[30]["processes"] < own[0]["processes"], own


# ----- attack 5: a register every sandbox shares ---------------------------------------------

# Read the session's autogroup nice (the harness's session: sandboxes make none), then write
# the next value; likewise the process's loginuid, whose first write draws a host-wide audit
# session id; and renice what `setpriority` reaches.
REGISTERS = r'''
import errno, json, os

def _read(path):
    try:
        with open(path) as fh:
            return fh.read().split()
    except OSError as exc:
        return errno.errorcode[exc.errno]

def _write(path, text):
    try:
        with open(path, "w") as fh:
            fh.write(text)
        return "written"
    except OSError as exc:
        return errno.errorcode[exc.errno]

def _renice(which, who):
    try:
        os.setpriority(which, who, os.getpriority(which, who) + 1)
        return "reniced"
    except OSError as exc:
        return errno.errorcode[exc.errno]

def registers():
    found = {"autogroup": _read("/proc/self/autogroup"), "sessionid": _read("/proc/self/sessionid")}
    # (empty where the caller's task group is not an autogroup: a cgroup with the cpu controller)
    line = found["autogroup"]
    nice = int(line[-1]) if isinstance(line, list) and line else 0
    found["write_autogroup"] = _write("/proc/self/autogroup", str(nice + 1))
    found["write_loginuid"] = _write("/proc/self/loginuid", str(os.getuid()))
    found["sessionid_after"] = _read("/proc/self/sessionid")
    found["renice"] = [_renice(os.PRIO_PROCESS, 0), _renice(os.PRIO_PGRP, 0),
                       _renice(os.PRIO_USER, os.getuid())]
    found["after"] = _read("/proc/self/autogroup")
    return json.dumps(found)
'''


def _session() -> tuple[list[str], int]:
    """The harness's autogroup line and its own nice value."""
    try:
        with open("/proc/self/autogroup") as fh:
            autogroup = fh.read().split()
    except OSError:
        autogroup = []
    return autogroup, os.getpriority(os.PRIO_PROCESS, 0)


async def test_three_sandboxes_in_a_row_read_the_same_nice_and_the_caller_keeps_its_own(
        sandbox_runtime: str) -> None:
    # On main three fresh sandboxes read autogroup nice 0, 1, 2, each writing the next, and
    # the last write reniced the user's whole session (the harness's) to 3.
    before = _session()
    source = env_source("return registers(), 0.0, True, False, {}", prelude=REGISTERS)
    found = []
    try:
        for templates in (True, False) if sandbox_runtime == "bubblewrap" else (False,):
            async with EnvPool(FAST, warm=0, templates=templates) as pool:
                for _ in range(3):
                    inst = await pool.open(source)
                    try:
                        await inst.reset(1)
                        found.append(json.loads((await inst.step("a")).observation))
                    finally:
                        await inst.close()
                    # the kernel accepts one autogroup write per 100 ms from anyone
                    await asyncio.sleep(0.15)
        assert _session() == before
    finally:
        if before[0] and _session()[0] != before[0]:   # put the session back (we are root)
            with open("/proc/self/autogroup", "w") as fh:
                fh.write(before[0][-1])
    # (what `setpriority` reaches differs between a forked instance and a fresh sandbox, but
    # is the sandbox's own processes only: the harness's nice is checked above)
    for report in found:
        report.pop("renice")
    assert all(f == found[0] for f in found), found
    first = found[0]
    if sandbox_runtime == "gvisor":   # its own kernel: no autogroup, no audit session
        assert first["autogroup"] == "ENOENT"
    else:   # the harness's session, read-only
        assert first["autogroup"] == first["after"] == before[0]
        assert (first["write_autogroup"], first["write_loginuid"]) == ("EROFS", "EROFS")
        with open("/proc/self/sessionid") as fh:   # the harness's: no session id drawn
            assert first["sessionid"] == first["sessionid_after"] == fh.read().split()
