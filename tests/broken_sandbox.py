"""A bubblewrap that cannot start a sandbox, in this process and in its harness workers.

The harness workers (docs/workers.md) are processes of their own: a monkeypatch of this
process's launcher does not reach them, so they are also given a `bwrap` first on PATH that
exits at once (its message must not start with "bwrap:", which reads as bubblewrap being
unusable on this host: SandboxUnavailable)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envduels.sandbox import _launcher


def break_bwrap(mp: pytest.MonkeyPatch, folder: Path) -> None:
    """From now on (until `mp` is undone) no sandbox starts, in-process or in a worker
    started after this call."""
    mp.setattr(_launcher.host(), "bwrap", "/nonexistent/envduels-test/bwrap")
    folder.mkdir(parents=True, exist_ok=True)
    fake = folder / "bwrap"
    fake.write_text("#!/bin/sh\necho 'envduels test: this bubblewrap cannot start' >&2\nexit 1\n")
    fake.chmod(0o755)
    mp.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
