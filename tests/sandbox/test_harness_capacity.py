"""When the harness runs out of something, it says so, and never blames an environment.

Issue 32: held-open sessions were "killed" by hundreds at once, each reported as the
environment's CPU limit. What killed them was the template's memory group: every live instance
keeps about 1 MiB charged there, and at the group's limit the kernel killed the template and
every instance with it. A template now retires before that (another one takes over)."""

from __future__ import annotations

import dataclasses
import os
import resource

import pytest
from sandbox_helpers import FAST, TRIVIAL

from envduels.sandbox import EnvPool, HarnessCapacity, SandboxStartError

SMALL = dataclasses.replace(FAST, memory_mb=96)


@pytest.mark.slow
async def test_many_held_instances_outlive_their_templates_memory_budget() -> None:
    async with EnvPool(SMALL, warm=0) as pool:
        if not pool.uses_templates:
            pytest.skip("platform: instances come from fresh sandboxes here (no templates)")
        held = [await pool.open(TRIVIAL) for _ in range(150)]
        for inst in held:
            await inst.reset(1)
        for inst in held:   # every one still alive and answering, none killed with its template
            assert (await inst.step("x")).observation == "n=1"
        assert pool._templates is not None and pool._templates.retirements >= 1
        for inst in held:
            await inst.close(wait=False)


async def test_running_out_of_descriptors_is_a_harness_capacity_error() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    async with EnvPool(FAST, warm=0) as pool:
        first = await pool.open(TRIVIAL)   # the template, already running
        opened = [first]
        in_use = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 40, hard))
        try:
            with pytest.raises(HarnessCapacity) as caught:
                for _ in range(64):   # each instance holds descriptors in the harness
                    opened.append(await pool.open(TRIVIAL))
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        refusal = caught.value
        assert isinstance(refusal, SandboxStartError)   # the host's: never an env's verdict
        assert refusal.reason.startswith("the harness is out of capacity and started no "
                                         "sandbox: [Errno 24] Too many open files")
        assert len(opened) > 1   # it refused at the limit, not before
        for inst in opened:   # what was open before the refusal still works
            assert await inst.reset(2) == ("count to 3", {"seed": 2})
            await inst.close()
        again = await pool.open(TRIVIAL)   # with descriptors back, the harness goes on
        await again.close()
