"""Host-wide kernel counters: fresh sandboxes must not be able to read their start order.

An environment that can tell "the sandbox before me was my play" from a counter can relay a
verdict from a play to its replay and pass the audit with a faked lift (issue 19, attack 4;
the tournament is in test_sandbox_relay.py). Each test runs under both runtimes."""

from __future__ import annotations

import json

import pytest
from sandbox_helpers import FAST, assert_pool_still_works, env_source

from envduels.sandbox import EnvPool

pytestmark = pytest.mark.usefixtures("sandbox_runtime")

# Each probe: the value the call gives, or the name of the error that refused it.
PROBES = """
import errno, json, mmap, os, sys

def attempt(call):
    try:
        return call()
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))

def memfd():
    fd = os.memfd_create("probe")
    return os.fstat(fd).st_ino

def shm():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    shmid = libc.shmget(0, 4096, 0o1600)   # IPC_PRIVATE, IPC_CREAT | 0600
    if shmid < 0:
        raise OSError(ctypes.get_errno(), "shmget")
    return shmid

def shared_anonymous():
    mmap.mmap(-1, 4096, flags=mmap.MAP_SHARED)
    return "mapped"

def private_anonymous():   # malloc's kind of memory: must keep working
    mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE)
    return "mapped"

def pidfd():
    return os.fstat(os.pidfd_open(os.getpid())).st_ino

def autogroup():
    try:
        with open("/proc/self/autogroup") as fh:
            return fh.read().split()[0]
    except FileNotFoundError:
        return "absent"

def new_session():
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.write(writer, open("/proc/self/autogroup").read().split()[0].encode())
        except OSError as exc:
            os.write(writer, errno.errorcode.get(exc.errno, "?").encode())
        os._exit(0)
    os.close(writer)
    os.waitpid(pid, 0)
    return os.read(reader, 100).decode()

FOUND = {name: attempt(call) for name, call in [
    ("memfd", memfd), ("shm", shm), ("shared_anonymous", shared_anonymous),
    ("private_anonymous", private_anonymous), ("pidfd", pidfd), ("autogroup", autogroup),
    ("new_session", new_session)]}
"""


async def _findings(pool: EnvPool) -> dict:
    inst = await pool.open(env_source("return json.dumps(FOUND), 0.0, True, False, {}",
                                      prelude=PROBES))
    await inst.reset(0)
    found = json.loads((await inst.step("a")).observation)
    await inst.close()
    return found


async def test_three_fresh_sandboxes_read_the_same_counters_or_are_refused(
        sandbox_runtime: str) -> None:
    async with EnvPool(FAST, warm=0) as pool:
        seen = [await _findings(pool) for _ in range(3)]
        assert seen[0] == seen[1] == seen[2], seen
        found = seen[0]
        # the shmem inode counter (memfd, SysV shm, anonymous shared mappings), the pid
        # counter behind pidfd inodes, and new sessions (autogroup ids): refused
        assert {k: found[k] for k in ("memfd", "shm", "shared_anonymous", "pidfd",
                                      "new_session")} == dict.fromkeys(
            ("memfd", "shm", "shared_anonymous", "pidfd", "new_session"), "EPERM")
        assert found["private_anonymous"] == "mapped"
        # bubblewrap: the harness's own autogroup (no session is made for a sandbox);
        # gVisor's kernel has no autogroups
        if sandbox_runtime == "gvisor":
            assert found["autogroup"] == "absent"
        else:
            with open("/proc/self/autogroup") as fh:
                assert found["autogroup"] == fh.read().split()[0]
        await assert_pool_still_works(pool)


PIPE_INODE = """
import os
def pipe_inode():
    reader, writer = os.pipe()
    return os.fstat(reader).st_ino
"""


async def test_pipe_inode_numbers_are_the_sandbox_s_own_only_under_gvisor(
        sandbox_runtime: str) -> None:
    # Pipes and sockets take inode numbers from one host-wide counter that seccomp cannot
    # hide (stdlib code needs pipes): open under bubblewrap (docs/sandbox.md, threat table),
    # closed under gVisor, whose kernel numbers its own.
    async with EnvPool(FAST, warm=0) as pool:
        seen = []
        for _ in range(3):
            inst = await pool.open(env_source("return str(pipe_inode()), 0.0, True, False, {}",
                                              prelude=PIPE_INODE))
            await inst.reset(0)
            seen.append(int((await inst.step("a")).observation))
            await inst.close()
    if sandbox_runtime == "gvisor":
        assert seen[0] == seen[1] == seen[2], seen
    else:   # handed out in per-CPU batches: distinct, not always increasing
        assert len(set(seen)) == 3, seen
