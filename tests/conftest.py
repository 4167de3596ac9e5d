"""Suite-wide rules.

CI (CI=true) installs every optional dependency the tests use (scripts/install.sh --test --embed):
there a skipped test is a missing install step, so it fails instead of passing silently. Skips
whose reason starts with "platform:" (a property of the machine, not of the install) are kept.
"""

from __future__ import annotations

import os
import signal

import pytest

IN_CI = os.environ.get("CI", "").strip().lower() in ("true", "1")

# The Ctrl-C tests send SIGINT to the commands they start, as a terminal does. A suite started
# with SIGINT ignored (`cmd &` in a script without job control) hands that to every child, whose
# Python then never raises KeyboardInterrupt: the commands would be tested deaf to Ctrl-C.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if not reason.removeprefix("Skipped: ").startswith("platform:"):
            report.outcome = "failed"
            report.longrepr = f"skipped under CI=true, where every dependency is installed: {reason}"


@pytest.fixture(autouse=True)
def _private_verdict_cache(tmp_path_factory: pytest.TempPathFactory,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own validation-verdict cache (envs/_verdict_cache.py): a verdict one test
    cached never answers another, and no test reads or writes the user's ~/.cache."""
    monkeypatch.setenv("ENVDUELS_CACHE_DIR", str(tmp_path_factory.mktemp("envduels-cache")))
