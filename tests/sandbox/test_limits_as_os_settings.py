"""`SandboxLimits` becomes OS settings on one path (issue 31): `SandboxLimits.rlimits` is the one
encoding of the limits a sandboxed process sets on itself, and an environment sees exactly those
whichever way its instance starts (forked from a template, or a fresh sandbox)."""

from __future__ import annotations

import asyncio

import pytest

from envduels.sandbox import EnvPool, SandboxLimits

READS_ITS_LIMITS = '''
import resource

class Limits:
    def reset(self, seed=None):
        names = ("AS", "CPU", "NOFILE", "FSIZE", "NPROC")
        return " ".join(n + "=%d,%d" % resource.getrlimit(getattr(resource, "RLIMIT_" + n))
                        for n in names), {}

    def step(self, action):
        return "", 0.0, True, False, {}
'''


def test_the_rlimits_argument_encodes_every_limit_once():
    limits = SandboxLimits(memory_mb=300, cpu_s=7, open_files=40, file_size_mb=3, max_procs=9)
    assert limits.rlimits() == f"{300 << 20},7,8,40,{3 << 20},9"
    assert limits.rlimits(nproc=100, cpu_s=1 << 30, open_files=1024) == (
        f"{300 << 20},{1 << 30},{(1 << 30) + 1},1024,{3 << 20},100")
    assert limits.cgroup() == (300, 9, 1.0)
    assert limits.cgroup(memory_extra_mb=64, pids_extra=32) == (364, 41, 1.0)


@pytest.mark.parametrize("templates", [True, False], ids=["forked from a template", "fresh"])
def test_an_environment_runs_under_exactly_the_limits_asked_for(templates):
    limits = SandboxLimits(memory_mb=300, cpu_s=7, open_files=40, file_size_mb=3, max_procs=9)

    async def main() -> str:
        async with EnvPool(limits, warm=0, templates=templates) as pool:
            instance = await pool.open(READS_ITS_LIMITS)
            try:
                observation, _ = await instance.reset(0)
            finally:
                await instance.close()
            return observation
    seen = dict(item.split("=", 1) for item in asyncio.run(main()).split())
    assert (seen["AS"], seen["CPU"], seen["NOFILE"], seen["FSIZE"]) == (
        f"{300 << 20},{300 << 20}", "7,8", "40,40", f"{3 << 20},{3 << 20}")
    soft, hard = (int(v) for v in seen["NPROC"].split(","))
    assert soft == hard >= 9   # under a uid of its own, or with room for the harness's own
