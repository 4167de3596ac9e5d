"""`envduels serve` on OpenEnv's current package: `openenv` (not the old `openenv-core`), its own
validator passing against a running server, and the caller's OpenEnv settings changing nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.version import Version

pytest.importorskip("openenv.core", reason="the serve extra is not installed: pip install 'envduels[serve]'")

OPENENV = Path(sys.executable).parent / "openenv"


def test_the_serve_extra_installs_openenv_not_the_old_openenv_core():
    assert Version(version("openenv")) >= Version("0.10.0")
    with pytest.raises(PackageNotFoundError):
        version("openenv-core")


@pytest.mark.slow
def test_openenv_validate_url_passes_every_criterion(server):
    done = subprocess.run([str(OPENENV), "validate", "--url", server.url, "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] is True and report["summary"]["failed_criteria"] == []
    assert {c["id"] for c in report["criteria"] if c["passed"]} >= {
        "health_endpoint", "metadata_endpoint", "schema_endpoint", "mcp_endpoint",
        "mode_endpoint_consistency"}


def test_the_callers_openenv_settings_do_not_change_the_served_routes(monkeypatch):
    # OpenEnv reads both from the environment: the web playground would add routes with no
    # login, production mode would drop HTTP /reset and /step that the protocol documents
    monkeypatch.setenv("ENABLE_WEB_INTERFACE", "true")
    monkeypatch.setenv("OPENENV_MODE", "production")
    from envduels.serve import build_app, catalog

    app = build_app(catalog(["number_guess"]))
    paths = {getattr(route, "path", "") for route in app.routes}
    assert {"/reset", "/step", "/state", "/schema", "/ws", "/environments"} <= paths
    assert not any(p.startswith("/web") for p in paths)


def test_the_schema_publishes_the_duels_state(server):
    import httpx

    state = httpx.get(f"{server.url}/schema").json()["state"]
    assert {"transcript", "outcome", "turn", "max_turns", "hint"} <= set(state["properties"])
