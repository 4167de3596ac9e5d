"""Resource limits of one sandbox, and the errors the sandbox raises."""

from __future__ import annotations

import errno
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from envduels import _sandbox_defaults as _defaults
from envduels.duel.faults import EnvironmentFault, HostFault
from envduels.errors import UserError

if TYPE_CHECKING:   # never at run time: the sandbox imports under a bare system interpreter
    from envduels.config import SandboxConfig


@dataclass(frozen=True)
class SandboxLimits:
    """Limits applied to every sandboxed environment instance.

    memory_mb caps the whole sandbox (cgroup) and each process (RLIMIT_AS); step_timeout_s is
    the wall-clock deadline of one call (load, reset, step, oracle_action), enforced by the
    parent, which kills the whole process tree when it passes. cpu_cores is the sandbox's CPU
    quota (cgroup cpu controller, all its processes together); with freeze_idle every process
    of the sandbox is frozen between calls (cgroup freezer). Both apply where the host has
    those cgroups (docs/sandbox.md). runtime is the isolation the worker runs in:
    "bubblewrap" (namespaces + seccomp on the host kernel) or "gvisor" (gVisor's user-space
    kernel, `runsc`: its own counters, /proc and clocks; docs/sandbox.md, "Runtimes"). The limits a run config sets (`sandbox:`) default to the
    defaults in `envduels._sandbox_defaults`, which the config's also are; the others are fixed here.
    """

    memory_mb: int = _defaults.MEMORY_MB
    step_timeout_s: float = _defaults.STEP_TIMEOUT_S
    cpu_s: int = _defaults.CPU_S
    max_procs: int = _defaults.MAX_PROCS
    file_size_mb: int = 16
    open_files: int = 64
    scratch_mb: int = 64
    output_cap_bytes: int = 1 << 20
    observation_max_chars: int = _defaults.OBSERVATION_MAX_CHARS
    frame_max_bytes: int = 1 << 20
    cpu_cores: float = 1.0
    freeze_idle: bool = True
    runtime: str = _defaults.RUNTIME


    def __post_init__(self) -> None:
        for name in ("memory_mb", "cpu_s", "max_procs", "file_size_mb", "open_files",
                     "scratch_mb", "output_cap_bytes", "observation_max_chars",
                     "frame_max_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"SandboxLimits.{name} must be a positive int, got {value!r}")
        if not self.step_timeout_s > 0:
            raise ValueError(f"SandboxLimits.step_timeout_s must be > 0, got {self.step_timeout_s!r}")
        if not 0.01 <= self.cpu_cores <= 1024:
            raise ValueError(f"SandboxLimits.cpu_cores must be in [0.01, 1024], got {self.cpu_cores!r}")
        if self.runtime not in _defaults.RUNTIMES:
            raise ValueError(f"SandboxLimits.runtime must be one of {', '.join(_defaults.RUNTIMES)}"
                             f", got {self.runtime!r}")
        if self.open_files < 16:
            raise ValueError("SandboxLimits.open_files must be at least 16 (the interpreter needs them)")

    def rlimits(self, *, nproc: int | None = None, cpu_s: int | None = None,
                open_files: int | None = None) -> str:
        """These limits as the rlimits a sandboxed process lowers its own to before any
        environment code exists: the worker's RLIMITS argument, "AS,CPU_SOFT,CPU_HARD,NOFILE,
        FSIZE,NPROC" (`_worker._limit_self` reads it). `nproc`, `cpu_s` and `open_files`
        replace the limits' own where a launcher needs others (a template's, or a uid shared
        with the harness's own processes). The one encoding of these limits as OS settings,
        for every launch path (bubblewrap, gVisor, a template and the instances it forks)."""
        cpu = self.cpu_s if cpu_s is None else cpu_s
        return ",".join(str(v) for v in (
            self.memory_mb << 20, cpu, cpu + 1, self.open_files if open_files is None else open_files,
            self.file_size_mb << 20, self.max_procs if nproc is None else nproc))

    def cgroup(self, *, memory_extra_mb: int = 0, pids: int | None = None,
               pids_extra: int = 0) -> tuple[int, int, float]:
        """(memory MiB, pids.max, CPU cores) of a sandbox's cgroup (`CgroupHost.create`): these
        limits, plus what a runtime needs beside the environment (`memory_extra_mb`,
        `pids_extra`: gVisor's own), `pids` in place of `max_procs` for a template."""
        return (self.memory_mb + memory_extra_mb,
                (self.max_procs if pids is None else pids) + pids_extra, self.cpu_cores)

    @classmethod
    def from_config(cls, cfg: SandboxConfig) -> SandboxLimits:
        """The limits a run's `sandbox:` section asks for: every config field that is also a
        limit (by name); the limits the config does not set keep their defaults."""
        configured = set(type(cfg).model_fields)
        return cls(**{f.name: getattr(cfg, f.name) for f in fields(cls) if f.name in configured})


DEFAULT_LIMITS = SandboxLimits()


class EnvFault(EnvironmentFault):
    """The environment misbehaved: it raised, timed out, broke a limit, violated the protocol
    or exited. `reason` is one line meant for the environment's author; `detail` keeps a short
    traceback or output tail for diagnostics. The instance that raised it is dead. What it
    means for an episode: `duel.faults` (an `EnvironmentFault`)."""


class SandboxStartError(EnvFault, HostFault):
    """The sandbox failed before any environment code ran: the worker could not be forked
    (EAGAIN), its interpreter or bubblewrap could not be executed, a cgroup could not be
    created, the worker died before its greeting, or the pool was closed. The host's fault,
    never the environment author's: an episode it stops is an `error`, retried on resume."""


class SandboxLost(SandboxStartError):
    """The process that held a sandbox is gone (a harness worker that died, a Ray node or
    host that was lost): the host's fault, never the environment's (an episode in flight ends
    `error`, validation stays unjudged)."""


class HarnessCapacity(SandboxStartError):
    """The harness ran out of something of its own (processes or memory for another sandbox,
    descriptors, uid slots, a full queue): no instance could be given, and nothing about the
    environment is known. Never an environment's fault: a run records it as the harness's
    (`error`, retried on resume), `serve` answers 503."""


# What the harness itself runs out of, by errno: processes (EAGAIN: fork, uid slots),
# descriptors (EMFILE, ENFILE), memory (ENOMEM), cgroups and other kernel tables (ENOSPC).
CAPACITY_ERRNOS = frozenset({errno.EAGAIN, errno.EMFILE, errno.ENFILE, errno.ENOMEM,
                             errno.ENOSPC})


def start_error(err: OSError) -> SandboxStartError:
    """The error for an OSError met while starting a sandbox: `HarnessCapacity` when the
    harness ran out of something (CAPACITY_ERRNOS), else `SandboxStartError`."""
    if err.errno in CAPACITY_ERRNOS:
        return HarnessCapacity(f"the harness is out of capacity and started no sandbox: {err}; "
                               "fewer sessions or episodes at once will fit")
    return SandboxStartError(f"the sandbox failed to start: {err}")


def check_open(closed: bool, source: object, max_turns: object) -> None:
    """What every pool's `open` refuses before any work: a closed pool (SandboxStartError), a
    source that is no str (TypeError), a `max_turns` that is no positive int (ValueError)."""
    if closed:
        raise SandboxStartError("the sandbox pool is closed")
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    if max_turns is not None and (isinstance(max_turns, bool) or not isinstance(max_turns, int)
                                  or max_turns <= 0):
        raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")


class SandboxUnavailable(UserError):
    """bubblewrap (or, with runtime gvisor, runsc) is missing or cannot sandbox here."""

    def __init__(self, problem: str = "bubblewrap (bwrap) is not installed",
                 fix: str | None = None) -> None:
        super().__init__(
            f"{problem}: " + (fix or (
                "envduels runs untrusted environment code only inside bubblewrap; "
                "install it (Debian/Ubuntu: `apt-get install bubblewrap`, Fedora: `dnf install "
                "bubblewrap`), or pass --unsafe-no-sandbox for code you trust completely"))
        )
