"""Fixtures for the sandbox tests: a real bubblewrap pool, a host canary, a leftover check."""

from __future__ import annotations

import dataclasses
import os
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from envduels import _sandbox_defaults
from envduels.sandbox import EnvPool, HarnessPool, SandboxLimits, _pool
from envduels.sandbox._launcher import host

FAST = SandboxLimits(step_timeout_s=1.5, cpu_s=20, memory_mb=256, max_procs=32,
                     scratch_mb=16, file_size_mb=8, output_cap_bytes=64 << 10,
                     observation_max_chars=1000)

# For attacks that do real work before the limit stops them (touching memory, forking, filling
# files): a generous deadline, so that a loaded machine still shows the limit, not the timeout.
ROOMY = dataclasses.replace(FAST, step_timeout_s=15.0)

TRIVIAL = '''
class Counter:
    def __init__(self, max_turns=20):
        self.max_turns = max_turns
    def reset(self, seed=None):
        self.n = 0
        return "count to 3", {"seed": seed}
    def step(self, action):
        self.n += 1
        done = self.n >= 3
        return "n=%d" % self.n, (1.0 if done else 0.0), done, False, {}
    def oracle_action(self):
        return "\\\\boxed{next}"
'''


def env_source(step: str = "return 'ok', 0.0, False, False, {}", *, reset: str = "return 'start', {}",
               prelude: str = "") -> str:
    """An environment whose step (and reset) body is `step` (`reset`); `prelude` is module code."""
    return (textwrap.dedent(prelude) + "\n\nclass Attack:\n"
            "    def reset(self, seed=None):\n" + textwrap.indent(textwrap.dedent(reset), " " * 8)
            + "\n    def step(self, action):\n" + textwrap.indent(textwrap.dedent(step), " " * 8)
            + "\n")


def gvisor_missing() -> str | None:
    """Why the gVisor runtime cannot run here, as a skip reason, or None when it can. No
    runsc is an install step (CI installs it: the conftest fails that skip there); a harness
    that is not root is a property of the machine ("platform:")."""
    h = host()
    if h.runsc is None:
        return "gVisor's runsc is not installed (apt-get install runsc)"
    if not h.root:
        return "platform: gVisor's runsc needs root"
    return None


# ENVDUELS_TEST_WORKERS=N runs the sandbox suites with their pools in N harness worker
# processes (docs/workers.md): the fixtures' pools, and every `EnvPool(...)` a module of a
# suite that uses `sandbox_runtime` makes, become `HarnessPool`s under the test's runtime.
# A test that reads the in-process channel (`_channel`, `_spawn`) is skipped in that mode.
WORKERS = int(os.environ.get("ENVDUELS_TEST_WORKERS", "0") or 0)


def in_workers(limits: SandboxLimits, runtime: str | None = None, **options: object) -> HarnessPool:
    """The HarnessPool that stands for `EnvPool(limits, **options)` with ENVDUELS_TEST_WORKERS."""
    if runtime is not None:
        limits = dataclasses.replace(limits, runtime=runtime)
    return HarnessPool(limits, workers=WORKERS, **options)  # type: ignore[arg-type]


async def uses_templates(pool: EnvPool | HarnessPool) -> bool:
    """Whether `pool`'s instances come from templates now: the pool's own answer, or each of
    its harness workers'."""
    if isinstance(pool, HarnessPool):
        return all(s["templates"] for s in await pool.stats())
    return pool.uses_templates


def needs_in_process_pool() -> None:
    """Skip a test that reads the in-process channel when the suite runs in workers."""
    if WORKERS:
        pytest.skip("platform: reads the in-process channel; ENVDUELS_TEST_WORKERS is set")


