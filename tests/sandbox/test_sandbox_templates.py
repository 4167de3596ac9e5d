"""Instances forked from a template: each episode as fresh as a new sandbox (docs/sandbox.md).

Every test runs real bubblewrap templates; they are skipped where the host cannot run them
(not root, no cgroups, no libseccomp), where the pool uses fresh sandboxes instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from sandbox_helpers import FAST, TRIVIAL, namespace_pids, sandbox_uid_processes

from envduels.sandbox import EnvPool, SandboxStartError, _template
from envduels.sandbox._channel import WorkerChannel
from envduels.sandbox._template import instance_mode, template_problem

pytestmark = pytest.mark.skipif(template_problem(FAST) is not None,
                                reason=f"platform: no templates here: {template_problem(FAST)}")

# reset() reports everything one episode could have left for another; step("leave") leaves
# all of it: files in /tmp and /dev/shm, a variable, a module global and a class attribute, an
# open descriptor, a thread and a child still running, signal handlers, an interval timer.
LEAVER = r'''
import gc, json, os, signal, sys, threading, time

MARK = "clean"

class Leaver:
    mark = "clean"
    def reset(self, seed=None):
        shm = sorted(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else None
        return json.dumps({
            "tmp": sorted(os.listdir("/tmp")), "shm": shm,
            "env": os.environ.get("LEFT"), "global": MARK, "class": Leaver.mark,
            "fds": sorted(os.listdir("/proc/self/fd")),
            "threads": threading.active_count(), "pids": sorted(
                p for p in os.listdir("/proc") if p.isdigit()),
            "usr1": str(signal.getsignal(signal.SIGUSR1)),
            "term": str(signal.getsignal(signal.SIGTERM)),
            "itimer": signal.getitimer(signal.ITIMER_REAL)[0] > 0,
            "pid": os.getpid(), "ppid": os.getppid(),
        }), {}
    def step(self, action):
        global MARK
        left = []
        for path in ("/tmp/left", "/dev/shm/left"):
            try:
                with open(path, "w") as fh:
                    fh.write("from an earlier episode")
                left.append(path)
            except OSError:
                pass
        os.environ["LEFT"] = "yes"
        MARK = Leaver.mark = "dirty"
        self.keep = open("/tmp/held", "w")
        threading.Thread(target=lambda: time.sleep(60), daemon=True).start()
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        signal.signal(signal.SIGUSR1, lambda *a: None)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.setitimer(signal.ITIMER_REAL, 30)
        return json.dumps(left), 0.0, False, False, {}
'''

# Module code starts a thread that counts what it can; reset reports every counter an
# instance could read that would advance with the episodes forked before it.
COUNTER = r'''
import gc, json, os, sys, threading, time

TICKS = [0]
RESETS = [0]

def _count():
    while True:
        TICKS[0] += 1
        time.sleep(0.001)

threading.Thread(target=_count, daemon=True).start()

class Order:
    def reset(self, seed=None):
        RESETS[0] += 1
        return json.dumps({
            "resets": RESETS[0], "pid": os.getpid(), "threads": threading.active_count(),
            "gc_count": gc.get_count(), "gc_collections": [s["collections"] for s in gc.get_stats()],
            "blocks": sys.getallocatedblocks() // 64, "modules": sorted(sys.modules),
            "pids": sorted(p for p in os.listdir("/proc") if p.isdigit()),
            "cgroup_is_root_relative": [line.rsplit(":", 1)[1].count("/") for line in
                                        open("/proc/self/cgroup").read().splitlines()],
        }), {}
    def step(self, action):
        return "ok", 0.0, True, False, {}
'''


WIDE = dataclasses.replace(FAST, observation_max_chars=8000)   # the reports are long


@pytest.fixture
async def tpool() -> EnvPool:
    async with EnvPool(WIDE, warm=0) as p:
        assert p.uses_templates
        yield p
    left = sandbox_uid_processes()
    assert left == [], [Path(f"/proc/{p}/stat").read_text() for p in left]


async def _observe(pool: EnvPool, source: str, **kw: bool) -> str:
    """The first observation (reset with seed 1) of a new instance of `source`, then closed."""
    inst = await pool.open(source, **kw)
    try:
        obs, _ = await inst.reset(1)
        return obs
    finally:
        await inst.close()


async def _report(pool: EnvPool, source: str, **kw: bool) -> dict:
    return json.loads(await _observe(pool, source, **kw))


async def test_an_episode_leaves_nothing_for_the_next_episode_of_the_same_template(
        tpool: EnvPool) -> None:
    baseline = await _report(tpool, LEAVER)
    assert baseline["tmp"] == [] and baseline["env"] is None and baseline["global"] == "clean"
    assert baseline["fds"] == ["0", "1", "2", "3", "4"] or baseline["fds"][:5] == ["0", "1", "2", "3", "4"]
    first = await tpool.open(LEAVER)
    await first.reset(1)
    left = json.loads((await first.step("leave")).observation)
    assert "/tmp/left" in left   # it did leave a file
    # while the leaver still runs (its thread, child, timer alive) and after it is gone
    during = await _report(tpool, LEAVER)
    await first.close()
    after = await _report(tpool, LEAVER)
    assert during == baseline
    assert after == baseline


async def test_module_code_s_thread_cannot_tell_the_episodes_apart(tpool: EnvPool) -> None:
    reports = [await _report(tpool, COUNTER) for _ in range(5)]
    assert reports[0]["resets"] == 1 and reports[0]["pid"] == 1   # the worker is pid 1
    assert all(r == reports[0] for r in reports), [r for r in reports if r != reports[0]]


# Every frame on the instance's stack (the template's loop and the init's code are below the
# worker's), its locals one level deep: whatever the template's code left there per fork.
FRAMES = r"""
import ctypes, hashlib, json, sys

