"""Suite-wide rules.

CI (CI=true) installs every optional dependency the tests use (scripts/install.sh --test --embed):
there a skipped test is a missing install step, so it fails instead of passing silently. Skips
whose reason starts with "platform:" (a property of the machine, not of the install) are kept.
"""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").strip().lower() in ("true", "1")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if not reason.removeprefix("Skipped: ").startswith("platform:"):
            report.outcome = "failed"
            report.longrepr = f"skipped under CI=true, where every dependency is installed: {reason}"
