"""`python -m envduels.players check-binding [NAME]`: can this llama.cpp binding serve the
embedded model here? Prints one line; exit 0 when it can, 1 when it cannot, 2 on bad usage.

`scripts/install.sh` runs it after installing the prebuilt binding (xllamacpp) and builds
llama-cpp-python instead only when it exits 1, printing its line as the reason.
"""

from __future__ import annotations

import asyncio
import sys
import time

from envduels.players._local import (
    _BINDING_MODULES,
    PREBUILT,
    binding_version,
    check_binding,
    installed_bindings,
)


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "check-binding" or len(argv) > 2 or (
            len(argv) == 2 and argv[1] not in _BINDING_MODULES):
        print(f"usage: python -m envduels.players check-binding [{'|'.join(_BINDING_MODULES)}]",
              file=sys.stderr)
        return 2
    binding = argv[1] if len(argv) == 2 else PREBUILT
    name = f"{binding} {binding_version(binding)}"
    if binding not in installed_bindings():
        print(f"{binding} cannot serve the embedded model here: it is not installed")
        return 1
    start = time.monotonic()
    reason = asyncio.run(check_binding(binding))
    if reason is not None:
        print(f"{name} cannot serve the embedded model here: {reason}")
        return 1
    print(f"{name} serves the embedded model here (loaded and answered in "
          f"{time.monotonic() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