@pytest.fixture(params=_sandbox_defaults.RUNTIMES)
def sandbox_runtime(request: pytest.FixtureRequest,
                    monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs the test once per sandbox runtime: every worker the test's pools start runs
    under it (the suites of tests/sandbox that use it hold under both)."""
    runtime = request.param
    if runtime == "gvisor" and (why := gvisor_missing()):
        pytest.skip(why)
    if WORKERS:
        if runtime == "gvisor":
            monkeypatch.setenv("ENVDUELS_TEMPLATES", "0")

        def pool_in_workers(limits: SandboxLimits = FAST, **options: object) -> HarnessPool:
            return in_workers(limits, runtime, **options)

        monkeypatch.setattr(request.module, "EnvPool", pool_in_workers, raising=False)
        return runtime
    launch = _pool.launch

    def launch_under(limits: SandboxLimits, **kw: object) -> object:
        return launch(dataclasses.replace(limits, runtime=runtime), **kw)

    monkeypatch.setattr(_pool, "launch", launch_under)
    if runtime == "gvisor":
        # gVisor starts a fresh sandbox per instance: no bubblewrap template may serve the pool
        monkeypatch.setenv("ENVDUELS_TEMPLATES", "0")
    return runtime


def sandbox_uid_processes() -> list[int]:
    """Host pids owned by any per-sandbox uid of this harness (should be none when idle)."""
    h = host()
    if not h.root:
        return []
    uids = set(h.claimed_uids())
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                uid = entry.stat().st_uid
            except OSError:
                continue
            if uid in uids:
                found.append(int(entry.name))
    return found


def pid_namespace(pid: int) -> str:
    """The pid-namespace identity of host process `pid`, e.g. "pid:[4026532301]"."""
    return str(Path(f"/proc/{pid}/ns/pid").readlink())


def namespace_pids(init_pid: int | None = None, *, namespace: str | None = None) -> list[int]:
    """Host pids of every process in the pid namespace whose init is `init_pid` (or named)."""
    try:
        target = namespace or pid_namespace(init_pid or 0)
    except OSError:
        return []
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str((entry / "ns" / "pid").readlink()) == target and not _zombie(entry):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _zombie(proc: Path) -> bool:
    """An exited process not yet reaped: it holds a pid number, nothing else."""
    try:
        return (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


@pytest.fixture
def canary(tmp_path: Path) -> Iterator[Path]:
    """A host file no environment may change; checked after the test."""
    path = tmp_path / "canary.txt"
    path.write_text("untouched")
    yield path
    assert path.read_text() == "untouched"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["canary.txt"]


def _runtime_of(request: pytest.FixtureRequest) -> str | None:
    if "sandbox_runtime" in request.fixturenames:
        return str(request.getfixturevalue("sandbox_runtime"))
    return None


@pytest.fixture
async def pool(canary: Path, request: pytest.FixtureRequest) -> AsyncIterator[EnvPool]:
    """A sandboxed pool with short limits; afterwards no sandbox process may remain."""
    async with (in_workers(FAST, _runtime_of(request), warm=1) if WORKERS
                else EnvPool(FAST, warm=1)) as p:
        yield p  # type: ignore[misc]
    left = sandbox_uid_processes()
    assert left == [], [(p, Path(f"/proc/{p}/stat").read_text()) for p in left]


@pytest.fixture
async def fresh_pool(canary: Path, request: pytest.FixtureRequest) -> AsyncIterator[EnvPool]:
    """Like `pool`, with fresh sandboxes and a warm worker instead of templates: for the
    warm-pool machinery itself (docs/templates.md says when the pool uses it)."""
    async with (in_workers(FAST, _runtime_of(request), warm=1, templates=False) if WORKERS
                else EnvPool(FAST, warm=1, templates=False)) as p:
        yield p  # type: ignore[misc]
    left = sandbox_uid_processes()
    assert left == [], [Path(f"/proc/{p}/stat").read_text() for p in left]


@pytest.fixture
async def roomy_pool(canary: Path, request: pytest.FixtureRequest) -> AsyncIterator[EnvPool]:
    """Like `pool`, with a 15 s deadline per call."""
    async with (in_workers(ROOMY, _runtime_of(request), warm=1) if WORKERS
                else EnvPool(ROOMY, warm=1)) as p:
        yield p  # type: ignore[misc]
    left = sandbox_uid_processes()
    assert left == [], [Path(f"/proc/{p}/stat").read_text() for p in left]


async def assert_pool_still_works(pool: EnvPool) -> None:
    """The harness goes on: a fresh instance loads and plays after the attack."""
    inst = await pool.open(TRIVIAL)
    try:
        assert await inst.reset(1) == ("count to 3", {"seed": 1})
        result = await inst.step("\\boxed{x}")
        assert (result.observation, result.reward, result.terminated) == ("n=1", 0.0, False)
    finally:
        await inst.close()
