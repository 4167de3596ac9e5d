"""The defaults of the sandbox limits a run config may set, written once.

`config.SandboxConfig` (the run config's `sandbox:` section) and `sandbox.SandboxLimits` both
take them from here. Standard library only, like the sandbox package: the sandbox must import
under a bare system interpreter, without pydantic or the project's other dependencies.
"""

from typing import Literal

MEMORY_MB = 512
STEP_TIMEOUT_S = 5.0
CPU_S = 60
MAX_PROCS = 64
OBSERVATION_MAX_CHARS = 8000
RUNTIME: Literal["bubblewrap", "gvisor"] = "bubblewrap"
RUNTIMES = ("bubblewrap", "gvisor")   # docs/sandbox.md, "Runtimes"
