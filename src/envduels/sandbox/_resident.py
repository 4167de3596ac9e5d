"""A RAM-resident copy of the part of /usr that the sandbox sees.

Why: a sandbox that reads a host file learns whether its page was in the host's page cache,
with no denied syscall and no clock: `/proc/self/io` `read_bytes` and `getrusage().ru_inblock`
grow only when a read went to the disk, and an mmap fault-around maps a neighbouring page
(visible as `Rss` in `/proc/self/smaps`) only when that page is cached. A read also *sets* the
bit. So fresh sandboxes of one seed could count up through host files, and an environment
could log its play and make its replay agree (docs/sandbox.md, threat table).

The fix is residency: every file the sandbox can read is a copy in a tmpfs (`/dev/shm`)
that this harness wrote once. A tmpfs page is always "in the page cache": reads never go to a
disk, fault-around always maps the neighbours, so those counters carry no information.

What is copied: the interpreter, its stdlib without the parts an environment never needs
(tests, IDLE, Tk, 2to3, ensurepip, the static-build `config-*` folder, site/dist-packages),
the C.UTF-8 locale, and only the shared libraries the interpreter and its extension modules
link (found with `ldd`, plus libgcc_s, which glibc loads on thread cancellation). About
45 MiB, made by the first harness of a uid and kept (per interpreter installation) until
reboot, so later harnesses (every `envduels` command) start at no extra cost. A copy is
built under a temporary name and renamed into place, so a copy under its final name is
complete; a half-made one of a killed harness is removed by the next that builds.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass

_PREFIX = "envduels-usr-"
_FORMAT = "v1"   # bump when what is copied changes: older copies are then left alone
_SIZE_FILE = "size"
_SKIP_STDLIB = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
                "site-packages", "dist-packages", "__phello__"}
_LDD_LINE = re.compile(r"^\s*(?:\S+\s+=>\s+)?(/\S+)\s+\(0x[0-9a-f]+\)\s*$")


@dataclass(frozen=True)
class ResidentView:
    """A copy of the sandbox's /usr in RAM: bind `usr` read-only at /usr."""

    root: str
    usr: str
    size_bytes: int
    copy_s: float


def _tmpfs_folder() -> str | None:
    """/dev/shm when it is a tmpfs (RAM, no disk behind it), else None."""
    try:
        with open("/proc/self/mounts") as fh:
            mounts = [line.split() for line in fh]
    except OSError:
        return None
    for fields in mounts:
        if len(fields) >= 3 and fields[1] == "/dev/shm" and fields[2] == "tmpfs":
            return "/dev/shm"
    return None


def _remove_stale(folder: str) -> None:
    """Remove half-made copies left by harnesses of ours that were killed (pid gone)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if not entry.name.startswith(_PREFIX):
                continue
            pid, _, rest = entry.name[len(_PREFIX):].partition("-")
            if len(rest) != 8:   # mkdtemp's suffix; a finished copy is UID-KEY (16 hex)
                continue
            try:
                if entry.stat(follow_symlinks=False).st_uid != os.geteuid() or not pid.isdigit():
                    continue
                os.kill(int(pid), 0)
            except ProcessLookupError:
                shutil.rmtree(entry.path, ignore_errors=True)
            except OSError:
                continue


def _linked_libraries(python: str, stdlib: str) -> list[str] | None:
    """Paths (as the loader finds them) of the shared libraries that `python` and its extension
    modules link, the loader included. None when ldd cannot say."""
    dynload = os.path.join(stdlib, "lib-dynload")
    modules = sorted(os.path.join(dynload, name) for name in os.listdir(dynload)
                     if name.endswith(".so")) if os.path.isdir(dynload) else []
    try:
        done = subprocess.run(["ldd", python, *modules], capture_output=True, text=True,
                              timeout=60, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0 and not done.stdout:
        return None
    found = {m.group(1) for line in done.stdout.splitlines() if (m := _LDD_LINE.match(line))}
    return sorted(found) or None


def _copy_file(source: str, target_path: str, root: str) -> None:
    """Copy `source` (following links) to `root + target_path`, keeping its mode and mtime."""
    destination = root + target_path
    os.makedirs(os.path.dirname(destination), mode=0o755, exist_ok=True)
    shutil.copy2(os.path.realpath(source), destination)


def _key(python: str, stdlib: str, multiarch: str) -> str:
    """Names one interpreter installation: a new binary or stdlib (an upgrade) gets a new copy."""
    parts = [_FORMAT, python, stdlib, multiarch]
    for path in (python, stdlib, os.path.join(stdlib, "lib-dynload")):
        with contextlib.suppress(OSError):
            info = os.stat(path)
            parts += [str(info.st_size), str(info.st_mtime_ns), str(info.st_ino)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def _trusted(path: str) -> bool:
    """A folder we made: ours, and writable by nobody else (so nobody else put anything in)."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() \
        and not info.st_mode & 0o022


