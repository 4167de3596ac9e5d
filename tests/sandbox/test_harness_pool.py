"""HarnessPool: sandbox work in harness worker processes (docs/workers.md).

Real workers, real bubblewrap sandboxes: what a caller relies on is that the number of workers
changes nothing about results, that a replay never runs in the worker of its play, that
workers started early (`spawn`, `prepare`) start templates and leave nothing behind, and that
a dead worker ends only its own instances, blamed on the harness."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sandbox_helpers import FAST, TRIVIAL, env_source

from envduels.sandbox import (
    EnvFault,
    EnvPool,
    HarnessPool,
    SandboxLost,
    SandboxStartError,
    sandbox_pool,
)
from envduels.sandbox._launcher import descendants

# a seeded game whose every observation depends on the seed and the actions so far
SEEDED = '''
import random

class Walk:
    def __init__(self, max_turns=6):
        self.max_turns = max_turns
    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.pos = self.rng.randrange(100)
        return "at %d" % self.pos, {"seed": seed}
    def step(self, action):
        self.pos += len(action) + self.rng.randrange(10)
        return "at %d" % self.pos, self.pos / 100, self.pos > 150, False, {"pos": self.pos}
'''


def _other(tag: int) -> str:
    """A distinct source per tag (sources route by their hash)."""
    return TRIVIAL + f"\n# variant {tag}\n"


async def _transcripts(pool: EnvPool | HarnessPool, seeds: range) -> list[list[object]]:
    async def one(seed: int) -> list[object]:
        inst = await pool.open(SEEDED)
        try:
            log: list[object] = [await inst.reset(seed)]
            for action in ("a", "bb", "ccc", "dddd"):
                log.append(await inst.step(action))
            return log
        finally:
            await inst.close()
    return list(await asyncio.gather(*(one(s) for s in seeds)))


async def test_results_are_the_same_with_one_worker_two_workers_and_none() -> None:
    seeds = range(6)
    async with EnvPool(FAST, warm=0) as local:
        expected = await _transcripts(local, seeds)
    for workers in (1, 2):
        async with HarnessPool(FAST, workers=workers) as pool:
            assert await _transcripts(pool, seeds) == expected, workers
    assert expected[0][0] == ("at 49", {"seed": 0})   # the game really is seeded
    assert len({str(t) for t in expected}) == len(seeds)


async def test_a_replay_never_runs_in_the_worker_of_its_play() -> None:
    async with HarnessPool(FAST, workers=2) as pool:
        for tag in range(4):
            play = await pool.open(_other(tag))
            # the play's worker is the less busy one now: the replay still goes to the other
            busy = [await pool.open(TRIVIAL, apart_from=play.holder) for _ in range(2)]
            assert all(b.holder is not play.holder for b in busy)
            replay = await pool.open(_other(tag), replay=True, apart_from=play.holder)
            assert replay.holder is not play.holder, tag
            for inst in (play, replay, *busy):
                await inst.close()


async def test_plays_spread_over_every_worker() -> None:
    async with HarnessPool(FAST, workers=2) as pool:
        instances = [await pool.open(TRIVIAL) for _ in range(4)]
        assert sorted(i.holder.index for i in instances) == [0, 0, 1, 1]
        replays = [await pool.open(TRIVIAL, replay=True) for _ in range(2)]
        assert sorted(i.holder.index for i in replays) == [0, 1]   # no play named: anywhere
        for inst in instances + replays:
            await inst.close()


def _wait_for(predicate, timeout_s: float = 20.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def _settled(pid: int) -> int:
    """How many processes `pid` has under it once that stops changing for half a second."""
    count, since = len(descendants(pid)), time.monotonic()
    while time.monotonic() - since < 0.5:
        time.sleep(0.05)
        now = len(descendants(pid))
        if now != count:
            count, since = now, time.monotonic()
    return count


def test_spawned_workers_start_the_prepared_templates_before_any_open() -> None:
    pool = HarnessPool(FAST, workers=2)
    pool.prepare([_other(1)], instances=2)   # two opens coming: both workers, one fork each
    pool.spawn()   # no event loop yet: a command's imports and checks run meanwhile
    pids = pool.launcher.spawned_pids()
    # a template (a bwrap sandbox) and an instance forked ahead in each, no open asked
    assert _wait_for(lambda: all(len(descendants(pid)) >= 3 for pid in pids)), \
        [descendants(pid) for pid in pids]
    before = [_settled(pid) for pid in pids]
    home = pool.route(_other(2))[0]
    pool.prepare([_other(2)], replay=True)   # no instance: its first worker in route order
    assert _wait_for(lambda: len(descendants(pids[home])) > before[home])
    assert _settled(pids[1 - home]) == before[1 - home]

    async def use() -> list[int]:
        async with pool:
            inst = await pool.open(_other(1))
            assert await inst.reset(0)
            await inst.close()
            return pool.worker_pids

    assert sorted(asyncio.run(use())) == sorted(pids)   # the spawned workers, taken over
    assert _wait_for(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in pids))


def test_discarded_spawned_workers_leave_no_process() -> None:
    pool = HarnessPool(FAST, workers=2)
    pool.prepare([_other(3)], instances=2)
    pool.spawn()
    pids = pool.launcher.spawned_pids()
    assert _wait_for(lambda: all(descendants(pid) for pid in pids))
    tree = [p for pid in pids for p in descendants(pid)]
    pool.discard()
    assert _wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in pids + tree))


async def test_run_plays_a_known_episode_in_one_call_as_reset_and_steps_do() -> None:
    actions = ["a", "bb", "ccc", "dddd"]
    async with EnvPool(FAST, warm=0) as local, HarnessPool(FAST, workers=2) as pool:
        for where in (local, pool):
            inst = await where.open(SEEDED)
            stepwise = [await inst.reset(7)] + [await inst.step(a) for a in actions]
            await inst.close()
            inst = await where.open(SEEDED)
            played = await inst.run(7, actions)
            await inst.close()
            assert played.fault is None
            assert [played.start, *played.steps] == stepwise, where


async def test_run_stops_at_the_first_fault_and_the_instance_keeps_it() -> None:
    faulty = env_source("raise KeyError('boom')")   # its step raises
    async with EnvPool(FAST, warm=0) as local, HarnessPool(FAST, workers=2) as pool:
        for where in (local, pool):
            inst = await where.open(faulty)
            played = await inst.run(0, ["x", "y"])
            assert played.start is not None and played.steps == []
            assert isinstance(played.fault, EnvFault)
            assert not isinstance(played.fault, SandboxStartError)
            assert played.fault.reason == "step raised KeyError: 'boom' (env line 7 in step)"
            with pytest.raises(EnvFault) as again:   # the same fault again, not a new one
                await inst.step("z")
            assert again.value.reason == played.fault.reason
            await inst.close()
        inst = await pool.open(SEEDED)
        with pytest.raises(TypeError):
            await inst.run(True, ["a"])
        with pytest.raises(TypeError):
            await inst.run(1, ["a", 2])   # type: ignore[list-item]
        await inst.close()


async def test_an_environment_fault_stays_the_environments() -> None:
    async with HarnessPool(FAST, workers=2) as pool:
        inst = await pool.open(env_source("raise KeyError('boom')"))
        await inst.reset(0)
        with pytest.raises(EnvFault) as caught:
            await inst.step("x")
        assert not isinstance(caught.value, SandboxStartError)
        assert caught.value.reason == "step raised KeyError: 'boom' (env line 7 in step)"
        assert "KeyError" in caught.value.detail
        assert not inst.alive
        with pytest.raises(EnvFault) as again:   # the same fault again, not a new one
            await inst.reset(0)
        assert again.value.reason == caught.value.reason
        with pytest.raises(EnvFault, match="no environment class"):
            await pool.open("x = 1")


@pytest.mark.slow
async def test_a_dead_worker_ends_only_its_instances_blamed_on_the_harness() -> None:
    async with HarnessPool(FAST, workers=2) as pool:
        instances = [await pool.open(TRIVIAL) for _ in range(4)]
        for inst in instances:
            await inst.reset(1)
        victim = instances[0].holder
        tree = descendants(victim.pid)   # its templates, their instances
        assert len(tree) >= 2
        os.kill(victim.pid, signal.SIGKILL)
        lost = [i for i in instances if i.holder is victim]
        kept = [i for i in instances if i.holder is not victim]
        assert len(lost) == len(kept) == 2
        for inst in lost:
            with pytest.raises(SandboxLost) as caught:
                await inst.step("x")
            assert caught.value.reason == (
                f"the harness worker process {victim.pid} that held this sandbox was killed "
                "by SIGKILL: the harness's fault, not the environment's")
            await inst.close()
        for inst in kept:   # the other worker's instances play on
            assert (await inst.step("x")).observation == "n=1"
            await inst.close()
        # a new worker took the dead one's place: both slots serve opens again
        assert pool.replaced == 1 and len(pool.worker_pids) == 2
        assert victim.pid not in pool.worker_pids
        fresh = [await pool.open(TRIVIAL) for _ in range(2)]
        assert sorted(i.holder.index for i in fresh) == [0, 1]
        for inst in fresh:
            assert await inst.reset(2) == ("count to 3", {"seed": 2})
            await inst.close()
        deadline = time.monotonic() + 10   # the dead worker's sandboxes die with it
        while _alive(tree) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert _alive(tree) == []


def _alive(pids: list[int]) -> list[int]:
    """Those of `pids` that still run (not exited, not a zombie)."""
    left = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            left.append(pid)
    return left


async def test_closing_the_pool_leaves_no_worker_and_no_sandbox() -> None:
    pool = HarnessPool(FAST, workers=2)
    inst = await pool.open(TRIVIAL)
    await inst.reset(0)
    pids = pool.worker_pids
    tree = [d for p in pids for d in descendants(p)]
    assert tree
    await pool.aclose()
    assert _alive(pids + tree) == []
    with pytest.raises(SandboxStartError, match="the sandbox pool is closed"):
        await pool.open(TRIVIAL)


def test_sandbox_pool_zero_workers_is_the_in_process_pool() -> None:
    assert type(sandbox_pool(FAST, workers=0)) is EnvPool
    pool = sandbox_pool(FAST, workers=3)
    assert isinstance(pool, HarnessPool) and pool.workers == 3
    with pytest.raises(ValueError, match="workers must be a positive int"):
        HarnessPool(FAST, workers=-1)


CALLER = r'''
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
from sandbox_helpers import FAST, env_source
from envduels.sandbox import HarnessPool

async def main():
    pool = HarnessPool(FAST, workers=2)
    insts = [await pool.open(env_source("time.sleep(600)", prelude="import time"))
             for _ in range(2)]
    for inst in insts:
        await inst.reset(0)
    stepping = [asyncio.ensure_future(i.step("a")) for i in insts]   # mid-call
    await asyncio.sleep(0.3)
    print(json.dumps(pool.worker_pids), flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
'''


@pytest.mark.slow
def test_sigkill_of_the_caller_ends_its_workers_and_their_sandboxes() -> None:
    caller = subprocess.Popen([sys.executable, "-c", CALLER, str(Path(__file__).parent)],
                              stdout=subprocess.PIPE, text=True)
    try:
        workers = json.loads(caller.stdout.readline())
        assert len(workers) == 2
        tree = workers + [d for p in workers for d in descendants(p)]
        assert len(tree) >= 6   # two workers, each with a template and an instance at least
    finally:
        os.kill(caller.pid, signal.SIGKILL)
        caller.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = _alive(tree)
        if not left:
            break
        time.sleep(0.05)
    assert left == []


async def test_a_kill_from_outside_is_unexplained_never_a_cpu_limit() -> None:
    # The channel once named every SIGKILL it could not explain the CPU limit (issue 32's
    # "CPU time limit exceeded (60 s)" for a guessing game that had used milliseconds).
    async with EnvPool(FAST, warm=0) as pool:
        inst = await pool.open(env_source("time.sleep(5)", prelude="import time"))
        await inst.reset(0)
        stepping = asyncio.ensure_future(inst.step("x"))
        await asyncio.sleep(0.3)
        os.kill(inst._channel.init_pid or inst.pid, signal.SIGKILL)
        with pytest.raises(EnvFault) as caught:
            await stepping
        assert caught.value.reason.startswith(
            "worker killed by SIGKILL, unexplained (not the CPU limit: 0.")
        assert caught.value.reason.endswith(" s used of 20 s; no out-of-memory kill) during step")


async def test_a_worker_that_cannot_start_is_a_start_error_not_a_loop_of_restarts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "/bin/false")   # exits at once, answering nothing
    pool = HarnessPool(FAST, workers=2)
    try:
        with pytest.raises(SandboxStartError) as caught:
            for _ in range(3):
                await pool.open(TRIVIAL)
        assert caught.value.reason.startswith(("the harness worker process ",   # in flight
                                               "the harness could not start a worker process"))
        with pytest.raises(SandboxStartError, match="could not start a worker process"):
            await pool.open(TRIVIAL)
        assert pool.replaced == 0
    finally:
        await pool.aclose()
