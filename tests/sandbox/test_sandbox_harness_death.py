"""Killing the harness (SIGKILL, no cleanup code runs) kills every sandbox process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sandbox_helpers import namespace_pids

HARNESS = r'''
import asyncio, json, os, sys
sys.path.insert(0, sys.argv[1])
from sandbox_helpers import FAST, env_source
from envduels.sandbox import EnvPool

DAEMON = """
if os.fork() == 0:   # detached by a double fork (setsid is refused: autogroup ids)
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)
os.wait()
return 'daemon started', {}
"""

async def main():
    pool = EnvPool(FAST, warm=2)
    a = await pool.open(env_source(reset=DAEMON, prelude="import os, time"))
    await a.reset(0)
    b = await pool.open(env_source("time.sleep(600)", prelude="import time"))
    await b.reset(0)
    stepping = asyncio.ensure_future(b.step("a"))   # mid-call when the harness dies
    await asyncio.sleep(0.3)
    inits = [i._channel.init_pid for i in (a, b)]
    spaces = [os.readlink(f"/proc/{p}/ns/pid") for p in inits]
    group = a._channel.launched.cgroup   # idle since its reset: frozen, where the host can
    frozen = group is not None and group.freezer is not None and group.frozen
    can_freeze = group is not None and group.freezer is not None
    print(json.dumps({"spaces": spaces, "outer": [a.pid, b.pid], "frozen": frozen,
                      "can_freeze": can_freeze}), flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
'''


def test_sigkill_of_the_harness_leaves_no_sandbox_process(tmp_path: Path) -> None:
    harness = subprocess.Popen([sys.executable, "-c", HARNESS, str(Path(__file__).parent)],
                               stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(harness.stdout.readline())
        spaces = info["spaces"]
        # the worker (pid 1 of a forked instance) and the daemon; the worker
        assert [len(namespace_pids(namespace=s)) for s in spaces] == [2, 1]
        # A frozen sandbox must die too (a v1-frozen one would ignore the SIGKILL)
        assert info["frozen"] == info["can_freeze"]
    finally:
        os.kill(harness.pid, signal.SIGKILL)
        harness.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = [p for s in spaces for p in namespace_pids(namespace=s)]
        left += [p for p in info["outer"] if Path(f"/proc/{p}").exists() and not _zombie(p)]
        if not left:
            break
        time.sleep(0.05)
    assert left == [], [_describe(p) for p in left]


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _describe(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text()[:120]
    except OSError:
        return f"{pid} gone"


GVISOR_HARNESS = r'''
import asyncio, dataclasses, json, sys
sys.path.insert(0, sys.argv[1])
from sandbox_helpers import FAST, env_source
from envduels.sandbox import EnvPool
from envduels.sandbox._launcher import descendants as _descendants

async def main():
    pool = EnvPool(dataclasses.replace(FAST, runtime="gvisor"), warm=0)
    inst = await pool.open(env_source("time.sleep(600)", prelude="import time"))
    await inst.reset(0)
    stepping = asyncio.ensure_future(inst.step("a"))   # mid-call when the harness dies
    await asyncio.sleep(0.3)
    print(json.dumps([inst.pid, *_descendants(inst.pid)]), flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
'''


def test_sigkill_of_the_harness_leaves_no_gvisor_process(tmp_path: Path) -> None:
    from sandbox_helpers import gvisor_missing

    if why := gvisor_missing():
        pytest.skip(why)
    harness = subprocess.Popen([sys.executable, "-c", GVISOR_HARNESS, str(Path(__file__).parent)],
                               stdout=subprocess.PIPE, text=True)
    try:
        tree = json.loads(harness.stdout.readline())
        assert len(tree) >= 3   # runsc, its gofer, the Sentry (and the Sentry's stubs)
    finally:
        os.kill(harness.pid, signal.SIGKILL)
        harness.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = [p for p in tree if Path(f"/proc/{p}").exists() and not _zombie(p)]
        if not left:
            break
        time.sleep(0.05)
    assert left == [], [_describe(p) for p in left]