def copy_view(root: str, python: str, stdlib: str, multiarch: str) -> int:
    """Copy the sandbox's part of /usr under `root` (`root/usr/...`); its size in bytes.
    OSError (or shutil.Error) when ldd finds nothing or a copy fails."""
    libraries = _linked_libraries(python, stdlib)
    if libraries is None:
        raise OSError("ldd found no libraries")
    _copy_file(python, python, root)
    shutil.copytree(stdlib, root + stdlib, symlinks=True, ignore=_ignore_stdlib(stdlib))
    lib_dir = f"/usr/lib/{multiarch}" if multiarch else "/usr/lib"
    extra = [os.path.join(lib_dir, "libgcc_s.so.1")]
    for path in [*libraries, *(p for p in extra if os.path.exists(p))]:
        # Keep the name the loader looks for (libz.so.1), in the folder it searches, with the
        # real file's bytes; /lib and /lib64 are links into /usr on merged systems.
        target = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        if not target.startswith("/usr/"):
            raise OSError(f"library outside /usr: {path}")
        _copy_file(path, target, root)
    locale = "/usr/lib/locale/C.utf8"
    if os.path.isdir(locale):
        shutil.copytree(locale, root + locale, symlinks=True)
    for dirpath, _dirs, _files in os.walk(root + "/usr"):
        os.chmod(dirpath, 0o755)
    return sum(os.lstat(os.path.join(d, f)).st_size
               for d, _dirs, files in os.walk(root) for f in files)


def build(python: str, stdlib: str, multiarch: str) -> ResidentView | None:
    """The RAM-resident view for this interpreter: one shared by every harness of this uid
    (`/dev/shm/envduels-usr-UID-KEY`, kept until reboot: the second harness starts at no
    cost), made now if missing. None (the caller binds the host files and says so) when there
    is no tmpfs, no ldd, or a copy fails."""
    folder = _tmpfs_folder()
    if folder is None or not python.startswith("/usr/") or not stdlib.startswith("/usr/"):
        return None
    final = os.path.join(folder, f"{_PREFIX}{os.geteuid()}-{_key(python, stdlib, multiarch)}")
    if _trusted(final):
        return _view(final, 0.0)
    _remove_stale(folder)
    start = time.monotonic()
    # 0711 once renamed: the sandbox (another uid when we are root) must pass through; nobody
    # but us lists or writes it. The content is public /usr files, so reading is no leak.
    building = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=folder)
    try:
        size = copy_view(building, python, stdlib, multiarch)
        with open(os.path.join(building, _SIZE_FILE), "w") as fh:
            fh.write(str(size))
        os.chmod(building, 0o711)
        try:   # atomic: a folder under the final name is always complete
            os.rename(building, final)
        except OSError:   # another harness was quicker (or the name is someone else's)
            shutil.rmtree(building, ignore_errors=True)
            return _view(final, time.monotonic() - start) if _trusted(final) else None
    except (OSError, shutil.Error):
        shutil.rmtree(building, ignore_errors=True)
        return None
    return _view(final, time.monotonic() - start)


def _view(root: str, copy_s: float) -> ResidentView:
    size = 0
    with contextlib.suppress(OSError, ValueError), open(os.path.join(root, _SIZE_FILE)) as fh:
        size = int(fh.read())
    return ResidentView(root=root, usr=root + "/usr", size_bytes=size, copy_s=copy_s)


def _ignore_stdlib(stdlib: str):  # noqa: ANN202 - the callable shutil.copytree expects
    def ignore(folder: str, names: list[str]) -> set[str]:
        if os.path.realpath(folder) != os.path.realpath(stdlib):
            return set()
        return {n for n in names if n in _SKIP_STDLIB or n.startswith("config-")}
    return ignore
