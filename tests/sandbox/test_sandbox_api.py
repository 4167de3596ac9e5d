"""The sandbox's public contract: loading, results, faults, pool, sync access."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
import time

import pytest
from sandbox_helpers import (
    FAST,
    TRIVIAL,
    assert_pool_still_works,
    env_source,
    needs_in_process_pool,
)

from envduels.config import SandboxConfig
from envduels.errors import UserError
from envduels.sandbox import (
    EnvFault,
    EnvPool,
    SandboxLimits,
    SandboxUnavailable,
    StepResult,
    _launcher,
    open_env_sync,
)


async def test_open_reports_class_turns_and_oracle(pool: EnvPool) -> None:
    inst = await pool.open(TRIVIAL, max_turns=7)
    assert (inst.class_name, inst.max_turns, inst.has_oracle) == ("Counter", 7, True)
    assert await inst.reset(5) == ("count to 3", {"seed": 5})
    assert await inst.step("\\boxed{a}") == StepResult("n=1", 0.0, False, False, {})
    assert await inst.oracle_action() == "\\boxed{next}"
    await inst.step("a")
    assert await inst.step("a") == StepResult("n=3", 1.0, True, False, {})
    await inst.close()
    await inst.close()  # idempotent
    with pytest.raises(EnvFault, match="instance is closed"):
        await inst.step("a")


async def test_max_turns_defaults_to_20_and_no_arg_constructor_is_used(pool: EnvPool) -> None:
    src = env_source(prelude="")  # class Attack with no __init__ and no max_turns
    inst = await pool.open(src, max_turns=9)
    assert (inst.class_name, inst.max_turns, inst.has_oracle) == ("Attack", 9, False)
    await inst.close()
    inst = await pool.open(src)
    assert inst.max_turns == 20
    with pytest.raises(EnvFault, match="^the environment has no oracle_action$"):
        await inst.oracle_action()
    await inst.close()


@pytest.mark.parametrize(("source", "class_name", "reason"), [
    ("x = 1\n", None, "no environment class (a class with reset and step) in the source"),
    ("class A:\n    def reset(self): pass\n    def step(self, a): pass\n"
     "class B:\n    def reset(self): pass\n    def step(self, a): pass\n"
     "class C(A): pass\nclass D(A): pass\n", None,
     "3 environment classes (B, C, D); set class_name"),
    ("class A:\n    def reset(self): pass\n    def step(self, a): pass\n", "Z",
     "no environment class named Z (a class with reset and step)"),
    ("def broken(:\n", None, "the source does not compile: invalid syntax (line 1)"),
    ("raise ImportError('numpy is not allowed')\n", None,
     "loading the source raised ImportError: numpy is not allowed (env line 1 in <module>)"),
    ("class A:\n    def __init__(self):\n        raise ValueError('nope')\n"
     "    def reset(self): pass\n    def step(self, a): pass\n", None,
     "constructing A raised ValueError: nope (env line 3 in __init__)"),
])
async def test_sources_that_do_not_load_fail_with_a_reason(pool: EnvPool, source: str,
                                                           class_name: str | None,
                                                           reason: str) -> None:
    with pytest.raises(EnvFault) as info:
        await pool.open(source, class_name=class_name)
    assert info.value.reason == reason
    await assert_pool_still_works(pool)


async def test_a_base_class_extended_in_the_source_is_not_a_candidate(pool: EnvPool) -> None:
    src = ("class Base:\n    def reset(self, seed=None): raise NotImplementedError\n"
           "    def step(self, a): raise NotImplementedError\n"
           "class Game(Base):\n    def reset(self, seed=None): return 'game', {}\n")
    inst = await pool.open(src)
    assert inst.class_name == "Game"
    assert await inst.reset(None) == ("game", {})
    await inst.close()


@pytest.mark.parametrize(("source", "reason"), [
    ("import time\ntime.sleep(60)\n", "load timed out after 1.5 s"),
    ("class A:\n    def __init__(self):\n        while True: pass\n"
     "    def reset(self): pass\n    def step(self, a): pass\n", "load timed out after 1.5 s"),
])
async def test_a_source_that_hangs_while_loading_times_out(pool: EnvPool, source: str,
                                                           reason: str) -> None:
    with pytest.raises(EnvFault) as info:
        await pool.open(source)
    assert info.value.reason == reason
    await assert_pool_still_works(pool)


async def test_a_warm_worker_that_died_while_idle_is_skipped(fresh_pool: EnvPool) -> None:
    needs_in_process_pool()   # reads the pool's warm queue
    pool = fresh_pool
    for _ in range(200):
        if pool._ready:
            break
        await asyncio.sleep(0.01)
    idle = pool._ready[0]
    idle.kill()
    await asyncio.sleep(0.2)
    inst = await pool.open(TRIVIAL)
    assert inst.class_name == "Counter"
    await inst.close()


async def test_a_cancelled_call_kills_the_worker(pool: EnvPool) -> None:
    inst = await pool.open(env_source("time.sleep(60)", prelude="import time"))
    await inst.reset(0)
    task = asyncio.ensure_future(inst.step("a"))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(EnvFault, match="^step was cancelled$"):
        await inst.step("a")
    await inst.close()


async def test_class_name_picks_one_of_several(pool: EnvPool) -> None:
    src = ("class A:\n    def reset(self, seed=None): return 'a', {}\n"
           "    def step(self, a): return 'a', 0, False, False, {}\n"
           "class B(A):\n    def reset(self, seed=None): return 'b', {}\n")
    inst = await pool.open(src, class_name="B")
    assert await inst.reset(None) == ("b", {})
    await inst.close()


async def test_exception_in_step_is_a_fault_with_location_and_kills_the_instance(
        pool: EnvPool) -> None:
    inst = await pool.open(env_source("raise ValueError('bad move ' + action)"))
    await inst.reset(0)
    with pytest.raises(EnvFault) as info:
        await inst.step("up")
    assert info.value.reason == "step raised ValueError: bad move up (env line 7 in step)"
    assert "Traceback" in info.value.detail
    assert not inst.alive
    with pytest.raises(EnvFault, match="^step raised ValueError"):
        await inst.reset(0)
    await assert_pool_still_works(pool)


async def test_string_hashing_is_the_same_in_every_instance(pool: EnvPool) -> None:
    # set iteration order over strings must not differ between two instances of one env
    src = env_source(reset="return ','.join(sorted({'ab', 'cd', 'ef'}, key=hash)), {}")
    first, second = await pool.open(src), await pool.open(src)
    assert (await first.reset(0))[0] == (await second.reset(0))[0]
    assert (await first.reset(0))[0] == ",".join(sorted({"ab", "cd", "ef"}, key=_hash0))
    await first.close()
    await second.close()


def _hash0(text: str) -> int:
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", f"print(hash({text!r}))"], capture_output=True,
                         text=True, env={"PYTHONHASHSEED": "0"}, check=True)
    return int(out.stdout)


async def test_print_goes_to_captured_output_not_the_protocol(pool: EnvPool) -> None:
    inst = await pool.open(env_source("print('thinking', action)\nreturn 'o', 1, True, False, {}"))
    await inst.reset(0)
    assert await inst.step("a") == StepResult("o", 1.0, True, False, {})
    assert await inst.fetch_output() == "thinking a\n"   # held in a worker: brought over
    await inst.close()


async def test_info_is_made_json_safe(pool: EnvPool) -> None:
    inst = await pool.open(env_source(
        "return 'o', 0, False, False, {'x': float('nan'), 'o': object, 3: (1, 2)}"))
    await inst.reset(0)
    result = await inst.step("a")
    assert result.info == {"x": "nan", "o": "<class 'object'>", "3": [1, 2]}
    await inst.close()


async def test_warm_pool_opens_in_well_under_50_ms_and_refills(fresh_pool: EnvPool) -> None:
    needs_in_process_pool()   # reads the pool's warm queue
    pool = fresh_pool
    for _ in range(500):   # let the warm worker start (a fixed wait is too short under load)
        if pool._ready:
            break
        await asyncio.sleep(0.02)
    start = time.perf_counter()
    inst = await pool.open(TRIVIAL)
    assert time.perf_counter() - start < 0.05  # generous: ~1 ms on an idle machine
    await inst.close()
    for _ in range(100):
        if pool._ready:
            break
        await asyncio.sleep(0.02)
    assert len(pool._ready) == 1


async def test_many_instances_run_concurrently(pool: EnvPool) -> None:
    async def episode(seed: int) -> float:
        inst = await pool.open(TRIVIAL)
        try:
            await inst.reset(seed)
            total = 0.0
            for _ in range(3):
                total += (await inst.step("a")).reward
            return total
        finally:
            await inst.close()

    assert await asyncio.gather(*(episode(s) for s in range(12))) == [1.0] * 12


def test_sync_instance_works_outside_and_inside_an_event_loop() -> None:
    with open_env_sync(TRIVIAL, limits=FAST) as env:
        assert env.class_name == "Counter"
        assert env.reset(2) == ("count to 3", {"seed": 2})
        assert env.step("a").observation == "n=1"

    async def inside() -> str:
        with open_env_sync(TRIVIAL, limits=FAST) as env:
            env.reset(0)
            return env.step("a").observation

    assert asyncio.run(inside()) == "n=1"


def test_sync_open_raises_the_load_fault() -> None:
    with pytest.raises(EnvFault, match="^no environment class"):
        open_env_sync("x = 1", limits=FAST)


def test_without_bwrap_the_pool_refuses_and_says_how_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_launcher.host(), "bwrap", None)
    with pytest.raises(SandboxUnavailable) as info:
        EnvPool(FAST)
    assert isinstance(info.value, UserError)
    message = str(info.value)
    assert "apt-get install bubblewrap" in message and "--unsafe-no-sandbox" in message
    assert "\n" not in message


async def test_bwrap_that_cannot_create_namespaces_is_reported_as_unavailable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tempfile.mkdtemp(prefix="envduels-fake-bwrap-")
    fake = os.path.join(folder, "bwrap")
    with open(fake, "w") as fh:
        fh.write("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    os.chmod(folder, 0o755)
    os.chmod(fake, 0o755)
    monkeypatch.setattr(_launcher.host(), "bwrap", fake)
    try:
        async with EnvPool(FAST, warm=0) as pool:
            with pytest.raises(SandboxUnavailable) as info:
                await pool.open(TRIVIAL)
    finally:
        shutil.rmtree(folder)
    assert str(info.value).startswith("bubblewrap cannot create a sandbox here (bwrap: No "
                                      "permissions to create new namespace): ")


def test_unsafe_mode_runs_without_bwrap_and_says_so_loudly_once_per_process(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from envduels.sandbox import _pool

    monkeypatch.setattr(_launcher.host(), "bwrap", None)
    monkeypatch.setattr(_pool, "_UNSAFE_WARNED", threading.Event())
    for _ in range(2):
        with open_env_sync(TRIVIAL, limits=FAST, unsafe_no_sandbox=True) as env:
            env.reset(0)
            assert env.step("a").observation == "n=1"
    warnings = [r for r in caplog.records if "UNSAFE" in r.getMessage()]
    assert [r.levelname for r in warnings] == ["WARNING"]


def test_limits_come_from_the_run_config() -> None:
    cfg = SandboxConfig(memory_mb=1024, step_timeout_s=2.5, cpu_s=30, max_procs=16,
                        observation_max_chars=500)
    limits = SandboxLimits.from_config(cfg)
    assert (limits.memory_mb, limits.step_timeout_s, limits.cpu_s, limits.max_procs,
            limits.observation_max_chars) == (1024, 2.5, 30, 16, 500)
    assert limits.file_size_mb == SandboxLimits().file_size_mb
    with pytest.raises(ValueError, match="memory_mb must be a positive int"):
        SandboxLimits(memory_mb=0)


async def test_lone_surrogates_cross_the_boundary_as_replacement_characters(pool: EnvPool) -> None:
    # a solver's reply may hold a lone surrogate, and so may anything the environment returns
    # or raises: neither may kill the worker (which would blame the author for the solver)
    src = env_source("if action == 'boom':\n    raise ValueError('bad \\udcff action')\n"
                     "return 'got ' + action, 0.0, False, False, {'k\\ud800': ['\\udcff']}",
                     reset="return 'start \\ud800 here', {}")
    inst = await pool.open(src)
    assert await inst.reset(1) == ("start \ufffd here", {})
    assert await inst.step("\\boxed{a\ud800}") == StepResult(
        "got \\boxed{a\ufffd}", 0.0, False, False, {"k\ufffd": ["\ufffd"]})
    with pytest.raises(EnvFault) as caught:
        await inst.step("boom")
    assert caught.value.reason == "step raised ValueError: bad \ufffd action (env line 8 in step)"
    await inst.close()
