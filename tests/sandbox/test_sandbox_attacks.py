"""Attack suite: hostile environments against the real bubblewrap sandbox.

Each test asserts the exact outcome, and (through the `pool` and `canary` fixtures) that no
host file changed, no sandbox process is left, and a fresh instance still works afterwards.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
import time
from pathlib import Path

import pytest
from sandbox_helpers import (
    FAST,
    ROOMY,
    assert_pool_still_works,
    env_source,
    namespace_pids,
    needs_in_process_pool,
    sandbox_uid_processes,
)

from envduels.sandbox import EnvFault, EnvPool, SandboxLimits, StepResult
from envduels.sandbox._launcher import descendants as _descendants
from envduels.sandbox._launcher import host

# every test here runs under each sandbox runtime (bubblewrap, gVisor)
pytestmark = pytest.mark.usefixtures("sandbox_runtime")

PROJECT = Path(__file__).resolve().parents[2]


async def fault_of(pool: EnvPool, step: str, *, prelude: str = "", action: str = "a") -> EnvFault:
    inst = await pool.open(env_source(step, prelude=prelude))
    await inst.reset(0)
    with pytest.raises(EnvFault) as info:
        await inst.step(action)
    assert not inst.alive
    await inst.close()
    return info.value


async def observe(pool: EnvPool, step: str, *, prelude: str = "") -> object:
    """Run `step`, which returns json.dumps(findings) as its observation; return the findings."""
    inst = await pool.open(env_source(step, prelude=prelude))
    await inst.reset(0)
    result = await inst.step("a")
    await inst.close()
    return json.loads(result.observation)


# ----- time ---------------------------------------------------------------------------------

async def test_infinite_loop_is_stopped_at_the_wall_deadline(pool: EnvPool) -> None:
    inst = await pool.open(env_source("while True:\n    pass"))
    await inst.reset(0)
    # the step alone: the 1.5 s deadline, then the kill (a sandbox's start, gVisor's cold one
    # under CI load included, is not the deadline's business; it once pushed the whole past 5 s)
    start = time.monotonic()
    with pytest.raises(EnvFault) as info:
        await inst.step("a")
    assert time.monotonic() - start < 5
    assert info.value.reason == "step timed out after 1.5 s"
    assert not inst.alive
    await inst.close()
    await assert_pool_still_works(pool)


async def test_loop_ignoring_sigterm_and_sigxcpu_is_still_killed(pool: EnvPool) -> None:
    step = ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "signal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass")
    fault = await fault_of(pool, step, prelude="import signal")
    assert fault.reason == "step timed out after 1.5 s"
    await assert_pool_still_works(pool)


async def test_blocking_sleep_is_stopped_at_the_wall_deadline(pool: EnvPool) -> None:
    fault = await fault_of(pool, "time.sleep(1e6)", prelude="import time")
    assert fault.reason == "step timed out after 1.5 s"
    await assert_pool_still_works(pool)


@pytest.mark.parametrize("ignore_sigxcpu", [False, True])
async def test_cpu_time_limit_kills_a_busy_environment(canary: Path, ignore_sigxcpu: bool) -> None:
    limits = SandboxLimits(step_timeout_s=30, cpu_s=1)
    step = "while True:\n    pass"
    if ignore_sigxcpu:   # then the hard limit (1 s later) kills it with SIGKILL
        step = "signal.signal(signal.SIGXCPU, signal.SIG_IGN)\n" + step
    async with EnvPool(limits, warm=0) as pool:
        fault = await fault_of(pool, step, prelude="import signal")
        assert fault.reason == "CPU time limit exceeded (1 s) during step"
        await assert_pool_still_works(pool)
    assert sandbox_uid_processes() == []


# ----- memory and processes -------------------------------------------------------------------

async def test_memory_bomb_hits_the_address_space_limit(roomy_pool: EnvPool) -> None:
    fault = await fault_of(roomy_pool, "x = []\nwhile True:\n    x.append(bytearray(16 << 20))")
    assert fault.reason.startswith("step raised MemoryError")
    await assert_pool_still_works(roomy_pool)


async def test_children_each_under_the_process_limit_are_stopped_by_the_cgroup(
        roomy_pool: EnvPool) -> None:
    # 4 children x 150 MiB: each under RLIMIT_AS (256 MiB), together over the 256 MiB cgroup.
    step = """
    pids = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:
            block = bytearray(150 << 20)
            for i in range(0, len(block), 4096):
                block[i] = 1
            time.sleep(30)
            os._exit(0)
        pids.append(pid)
    time.sleep(30)
    """
    fault = await fault_of(roomy_pool, step, prelude="import os, time")
    assert fault.reason == "memory limit exceeded (256 MiB)"
    await assert_pool_still_works(roomy_pool)


async def test_fork_bomb_is_capped_and_a_second_sandbox_still_starts(
        roomy_pool: EnvPool, sandbox_runtime: str) -> None:
    step = "while True:\n    os.fork()"
    fault = await fault_of(roomy_pool, step, prelude="import os")
    eagain = "step raised BlockingIOError: [Errno 11] Resource temporarily unavailable"
    if sandbox_runtime == "gvisor":
        # gVisor ignores RLIMIT_NPROC; the host cgroup's pids limit stops it. Which of the
        # Sentry's host tasks meets the limit first is a race: a new address space's stub
        # (the bomb's fork fails with EAGAIN) or a Sentry thread (the sandbox dies). Both cap
        # the bomb; CI under load has shown each.
        assert (fault.reason == f"process limit exceeded ({ROOMY.max_procs} processes) during step"
                or fault.reason.startswith(eagain)), fault.reason
    else:
        assert fault.reason.startswith(eagain)
    await assert_pool_still_works(roomy_pool)
    await assert_pool_still_works(roomy_pool)


async def test_a_second_sandbox_starts_and_works_while_a_fork_bomb_holds_every_process(
        roomy_pool: EnvPool, sandbox_runtime: str) -> None:
    # sandbox A forks until the process limit stops it and keeps every child alive (sleeping);
    # B, started meanwhile, must not be counted against A's limit (its own uid and cgroup)
    step = """
    children = 0
    while True:
        try:
            pid = os.fork()
        except BlockingIOError:
            break
        if pid == 0:
            time.sleep(600)
            os._exit(0)
        children += 1
    return "holding %d" % children, 0.0, False, False, {}
    """
    bomb = await roomy_pool.open(env_source(step, prelude="import os, time"))
    try:
        await bomb.reset(0)
        if sandbox_runtime == "gvisor":
            # no RLIMIT_NPROC inside gVisor: the cgroup's limit either kills the bomb or fails
            # its fork (the race above), and B starts and works beside it all the same
            try:
                result = await bomb.step("a")
            except EnvFault as exc:
                assert exc.reason.startswith("process limit exceeded ("), exc.reason
            else:
                assert 0 < int(result.observation.split()[1]) < ROOMY.max_procs
            await assert_pool_still_works(roomy_pool)
            return
        result = await bomb.step("a")
        held = int(result.observation.split()[1])
        assert 0 < held < ROOMY.max_procs
        assert bomb.alive
        await assert_pool_still_works(roomy_pool)    # B: loads, resets, steps
        second = await bomb.step("a")                # A is still there, still full
        assert second.observation == "holding 0"
    finally:
        await bomb.close()
    await assert_pool_still_works(roomy_pool)


async def test_thread_bomb_is_capped(roomy_pool: EnvPool) -> None:
    step = ("while True:\n"
            "    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()")
    fault = await fault_of(roomy_pool, step, prelude="import threading, time")
    assert fault.reason.startswith("step raised RuntimeError: can't start new thread")
    await assert_pool_still_works(roomy_pool)


# ----- files ----------------------------------------------------------------------------------

async def test_huge_file_hits_the_file_size_limit(roomy_pool: EnvPool) -> None:
    step = """
    with open('/tmp/big', 'wb') as fh:
        for _ in range(100):
            fh.write(b'x' * (1 << 20))
    """
    fault = await fault_of(roomy_pool, step)
    assert fault.reason == "step raised OSError: [Errno 27] File too large (env line 10 in step)"
    await assert_pool_still_works(roomy_pool)


async def test_many_files_fill_only_the_capped_scratch(roomy_pool: EnvPool) -> None:
    step = """
    for i in range(1000):
        with open('/tmp/f%d' % i, 'wb') as fh:
            fh.write(b'x' * (4 << 20))
    """
    fault = await fault_of(roomy_pool, step)
    assert fault.reason == ("step raised OSError: [Errno 28] No space left on device "
                            "(env line 10 in step)")
    await assert_pool_still_works(roomy_pool)


async def test_writes_outside_scratch_fail_and_change_nothing(pool: EnvPool, canary: Path,
                                                              sandbox_runtime: str) -> None:
    targets = ["/newfile", "/usr/newfile", "/usr/bin/python3.11", "/dev/newfile",
               "/proc/sys/kernel/hostname", str(canary), str(PROJECT / "pyproject.toml"),
               str(PROJECT / "src" / "envduels" / "sandbox" / "_worker.py"), "/tmp/ok"]
    step = f"""
    import errno
    found = {{}}
    for path in {targets!r}:
        try:
            with open(path, 'w') as fh:
                fh.write('pwned')
            found[path] = 'written'
        except OSError as exc:
            found[path] = errno.errorcode[exc.errno]
    return json.dumps(found), 0, False, False, {{}}
    """
    found = await observe(pool, step, prelude="import json")
    # gVisor checks permissions first: uid 65534 may not write root's folders (read-only too);
    # under bubblewrap /proc is read-only as a whole
    refused = "EACCES" if sandbox_runtime == "gvisor" else "EROFS"
    assert found == {
        "/newfile": refused, "/usr/newfile": refused, "/usr/bin/python3.11": refused,
        "/dev/newfile": refused, "/proc/sys/kernel/hostname": refused, str(canary): "ENOENT",
        str(PROJECT / "pyproject.toml"): "ENOENT",
        str(PROJECT / "src" / "envduels" / "sandbox" / "_worker.py"): "ENOENT",
        "/tmp/ok": "written",
    }
    assert "pwned" not in (PROJECT / "pyproject.toml").read_text()


async def test_host_files_are_absent(pool: EnvPool, sandbox_runtime: str) -> None:
    paths = ["/root", "/home", "/etc/shadow", "/etc/passwd", "/etc", "/sys", "/work",
             str(PROJECT), str(Path.home()), "/var/run", "/run"]
    step = f"return json.dumps({{p: os.path.exists(p) for p in {paths!r}}} | " \
           "{'/': sorted(os.listdir('/')), '/sys/': os.listdir('/sys') if os.path.isdir('/sys') " \
           "else None}), 0, False, False, {}"
    found = await observe(pool, step, prelude="import json, os")
    listing, sys_listing = found.pop("/"), found.pop("/sys/")
    allowed = {"bin", "dev", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp", "usr"}
    if sandbox_runtime == "gvisor":   # runsc always mounts a /sys: an empty tmpfs hides it
        assert (found.pop("/sys"), sys_listing) == (True, [])
        paths.remove("/sys")
        allowed.add("sys")
    assert found == dict.fromkeys(paths, False)
    assert set(listing) <= allowed


# ----- identity and secrets -------------------------------------------------------------------

async def test_sandbox_runs_without_root_and_without_capabilities(pool: EnvPool,
                                                                  sandbox_runtime: str) -> None:
    step = """
    status = dict(line.split(':\\t', 1) for line in open('/proc/self/status').read().splitlines()
                  if ':\\t' in line)
    try:
        os.setuid(0)
        setuid = 'ok'
    except OSError as exc:
        setuid = errno.errorcode[exc.errno]
    libc = ctypes.CDLL(None, use_errno=True)
    nested_userns = libc.unshare(0x10000000)   # CLONE_NEWUSER
    no_new_privs = str(libc.prctl(39, 0, 0, 0, 0))   # PR_GET_NO_NEW_PRIVS (gVisor's status lacks it)
    return json.dumps({'uid': os.getuid(), 'CapEff': status['CapEff'].strip(),
                       'CapPrm': status['CapPrm'].strip(), 'CapBnd': status['CapBnd'].strip(),
                       'NoNewPrivs': no_new_privs, 'setuid0': setuid,
                       'unshare_user': nested_userns}), 0, False, False, {}
    """
    found = await observe(pool, step, prelude="import ctypes, errno, json, os")
    assert found["uid"] != 0
    assert {k: v for k, v in found.items() if k != "uid"} == {
        "CapEff": "0000000000000000", "CapPrm": "0000000000000000",
        "CapBnd": "0000000000000000", "NoNewPrivs": "1",
        # bwrap maps no uid 0 (EINVAL); gVisor's kernel has one, and we may not become it
        "setuid0": "EPERM" if sandbox_runtime == "gvisor" else "EINVAL",
        "unshare_user": -1}


async def test_launcher_secret_is_in_no_environ_inside(monkeypatch: pytest.MonkeyPatch,
                                                        canary: Path) -> None:
    monkeypatch.setenv("ENVDUELS_TEST_SECRET", "sk-test-5f9a1c")
    step = """
    seen = {'os.environ': 'sk-test-5f9a1c' in repr(dict(os.environ))}
    for pid in os.listdir('/proc'):
        if pid.isdigit():
            try:
                with open('/proc/%s/environ' % pid, 'rb') as fh:
                    seen[pid] = b'sk-test-5f9a1c' in fh.read()
            except PermissionError:   # a forked instance's init is not dumpable
                seen[pid] = 'unreadable'
    return json.dumps(seen), 0, False, False, {}
    """
    async with EnvPool(FAST, warm=1) as pool:  # workers started after the variable was set
        found = await observe(pool, step, prelude="import json, os")
    # bwrap's pid 1 (or a forked instance's init, whose environ the worker may not read) and
    # the worker; under gVisor the worker is pid 1 of its own kernel
    pid_1 = "unreadable" if found.get("1") == "unreadable" and "2" in found else False
    assert found == {"os.environ": False, "1": pid_1, **({"2": False} if "2" in found else {})}
    assert len(found) == 3 or host().runsc is not None
    assert sandbox_uid_processes() == []


# ----- network --------------------------------------------------------------------------------

async def test_network_is_unreachable_from_inside(pool: EnvPool, tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    abstract = f"\0envduels-test-{os.getpid()}"
    unix_abstract = socket.socket(socket.AF_UNIX)
    unix_abstract.bind(abstract)
    unix_abstract.listen()
    sock_path = str(tmp_path / "host.sock")
    unix_file = socket.socket(socket.AF_UNIX)
    unix_file.bind(sock_path)
    unix_file.listen()
    step = f"""
    def attempt(family, address):
        try:
            with socket.socket(family) as s:
                s.settimeout(1)
                s.connect(address)
            return 'connected'
        except OSError as exc:
            return type(exc).__name__
    def dns():
        try:
            socket.getaddrinfo('example.com', 80)
            return 'resolved'
        except OSError as exc:
            return type(exc).__name__
    return json.dumps({{
        'loopback_listener': attempt(socket.AF_INET, ('127.0.0.1', {port})),
        'internet': attempt(socket.AF_INET, ('1.1.1.1', 53)),
        'dns': dns(),
        'abstract_unix': attempt(socket.AF_UNIX, {abstract!r}),
        'unix_file': attempt(socket.AF_UNIX, {sock_path!r}),
        'interfaces': [line.split(':')[0].strip()
                       for line in open('/proc/net/dev').read().splitlines()[2:]],
    }}), 0, False, False, {{}}
    """
    try:
        found = await observe(pool, step, prelude="import json, socket")
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        for s in (listener, unix_abstract, unix_file):
            s.close()
        os.unlink(sock_path)
    # No socket can even be created (seccomp: EAFNOSUPPORT for AF_INET, an OSError; EPERM for
    # AF_UNIX: docs/sandbox.md, "No network namespace"); the namespace is empty besides.
    assert found == {"loopback_listener": "OSError", "internet": "OSError",
                     "dns": "gaierror", "abstract_unix": "PermissionError",
                     "unix_file": "PermissionError", "interfaces": ["lo"]}


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="platform: syscall numbers are x86_64")
async def test_dangerous_syscalls_are_denied_but_ordinary_python_works(pool: EnvPool) -> None:
    step = """
    libc = ctypes.CDLL(None, use_errno=True)
    def call(nr, *args):
        ctypes.set_errno(0)
        rc = libc.syscall(nr, *args)
        return errno.errorcode.get(ctypes.get_errno(), 'ok') if rc < 0 else 'allowed'
    def sock(family):
        try:
            socket.socket(family, socket.SOCK_DGRAM).close()
            return 'allowed'
        except OSError as exc:
            return errno.errorcode[exc.errno]
    params = ctypes.create_string_buffer(120)
    found = {
        'io_uring_setup': call(425, 1, params), 'userfaultfd': call(323, 0),
        'bpf': call(321, 0, 0, 0), 'ptrace_traceme': call(101, 0, 0, 0, 0),
        'keyctl': call(250, 0, 0, 0, 0, 0), 'unshare_net': call(272, 0x40000000),
        'perf_event_open': call(298, 0, 0, -1, -1, 0),
        'socket_inet': sock(socket.AF_INET), 'socket_netlink': sock(socket.AF_NETLINK),
    }
    a, b = socket.socketpair()
    a.send(b'ok')
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()
    found['ordinary'] = [b.recv(2).decode(), os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])]
    return json.dumps(found), 0, False, False, {}
    """
    found = await observe(pool, step,
                          prelude="import ctypes, errno, json, os, socket, threading")
    assert found == {
        "io_uring_setup": "EPERM", "userfaultfd": "EPERM", "bpf": "EPERM",
        "ptrace_traceme": "EPERM", "keyctl": "EPERM", "unshare_net": "EPERM",
        "perf_event_open": "EPERM", "socket_inet": "EAFNOSUPPORT",
        "socket_netlink": "EAFNOSUPPORT", "ordinary": ["ok", 7]}


# ----- processes that outlive a call ----------------------------------------------------------

async def test_detached_double_forked_daemon_is_gone_after_close(pool: EnvPool,
                                                                 sandbox_runtime: str) -> None:
    if sandbox_runtime != "gvisor":
        needs_in_process_pool()
    reset = """
    if os.fork() == 0:   # no setsid: seccomp refuses it (autogroup ids, docs/sandbox.md)
        if os.fork() == 0:
            time.sleep(600)
        os._exit(0)
    os.wait()
    return 'daemon started', {}
    """
    inst = await pool.open(env_source(reset=reset, prelude="import os, time"))
    await inst.reset(0)
    if sandbox_runtime == "gvisor":   # its processes live in gVisor's kernel: runsc's tree
        tree = [inst.pid, *_descendants(inst.pid)]
        assert len(tree) >= 3   # runsc, its gofer, the Sentry (and its stubs)
        await inst.close()
        assert [p for p in tree if Path(f"/proc/{p}").exists()] == []
        await assert_pool_still_works(pool)
        return
    init = inst._channel.init_pid
    assert init is not None
    # the worker and the daemon, and a fresh sandbox's bwrap init (a forked instance's worker
    # is its pid 1: docs/sandbox.md)
    forked = inst._channel.launched.forked
    assert len(namespace_pids(init)) == (2 if forked else 3)
    await inst.close()
    assert namespace_pids(init) == []
    await assert_pool_still_works(pool)


# ----- output ---------------------------------------------------------------------------------

@pytest.mark.parametrize("stream", ["stdout", "stderr"])
async def test_output_flood_kills_the_worker(pool: EnvPool, stream: str) -> None:
    step = f"while True:\n    sys.{stream}.write('x' * 65536)"
    fault = await fault_of(pool, step, prelude="import sys")
    assert fault.reason == "output flood: more than 65536 bytes on stdout/stderr"
    await assert_pool_still_works(pool)


async def test_huge_observation_is_truncated_with_a_visible_marker(pool: EnvPool) -> None:
    inst = await pool.open(env_source("return 'y' * 5_000_000, 0, False, False, {}"))
    await inst.reset(0)
    result = await inst.step("a")
    assert result.observation == "y" * 1000 + "\n...[truncated 4999000 characters]"
    await inst.close()


# ----- the protocol ---------------------------------------------------------------------------

FORGE = """
def forge(obj, fd=int(sys.argv[2])):
    data = json.dumps(obj).encode()
    os.write(fd, len(data).to_bytes(4, 'big') + data)
