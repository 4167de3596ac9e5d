"""How the pool keeps workers warm: it follows the instances in use, prestarts an announced
batch without overshooting it, hands a start to an `open()` already waiting, and collects an
instance closed without waiting."""

from __future__ import annotations

import asyncio

import pytest
from sandbox_helpers import FAST, TRIVIAL, sandbox_uid_processes

from envduels.sandbox import EnvFault, EnvPool, SandboxStartError, _launcher

MISSING = "/nonexistent/envduels-test/bwrap"


async def _ready_settles(pool: EnvPool, want: int, *, timeout: float = 20.0) -> int:
    """Wait until `want` workers are ready, then a little longer: what the pool holds then."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while pool.ready < want and loop.time() < end:
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.5)   # a pool that overshoots would show it now
    return pool.ready


async def test_warm_workers_follow_the_instances_in_use_up_to_max_warm() -> None:
    async with EnvPool(FAST, warm=0, max_warm=3, templates=False) as pool:
        assert await _ready_settles(pool, 0, timeout=0) == 0
        first = [await pool.open(TRIVIAL) for _ in range(2)]
        assert await _ready_settles(pool, 2) == 2          # one successor per instance in use
        more = [await pool.open(TRIVIAL) for _ in range(3)]
        assert await _ready_settles(pool, 3) == 3          # five in use, capped at max_warm
        for inst in first + more:
            await inst.close()
    assert sandbox_uid_processes() == []


async def test_an_announced_batch_is_prestarted_and_never_overstarted() -> None:
    async with EnvPool(FAST, warm=0, max_warm=8, templates=False) as pool:
        pool.expect(3)
        assert await _ready_settles(pool, 3) == 3           # the batch, not max_warm
        opened = [await pool.open(TRIVIAL) for _ in range(3)]
        assert await _ready_settles(pool, 0, timeout=0) == 0   # nothing left to come
        pool.expect(None)                                   # back to following the 3 in use
        assert await _ready_settles(pool, 3) == 3
        for inst in opened:
            await inst.close()


async def test_opens_waiting_for_starts_each_get_their_own_worker() -> None:
    async with EnvPool(FAST, warm=0, parallel_starts=2) as pool:
        opened = await asyncio.gather(*(pool.open(TRIVIAL) for _ in range(5)))
        assert len({inst.pid for inst in opened}) == 5
        for seed, inst in enumerate(opened):
            assert await inst.reset(seed) == ("count to 3", {"seed": seed})
            await inst.close()
        assert pool.ready == 0


async def test_close_without_waiting_kills_at_once_and_aclose_collects_the_rest() -> None:
    pool = EnvPool(FAST, warm=0)
    inst = await pool.open(TRIVIAL)
    await inst.reset(0)
    await inst.close(wait=False)
    assert not inst.alive
    await pool.aclose()
    assert sandbox_uid_processes() == []


async def test_a_closed_pool_is_a_start_error_not_the_environments_fault() -> None:
    pool = EnvPool(FAST, warm=0)
    await pool.aclose()
    with pytest.raises(SandboxStartError) as info:
        await pool.open(TRIVIAL)
    assert isinstance(info.value, EnvFault)
    assert info.value.reason == "the sandbox pool is closed"


async def test_a_launcher_pointed_at_a_missing_program_is_a_start_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_launcher.host(), "bwrap", MISSING)
    async with EnvPool(FAST, warm=0) as pool:
        with pytest.raises(SandboxStartError) as info:
            await pool.open(TRIVIAL)
    if _launcher.host().setpriv:   # root: setpriv switches the uid, then cannot exec bwrap
        assert info.value.reason == ("the sandbox failed to start: worker exited with status "
                                     "127 during start-up")
        assert f"failed to execute {MISSING}" in info.value.detail
    else:                          # Popen itself cannot exec it
        assert info.value.reason == ("the sandbox failed to start: [Errno 2] No such file or "
                                     f"directory: '{MISSING}'")
    assert sandbox_uid_processes() == []
