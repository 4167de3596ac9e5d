"""Running untrusted environment code: one sandboxed worker process per environment instance.

Public surface (docs/architecture.md): SandboxLimits, EnvFault, SandboxStartError (and its
SandboxLost, HarnessCapacity), SandboxUnavailable, StepResult, Played, EnvInstance, EnvPool,
HarnessPool (the same surface over harness worker processes, docs/workers.md),
RemoteEnvInstance, sandbox_pool, check_sandbox, open_env_sync, SyncEnvInstance. Design and what each layer stops: docs/sandbox.md.
"""

from ._harness import HarnessPool, SandboxPool, sandbox_pool
from ._instance import EnvInstance, Played, StepResult, truncate_observation
from ._limits import (
    EnvFault,
    HarnessCapacity,
    SandboxLimits,
    SandboxLost,
    SandboxStartError,
    SandboxUnavailable,
)
from ._pool import EnvPool, check_sandbox
from ._remote import RemoteEnvInstance
from ._sync import SyncEnvInstance, open_env_sync

__all__ = [
    "EnvFault",
    "EnvInstance",
    "EnvPool",
    "HarnessCapacity",
    "HarnessPool",
    "Played",
    "RemoteEnvInstance",
    "SandboxLost",
    "SandboxPool",
    "sandbox_pool",
    "SandboxLimits",
    "SandboxStartError",
    "SandboxUnavailable",
    "StepResult",
    "check_sandbox",
    "SyncEnvInstance",
    "open_env_sync",
    "truncate_observation",
]
