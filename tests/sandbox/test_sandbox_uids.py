"""Two harness processes never share a sandbox uid, even when their pids are equal mod 2000
(the old per-process uid range): slots are claimed machine-wide by lock files."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envduels.sandbox._launcher import _slot_folder, host

HARNESS = r'''
import asyncio, json, os, sys
sys.path.insert(0, sys.argv[1])
from sandbox_helpers import FAST, TRIVIAL
from envduels.sandbox import EnvPool
from envduels.sandbox import _launcher

# Probe the host as if both harnesses' pids were equal mod 2000 (distinct, so that nothing
# else that names things by pid collides); the cgroup root is probed with the real pid.
cgroups = _launcher.CgroupRoot.probe()
_launcher.CgroupRoot.probe = classmethod(lambda cls: cgroups)
real = os.getpid
os.getpid = lambda: 42 + 2000 * real()
_launcher.host()
os.getpid = real

async def main():
    pool = EnvPool(FAST, warm=0, templates=False)   # a uid per fresh sandbox
    insts = [await pool.open(TRIVIAL) for _ in range(3)]
    for inst in insts:
        await inst.reset(1)
    uids = [inst._channel.launched.uid for inst in insts]
    owners = [os.stat(f"/proc/{inst._channel.init_pid}").st_uid for inst in insts]
    print(json.dumps({"uids": uids, "owners": owners}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    for inst in insts:
        await inst.close()
    await pool.aclose()

asyncio.run(main())
'''


def _held(uid: int) -> bool:
    fd = os.open(os.path.join(_slot_folder(), f"{uid}.lock"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@pytest.mark.skipif(not host().root, reason="per-sandbox uids need a root harness")
def test_two_harnesses_never_share_a_sandbox_uid() -> None:
    harnesses = [subprocess.Popen([sys.executable, "-c", HARNESS, str(Path(__file__).parent)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for _ in range(2)]
    try:
        infos = [json.loads(h.stdout.readline()) for h in harnesses]   # both alive now
        a, b = (set(i["uids"]) for i in infos)
        assert len(a) == len(b) == 3 and not a & b, infos
        assert [i["owners"] for i in infos] == [i["uids"] for i in infos]
        mine = set(host().claimed_uids())
        assert not (a | b) & mine
        assert all(_held(uid) for uid in a | b)
        for h in harnesses:
            h.stdin.write("\n")
            h.stdin.flush()
            assert h.wait(timeout=30) == 0
    finally:
        for h in harnesses:
            if h.poll() is None:
                h.kill()
                h.wait()
    assert not any(_held(uid) for uid in a | b)   # released with the processes
