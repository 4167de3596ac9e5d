"""The gVisor runtime: the same worker, run by `runsc run` from an OCI bundle.

Under gVisor the worker's system calls go to gVisor's user-space kernel (the Sentry), not to
the host's: each sandbox has its own inode counters, pid counters, /proc (no host load, no
autogroup, no host `processes` count) and clocks. What bubblewrap gives through namespaces,
the bundle says: a read-only root of the sandbox's `/usr` view only, a size-capped tmpfs /tmp,
no network (`--network=none`), its own hostname, no capabilities, an empty environment but
PATH/HOME/LANG/PYTHONHASHSEED, and uid 65534 inside.

`runsc` passes the standard streams and no other descriptor (fd 3 is EBADF inside), so the
protocol travels on them: requests on stdin, replies on stdout; the prelude below moves them
to fresh descriptors, points fd 1 at stderr (the captured output pipe, where an environment's
prints go) and stdin at an empty pipe. The prelude also installs the seccomp filter
(`_seccomp.py`) inside gVisor, which implements seccomp itself, so an environment sees the
same denied calls under either runtime. The other layers stay the harness's: rlimits (the
worker sets them on itself), the cgroup (runsc, its gofer and the Sentry are started inside
it, so the Sentry's memory for the sandbox counts), the per-call deadline, kill on violation.
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import tempfile

# runsc, its gofer and the Sentry are host tasks of the sandbox's pids cgroup (about 31
# threads measured, plus a stub per address space on the ptrace platform), and the Sentry's
# own heap is charged to its memory cgroup: the cgroup gets this much beyond the limits.
TASKS_OVERHEAD = 96
MEMORY_OVERHEAD_MB = 64
PLATFORM = "ptrace"   # works without /dev/kvm and inside a VM; the only one runsc 2022 has besides kvm
SANDBOX_UID = 65534

# Runs before the worker, inside gVisor: the protocol on the standard streams, then seccomp.
_PRELUDE = '''import os, sys
def _envduels_carrier():
    requests, replies = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    empty, writer = os.pipe()
    os.close(writer)
    os.dup2(empty, 0)
    os.close(empty)
    sys.argv[1:3] = [str(requests), str(replies)]
def _envduels_seccomp(program):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
    fprog = Program(len(program) // 8, program)
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:
        os.write(2, b"envduels: gVisor refused the seccomp filter\\n")
        os._exit(71)
_envduels_carrier()
_envduels_filter = {seccomp!r}
if _envduels_filter:
    _envduels_seccomp(_envduels_filter)
del _envduels_carrier, _envduels_seccomp, _envduels_filter
'''


def program(worker_source: str, worker_code: bytes | None, seccomp: bytes | None) -> str:
    """The `-c` text of a worker under gVisor: the prelude, then the worker (its marshalled
    code when the sandbox's interpreter compiled it, else its source)."""
    body = (f"import marshal\nexec(marshal.loads({worker_code!r}))\n" if worker_code is not None
            else worker_source)
    return _PRELUDE.format(seccomp=seccomp) + body


_ROOT: str | None = None


def root_skeleton() -> str:
    """The bundle's root, made once per harness: empty mount points and the `lib`/`bin`
    links into /usr (what bwrap's `--symlink` makes), nothing else. Removed at exit."""
    global _ROOT
    if _ROOT is None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        root = tempfile.mkdtemp(prefix="envduels-gvisor-root-", dir=base)
        os.chmod(root, 0o755)
        for name in ("usr", "tmp", "proc", "dev", "sys"):
            os.mkdir(os.path.join(root, name), 0o755)
        for name in ("lib", "lib64", "lib32", "libx32", "bin", "sbin"):
            if os.path.exists(f"/usr/{name}"):
                os.symlink(f"usr/{name}", os.path.join(root, name))
        atexit.register(shutil.rmtree, root, True)
        _ROOT = root
    return _ROOT


def write_bundle(folder: str, *, args: list[str], binds: list[tuple[str, str]],
                 scratch_mb: int, hostname: str) -> None:
    """The OCI bundle (`config.json`) of one sandbox in `folder`: `args` run as uid 65534
    with no capabilities, `binds` (host path, sandbox path) read-only, a `scratch_mb` tmpfs
    at /tmp, a read-only root."""
    mounts: list[dict[str, str | list[str]]] = [
        {"destination": "/proc", "type": "proc", "source": "proc"}]
    mounts += [{"destination": target, "type": "bind", "source": source,
                "options": ["rbind", "ro"]} for source, target in binds]
    mounts.append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                   "options": [f"size={scratch_mb}m", "mode=1777", "nosuid", "nodev"]})
    # runsc always mounts its own sysfs (virtual devices, CPUs): hidden behind an empty one
    mounts.append({"destination": "/sys", "type": "tmpfs", "source": "tmpfs",
                   "options": ["ro", "size=4k", "mode=555"]})
    caps: list[str] = []
    spec = {
        "ociVersion": "1.0.0",
        "process": {
            "terminal": False, "user": {"uid": SANDBOX_UID, "gid": SANDBOX_UID}, "args": args,
            "env": ["PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", "PYTHONHASHSEED=0"],
            "cwd": "/tmp", "noNewPrivileges": True,
            "capabilities": {k: caps for k in ("bounding", "effective", "inheritable",
                                              "permitted", "ambient")},
        },
        "root": {"path": root_skeleton(), "readonly": True},
        "hostname": hostname,
        "mounts": mounts,
        "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts",
                                                       "mount")]},
    }
    with open(os.path.join(folder, "config.json"), "w") as fh:
        json.dump(spec, fh)


# runsc runs as the child of this small program, which collects every process of runsc's
# tree that is orphaned (gVisor's ptrace stubs outlive their Sentry for a moment): the
# harness is no child subreaper, and pid 1 need not collect them (some never do). It exits
# once runsc has and nothing of its tree is left, with runsc's status (128 + n for a
# signal); it dies with the harness's thread that started it, and runsc dies with it.
# Usage: python -s -S -c REAPER HARNESS_PID RUNSC ARGS...
REAPER = """import ctypes, os, sys
libc = ctypes.CDLL(None)
if libc.prctl(1, 9, 0, 0, 0) or os.getppid() != int(sys.argv[1]) or libc.prctl(36, 1, 0, 0, 0):
    os._exit(70)
child = os.fork()
if child == 0:
    libc.prctl(1, 9, 0, 0, 0)
    os.execv(sys.argv[2], sys.argv[2:])
code = 70
while True:
    try:
        pid, status = os.wait()
    except ChildProcessError:
        break
    if pid == child:
        code = os.waitstatus_to_exitcode(status)
        code = 128 - code if code < 0 else code
os._exit(code)
"""


def argv(runsc: str, folder: str) -> list[str]:
    """`runsc run` of the bundle in `folder`, its state kept there too (removed with it)."""
    state = os.path.join(folder, "state")
    os.mkdir(state, 0o700)
    # --ignore-cgroups: else runsc moves its Sentry and gofer into a cgroup of its own at the
    # root of each hierarchy (no limits of ours, and left behind when runsc is killed)
    return [runsc, f"--root={state}", "--ignore-cgroups", "--network=none",
            f"--platform={PLATFORM}", "run",
            f"--bundle={folder}", "envduels-" + secrets.token_hex(8)]
