"""Running untrusted environment code: one sandboxed worker process per environment instance.

Public surface (docs/architecture.md): SandboxLimits, EnvFault, SandboxStartError,
SandboxUnavailable, StepResult, EnvInstance, EnvPool, check_sandbox, open_env_sync,
SyncEnvInstance. Design and what each layer stops: docs/sandbox.md.
"""

from ._instance import EnvInstance, StepResult, truncate_observation
from ._limits import EnvFault, SandboxLimits, SandboxStartError, SandboxUnavailable
from ._pool import EnvPool, check_sandbox
from ._sync import SyncEnvInstance, open_env_sync

__all__ = [
    "EnvFault",
    "EnvInstance",
    "EnvPool",
    "SandboxLimits",
    "SandboxStartError",
    "SandboxUnavailable",
    "StepResult",
    "check_sandbox",
    "SyncEnvInstance",
    "open_env_sync",
    "truncate_observation",
]