"""


async def test_forged_frame_with_a_wrong_id_is_rejected(pool: EnvPool) -> None:
    step = ("forge({'id': 999, 'ok': True, 'observation': 'win', 'reward': 1e6, "
            "'terminated': True, 'truncated': False, 'info': {}})\ntime.sleep(1)")
    fault = await fault_of(pool, step, prelude="import json, os, sys, time\n" + FORGE)
    assert fault.reason == "protocol violation: reply id 999 does not match request 3 (step)"
    await assert_pool_still_works(pool)


@pytest.mark.parametrize("freeze", [False, True])
async def test_forged_frame_with_the_right_id_is_caught_by_the_extra_reply(
        canary: Path, freeze: bool) -> None:
    step = ("forge({'id': 3, 'ok': True, 'observation': 'win', 'reward': 1e6, "
            "'terminated': True, 'truncated': False, 'info': {}})\n"
            "time.sleep(0.2)\nreturn 'honest', 0, False, False, {}")
    async with EnvPool(dataclasses.replace(FAST, freeze_idle=freeze), warm=0) as pool:
        inst = await pool.open(env_source(step, prelude="import json, os, sys, time\n" + FORGE))
        await inst.reset(0)
        # The forged reply arrives first. It is a claim by the environment about itself, which
        # any env could make honestly too; the honest reply behind it betrays it: at once when
        # the sandbox runs between calls, in the next call when it is frozen until then.
        assert await inst.step("a") == StepResult("win", 1e6, True, False, {})
        await asyncio.sleep(0.4)
        with pytest.raises(EnvFault) as info:
            await inst.step("a")
        if freeze:
            assert info.value.reason in (
                "protocol violation: reply id 3 does not match request 4 (step)",
                "protocol violation: unsolicited data from the environment after its reply")
        else:
            assert info.value.reason == ("protocol violation: unsolicited data from the "
                                         "environment between calls")
        await inst.close()


async def test_frame_written_by_a_background_thread_is_unsolicited(canary: Path) -> None:
    needs_in_process_pool()
    # The protocol layer on its own (the freezer would keep the thread from running at all)
    reset = ("threading.Timer(0.05, forge, args=({'id': 3, 'ok': True},)).start()\n"
             "return 'start', {}")
    async with EnvPool(dataclasses.replace(FAST, freeze_idle=False), warm=0) as pool:
        inst = await pool.open(env_source(reset=reset,
                                          prelude="import json, os, sys, threading\n" + FORGE))
        await inst.reset(0)
        await asyncio.sleep(0.3)
        assert inst._channel.launched.popen.poll() is not None   # killed without waiting
        with pytest.raises(EnvFault) as info:
            await inst.step("a")
        assert info.value.reason == ("protocol violation: unsolicited data from the environment "
                                     "between calls")
        await inst.close()


async def test_oversized_and_garbage_frames_are_rejected(pool: EnvPool) -> None:
    step = "os.write(int(sys.argv[2]), (1 << 31).to_bytes(4, 'big'))\ntime.sleep(1)"
    fault = await fault_of(pool, step, prelude="import os, sys, time")
    assert fault.reason == ("protocol violation: a frame of 2147483648 bytes exceeds the "
                            "1048576 byte cap")
    step = "os.write(int(sys.argv[2]), (3).to_bytes(4, 'big') + b'{x}')\ntime.sleep(1)"
    fault = await fault_of(pool, step, prelude="import os, sys, time")
    assert fault.reason.startswith("protocol violation: unreadable frame")
    await assert_pool_still_works(pool)


@pytest.mark.parametrize(("returned", "reason"), [
    ("'o', float('nan'), True, False, {}", "step returned a non-finite reward (nan)"),
    ("'o', float('inf'), True, False, {}", "step returned a non-finite reward (inf)"),
    ("'o', '1', True, False, {}",
     "step returned reward of type str; expected a finite int or float"),
    ("'o', True, True, False, {}",
     "step returned reward of type bool; expected a finite int or float"),
    ("'o', 1.0, 1, False, {}", "step returned terminated of type int; expected True or False"),
    ("'o', 1.0, True, 'no', {}", "step returned truncated of type str; expected True or False"),
    ("5, 1.0, True, False, {}", "step returned an observation of type int; expected a str"),
    ("object(), 1.0, True, False, {}",
     "step returned an observation of type object; expected a str"),
    ("'o', 1.0, True, False, [1]", "step returned info of type list; expected a dict"),
    ("'o', 1.0, True, False",
     "step must return (observation, reward, terminated, truncated, info), got a tuple of 4"),
    ("'o', Weird(), True, False, {}",
     "step returned reward of type Weird; expected a finite int or float"),
])
async def test_nan_and_odd_typed_results_are_rejected(pool: EnvPool, returned: str,
                                                      reason: str) -> None:
    prelude = "class Weird(float):\n    def __float__(self):\n        return 1e9"
    fault = await fault_of(pool, f"return {returned}", prelude=prelude)
    assert fault.reason == reason


async def test_a_result_over_the_frame_cap_is_a_fault(pool: EnvPool) -> None:
    # an oracle action: info has its own, smaller cap and the observation is truncated
    source = env_source() + "    def oracle_action(self):\n        return 'y' * 2_000_000\n"
    inst = await pool.open(source)
    await inst.reset(0)
    with pytest.raises(EnvFault) as info:
        await inst.oracle_action()
    await inst.close()
    assert info.value.reason == "result too large (2000030 bytes > 1048576 byte frame cap)"


# ----- dying workers --------------------------------------------------------------------------

async def test_os_exit_is_reported_and_never_counts_as_a_step(pool: EnvPool) -> None:
    fault = await fault_of(pool, "os._exit(3)", prelude="import os")
    assert fault.reason == "worker exited with status 3 during step"
    await assert_pool_still_works(pool)


async def test_sys_exit_is_an_exception_of_the_step(pool: EnvPool) -> None:
    fault = await fault_of(pool, "sys.exit(4)", prelude="import sys")
    assert fault.reason == "step raised SystemExit: 4 (env line 7 in step)"


async def test_segfault_is_reported(pool: EnvPool) -> None:
    fault = await fault_of(pool, "ctypes.string_at(0)", prelude="import ctypes")
    assert fault.reason == "worker killed by SIGSEGV during step"
    await assert_pool_still_works(pool)


async def test_a_forged_observation_count_of_thousands_of_digits_is_clamped(
        pool: EnvPool) -> None:
    """The truncation marker quotes the worker's `observation_chars`; a forged count of 4,299
    digits made the marker 4,299 characters longer than the observation cap allows."""
    step = ("forge({'id': 3, 'ok': True, 'observation': 'x', 'observation_chars': 10**4298, "
            "'reward': 0, 'terminated': True, 'truncated': False, 'info': {}})\n"
            "time.sleep(0.2)\nreturn 'honest', 0, False, False, {}")
    inst = await pool.open(env_source(step, prelude="import json, os, sys, time\n" + FORGE))
    await inst.reset(0)
    result = await inst.step("a")
    await inst.close()
    most = (FAST.memory_mb << 20) - FAST.observation_max_chars   # no str inside is longer
    assert result.observation == f"x\n...[truncated {most} characters]"
