"""The suite's CI rule: under CI=true a skipped test fails, except for platform skips."""

import os
import subprocess
import sys
from pathlib import Path

MODULE = '''
import pytest

def test_needs_something_missing():
    pytest.skip("the optional extra is not installed")

@pytest.mark.skipif(True, reason="platform: not this CPU")
def test_platform_specific():
    pass
'''


def _run(tmp_path: Path, ci: str) -> subprocess.CompletedProcess:
    tests = tmp_path / "tests"
    tests.mkdir(exist_ok=True)
    (tests / "conftest.py").write_text((Path(__file__).parent / "conftest.py").read_text())
    (tests / "test_sample.py").write_text(MODULE)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"CI": ci}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o",
                           "addopts=", str(tests)], cwd=tmp_path, env=env, capture_output=True,
                          text=True)


def test_a_skip_fails_under_ci_but_a_platform_skip_does_not(tmp_path: Path) -> None:
    out = _run(tmp_path, "true").stdout
    assert "1 failed, 1 skipped" in out
    assert "skipped under CI=true, where every dependency is installed" in out


def test_outside_ci_both_tests_skip(tmp_path: Path) -> None:
    assert "2 skipped" in _run(tmp_path, "").stdout
