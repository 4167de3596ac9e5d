"""Optional-dependency tests skip on a developer's machine but never silently in CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
TEST = f'''
import sys
sys.path.insert(0, {str(HERE)!r})
from players_helpers import requires

needs_lib = requires(False, "libfoo is not installed; run scripts/install.sh")
present = requires(True, "never shown")


@needs_lib
def test_needs_lib():
    pass


@present
def test_present():
    pass
'''


def run_pytest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "test_optional.py").write_text(TEST)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           str(tmp_path)], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)


def test_outside_ci_a_missing_dependency_skips_its_tests(tmp_path):
    run = run_pytest(tmp_path, None)
    assert run.returncode == 0, run.stdout
    assert "SKIPPED [1] test_optional.py:10: libfoo is not installed; run scripts/install.sh" in run.stdout
    assert "1 passed, 1 skipped" in run.stdout


def test_in_ci_a_missing_dependency_fails_the_run_naming_it(tmp_path):
    run = run_pytest(tmp_path, "true")
    assert run.returncode != 0
    assert ("CI=true but libfoo is not installed; run scripts/install.sh: CI must run these "
            "tests, not skip them") in run.stdout
    assert "skipped" not in run.stdout