_PLAIN = (int, str, bytes, type(None), ctypes._SimpleCData)

def _frames():
    out, frame = [], sys._getframe(1)
    while frame is not None:
        seen = {}
        for name, value in frame.f_locals.items():
            if isinstance(value, _PLAIN):
                seen[name] = repr(value)
            elif hasattr(value, "__dict__") and not isinstance(value, type(sys)):
                seen[name] = sorted((k, repr(x)) for k, x in vars(value).items() if isinstance(x, _PLAIN))
        out.append([frame.f_code.co_name, sorted(seen.items())])
        frame = frame.f_back
    return out

class Frames:
    def reset(self, seed=None):
        frames = _frames()
        whole = hashlib.sha256(json.dumps(frames).encode()).hexdigest()
        return json.dumps({"whole": whole, "names": [name for name, _ in frames],
                           "template": [hashlib.sha256(json.dumps(f).encode()).hexdigest()
                                        for f in frames if f[0] in ("_init", "<module>")]}), {}
    def step(self, action):
        return "ok", 0.0, True, False, {}
"""


async def test_the_first_instance_of_a_template_reads_what_every_later_one_reads(
        tpool: EnvPool) -> None:
    # The template's clone kept the last fork's pidfd number: the first instance read -1,
    # every later one the same number, so an environment knew its first episode.
    reports = [await _report(tpool, FRAMES) for _ in range(3)]
    # the init's frame and the template's module frame are there to be read; the loop that
    # served the forks (and its frame's per-fork state) is not
    assert {"_init", "<module>"} <= set(reports[0]["names"])
    assert not {"serve", "_template_main"} & set(reports[0]["names"])
    assert reports[1] == reports[0] and reports[2] == reports[0]


async def test_signals_the_worker_has_no_handler_for_do_not_end_it(tpool: EnvPool) -> None:
    # The worker is its instance's init (docs/sandbox.md): the kernel shields it from the
    # signals it leaves at SIG_DFL, sent from inside its namespace (SIGINT, which Python
    # handles, raises KeyboardInterrupt in the environment's code, as in any program).
    source = TRIVIAL.replace(
        'return "count to 3", {"seed": seed}',
        'import os, signal, time\n'
        '        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGQUIT):\n'
        '            os.kill(1, sig)\n'
        '        time.sleep(0.3)\n'
        '        return "count to 3", {"seed": seed}')
    inst = await tpool.open(source)
    try:
        obs, _ = await inst.reset(1)
        assert obs == "count to 3"
        assert (await inst.step("next")).observation == "n=1"
    finally:
        await inst.close()


async def test_the_harness_holds_an_instance_s_pidfd_close_on_exec(tpool: EnvPool) -> None:
    inst = await tpool.open(TRIVIAL)
    try:
        await inst.reset(1)
        pidfd = inst._channel.launched.popen.pidfd
        assert pidfd >= 0 and not os.get_inheritable(pidfd)
    finally:
        await inst.close()


async def test_a_replay_never_shares_a_process_template_or_tmpfs_with_its_play(
        tpool: EnvPool) -> None:
    source = LEAVER
    play = await tpool.open(source)
    replay = await tpool.open(source, replay=True)
    try:
        await play.reset(1)
        await play.step("leave")   # the play's /tmp now holds files
        obs, _ = await replay.reset(1)
        assert json.loads(obs)["tmp"] == []
        harness_side = set(_ancestors(os.getpid()))
        play_side = set(_ancestors(play.pid)) - harness_side
        replay_side = set(_ancestors(replay.pid)) - harness_side
        assert play_side and replay_side
        assert play_side.isdisjoint(replay_side)
        assert Path(f"/proc/{play.pid}").stat().st_uid != Path(f"/proc/{replay.pid}").stat().st_uid
        assert len(tpool._templates.pids()) == 2
    finally:
        await play.close()
        await replay.close()


async def test_an_instance_holds_no_capability_and_runs_under_seccomp_and_no_new_privs(
        tpool: EnvPool) -> None:
    source = TRIVIAL.replace('return "count to 3", {"seed": seed}',
                             'return open("/proc/self/status").read(), {"seed": seed}')
    status = await _observe(tpool, source)
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[cap], 16) == 0, (cap, fields[cap])
    assert fields["NoNewPrivs"].strip() == "1"
    assert fields["Seccomp"].strip() == "2"


async def test_the_instance_s_init_is_confined_before_the_worker_exists(tpool: EnvPool) -> None:
    # the worker inherits its confinement from its init (pid 1 here): both hold it
    source = TRIVIAL.replace('return "count to 3", {"seed": seed}',
                             'return open("/proc/1/status").read(), {"seed": seed}')
    status = await _observe(tpool, source)
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[cap], 16) == 0, (cap, fields[cap])
    assert fields["NoNewPrivs"].strip() == "1"
    assert fields["Seccomp"].strip() == "2"


async def test_an_instance_is_its_worker_a_child_of_the_template(tpool: EnvPool) -> None:
    # no process in between: the worker is the instance's pid 1 (docs/sandbox.md)
    inst = await tpool.open(TRIVIAL)
    try:
        await inst.reset(1)
        init = inst._channel.pid
        (template,) = tpool._templates._templates.values()
        bwrap_init = template.result().init_pid
        template_python = Path(f"/proc/{bwrap_init}/task/{bwrap_init}/children").read_text()
        assert _ancestors(init)[1] == int(template_python.split()[0])
        assert len(namespace_pids(init)) == 1   # the worker, pid 1
    finally:
        await inst.close()
    assert namespace_pids(init) == []


async def test_closing_an_instance_signals_its_init_by_pidfd_never_by_a_pid_number(
        tpool: EnvPool) -> None:
    # As if the kernel had given the init's pid to another process: the harness's kill must
    # reach the instance, and the process now holding that number must not be signalled.
    decoy = subprocess.Popen(["sleep", "60"])
    inst = await tpool.open(TRIVIAL)
    try:
        await inst.reset(1)
        init = inst._channel.pid
        inst._channel.pid = inst._channel.launched.popen.pid = decoy.pid
        await inst.close()
        assert namespace_pids(init) == []
        assert decoy.poll() is None
    finally:
        decoy.kill()
        decoy.wait()


async def test_the_worker_holds_its_pipes_and_its_status_socket_and_nothing_else(
        tpool: EnvPool) -> None:
    # pid 1 is the worker: no init holds descriptors beside it. Output on 1 and 2, requests
    # on 3, responses on 4, the exit status on 5 (not inherited across exec).
    source = TRIVIAL.replace(
        'return "count to 3", {"seed": seed}',
        'import os\n'
        '        fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))\n'
        '        return repr((os.getpid(), fds[:6], os.get_inheritable(5))), {"seed": seed}')
    pid, fds, inheritable = eval(await _observe(tpool, source))   # noqa: S307
    assert (pid, fds[:6], inheritable) == (1, [0, 1, 2, 3, 4, 5], False)


async def test_collecting_a_closed_instance_does_not_spin_the_event_loop(
        tpool: EnvPool, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its output pipe is at EOF (readable for ever) while the harness waits for the exit
    # status: a reader left on it ran once per loop iteration, hundreds per instance.
    calls = [0]
    original = WorkerChannel._on_output

    def counting(self: WorkerChannel) -> None:
        calls[0] += 1
        original(self)

    monkeypatch.setattr(WorkerChannel, "_on_output", counting)
    for _ in range(3):
        inst = await tpool.open(TRIVIAL)
        await inst.reset(1)
        before = calls[0]
        await inst.close()
        assert calls[0] - before <= 2, calls[0] - before


async def test_an_open_cancelled_while_its_instance_forks_leaves_no_instance_behind(
        tpool: EnvPool, monkeypatch: pytest.MonkeyPatch) -> None:
    # The fork runs in a thread and completes whatever its opener does; an opener cancelled
    # meanwhile (a run stopped, a timeout) must not leave that instance alive until the
    # template closes, holding its init, worker, cgroups and pipes.
    entered, gate = threading.Event(), threading.Event()
    original = _template.Template.fork

    def held(self: _template.Template, limits: object) -> object:
        entered.set()
        gate.wait(10)
        return original(self, limits)   # type: ignore[arg-type]

    monkeypatch.setattr(_template.Template, "fork", held)
    loop = asyncio.get_running_loop()
    opening = asyncio.create_task(tpool.open(TRIVIAL + "\n# a source of its own\n"))
    assert await loop.run_in_executor(None, entered.wait, 30)
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    gate.set()
    (template,) = [f.result() for f in tpool._templates._templates.values()]
    deadline = time.monotonic() + 10
    while not template.instances:
        assert time.monotonic() < deadline, "the held fork never completed"
        await asyncio.sleep(0.02)
    first = template.instances[0]   # the cancelled open's (a spare the pool forks later is
    while first.pidfd is not None:  # its own, and owned by a channel)
        assert time.monotonic() < deadline, "a cancelled open left its instance alive"
        await asyncio.sleep(0.02)
    assert namespace_pids(first.pid) == []   # released after its init exited: nothing left
    owned = {c.launched.popen.pid for c in tpool._live}
    assert [p.pid for p in template.instances if p.alive and p.pid not in owned] == []


async def test_an_open_cancelled_while_its_template_starts_leaves_the_source_usable(
        tpool: EnvPool, monkeypatch: pytest.MonkeyPatch) -> None:
    # A served session whose client goes away while its environment's template starts
    # cancels that open. The start completes for the next open of the same source, which
    # must not wait forever on a template nobody finishes.
    entered, gate = threading.Event(), threading.Event()
    original = _template.Template.start

    def held(self: _template.Template, limits: object, source: str) -> None:
        entered.set()
        gate.wait(10)
        original(self, limits, source)   # type: ignore[arg-type]

    monkeypatch.setattr(_template.Template, "start", held)
    source = TRIVIAL + "\n# a source of its own, started once\n"
    loop = asyncio.get_running_loop()
    opening = asyncio.create_task(tpool.open(source))
    assert await loop.run_in_executor(None, entered.wait, 30)
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    gate.set()
    inst = await asyncio.wait_for(tpool.open(source), 30)
    assert (await inst.reset(1))[0]
    await inst.close()
    assert len(tpool._templates.pids()) == 1   # the one template, started once


async def test_a_template_keeps_handles_of_its_live_instances_not_of_every_one_it_forked(
        tpool: EnvPool) -> None:
    for _ in range(80):
        inst = await tpool.open(TRIVIAL)
        await inst.close()
    (template,) = [f.result() for f in tpool._templates._templates.values()]
    # pruned once the list reached 64; what is left: the ones since, and the pool's spares
    assert len(template.instances) < 30
    assert template.live() <= 3


async def test_a_template_that_cannot_start_falls_back_to_fresh_sandboxes_and_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_template, "template_argv",
                        lambda h, limits: ["/nonexistent-bwrap"])
    monkeypatch.setattr(_template, "_fallback_reason", None)
    async with EnvPool(FAST, warm=0) as pool:
        inst = await pool.open(TRIVIAL)
        try:
            assert await inst.reset(1) == ("count to 3", {"seed": 1})
        finally:
            await inst.close()
        assert not pool.uses_templates
    assert instance_mode(FAST).startswith("fresh sandboxes, one per instance: ")


async def test_a_kernel_that_refuses_the_first_instance_s_cgroup_join_gets_fresh_sandboxes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Before Linux 5.16 the kernel checks a cgroup move against the writer's credentials, so
    # the init's join through the harness's descriptor fails for every instance: as if it
    # were refused, the init gets descriptors it cannot write. The pool must fall back to
    # fresh sandboxes and say why, not fail every open.
    monkeypatch.setattr(_template, "_procs_fd", lambda group: os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
    monkeypatch.setattr(_template, "_instance_started", False)
    monkeypatch.setattr(_template, "_fallback_reason", None)
    async with EnvPool(FAST, warm=0) as pool:
        assert pool.uses_templates
        for _ in range(2):
            inst = await pool.open(TRIVIAL)
            try:
                assert await inst.reset(1) == ("count to 3", {"seed": 1})
                assert not inst._channel.launched.forked
            finally:
                await inst.close()
        assert not pool.uses_templates
    assert instance_mode(FAST) == ("fresh sandboxes, one per instance: the kernel refused a forked "
                                   "instance's join of its cgroups (Bad file descriptor; Linux before "
                                   "5.16 checks the writer's credentials, not the opener's)")


async def test_a_join_refused_after_instances_started_is_that_instance_s_failure_only(
        tpool: EnvPool, monkeypatch: pytest.MonkeyPatch) -> None:
    inst = await tpool.open(TRIVIAL)
    await inst.close()
    monkeypatch.setattr(_template, "_procs_fd", lambda group: os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
    with pytest.raises(SandboxStartError, match="the sandbox failed to start"):
        await tpool.open(TRIVIAL + "\n# new\n")
    assert tpool.uses_templates


def test_status_says_fresh_sandboxes_when_templates_are_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_template, "_fallback_reason", None)   # no earlier failure here
    monkeypatch.setenv("ENVDUELS_TEMPLATES", "0")
    assert instance_mode(FAST) == ("fresh sandboxes, one per instance: templates turned off "
                                   "(ENVDUELS_TEMPLATES=0)")
    monkeypatch.delenv("ENVDUELS_TEMPLATES")
    assert instance_mode(FAST).startswith("instances forked from per-environment templates")


def _ancestors(pid: int) -> list[int]:
    chain = []
    while pid > 1:
        chain.append(pid)
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return chain


def test_envduels_status_row_says_fresh_sandboxes_and_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from envduels.engine.commands import _instance_mode

    monkeypatch.setattr(_template, "_fallback_reason", None)
    monkeypatch.setenv("ENVDUELS_TEMPLATES", "0")
    assert _instance_mode(None) == ("fresh sandboxes, one per instance: templates turned off "
                                    "(ENVDUELS_TEMPLATES=0)")

    class Gvisor:
        class sandbox:   # noqa: N801 (a config's shape)
            runtime = "gvisor"

    monkeypatch.delenv("ENVDUELS_TEMPLATES")
    assert _instance_mode(Gvisor) == ("fresh sandboxes, one per instance: the gvisor runtime "
                                      "starts a fresh sandbox per instance")
    assert _instance_mode(None).startswith("instances forked from per-environment templates")
