"""A normal user (not root, no writable cgroup) still gets a sandbox, and is told what is missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

SCRIPT = r'''
import asyncio, json, logging
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
from envduels.sandbox import EnvFault, EnvPool, SandboxLimits

ID = """
class Who:
    def reset(self, seed=None):
        import os
        status = open('/proc/self/status').read()
        cap = [l.split()[1] for l in status.splitlines() if l.startswith('CapEff')][0]
        return '%d %s' % (os.getuid(), cap), {}
    def step(self, action):
        import os
        while True:
            os.fork()
"""

async def main():
    async with EnvPool(SandboxLimits(step_timeout_s=10, max_procs=16), warm=1) as pool:
        inst = await pool.open(ID)
        identity, _ = await inst.reset(0)
        try:
            await inst.step("a")
            bomb = "not stopped"
        except EnvFault as fault:
            bomb = fault.reason
        second = await pool.open(ID)
        again, _ = await second.reset(0)
        await second.close()
    print(json.dumps({"identity": identity, "bomb": bomb, "again": again}))

asyncio.run(main())
'''


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None
                    or not os.access("/usr/bin/python3.11", os.X_OK),
                    reason="platform: needs root to switch to an unprivileged uid, setpriv and python3.11")
def test_unprivileged_user_is_sandboxed_and_told_once_what_is_missing(tmp_path: Path) -> None:
    run = subprocess.run(
        ["setpriv", "--reuid=20001", "--regid=20001", "--clear-groups",
         "/usr/bin/python3.11", "-c", SCRIPT],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC), "HOME": str(tmp_path)},
    )
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout)
    # every sandbox sees itself as uid 1000, whatever host uid runs it (here the user's 20001)
    assert found["identity"] == "1000 0000000000000000"
    assert found["bomb"].startswith("step raised BlockingIOError: [Errno 11]")
    assert found["again"] == "1000 0000000000000000"
    warnings = [line for line in run.stderr.splitlines() if line.startswith("WARNING")]
    assert warnings == [
        "WARNING sandbox running with reduced protection: no per-sandbox memory/process cgroup "
        "(cgroups not writable (Permission denied); rlimits only); no per-sandbox uid (the "
        "harness is not root; sandboxes share your uid)"]
