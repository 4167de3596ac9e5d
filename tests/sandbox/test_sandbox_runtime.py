"""Choosing the sandbox runtime: the run config's `sandbox.runtime` reaches every sandbox,
and a runtime this machine cannot run is one line saying what to install."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from sandbox_helpers import FAST, TRIVIAL, gvisor_missing

from envduels.config import load_config
from envduels.errors import UserError
from envduels.sandbox import EnvPool, SandboxLimits, SandboxUnavailable, _launcher


def _config(tmp_path: Path, sandbox: dict) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({
        "name": "r", "players": [{"name": "p", "provider": "openai", "model": "m",
                                  "base_url": "http://127.0.0.1:9/v1", "roles": ["solver"]}],
        "tournament": {"environments": ["nim"]}, "sandbox": sandbox}))
    return path


def test_the_config_s_runtime_reaches_the_sandbox_limits_and_bubblewrap_is_the_default(
        tmp_path: Path) -> None:
    assert SandboxLimits.from_config(load_config(_config(tmp_path, {})).sandbox).runtime == (
        "bubblewrap")
    chosen = load_config(_config(tmp_path, {"runtime": "gvisor"})).sandbox
    assert SandboxLimits.from_config(chosen).runtime == "gvisor"


def test_an_unknown_runtime_is_a_one_line_config_error(tmp_path: Path) -> None:
    with pytest.raises(UserError) as info:
        load_config(_config(tmp_path, {"runtime": "docker"}))
    assert "runtime" in str(info.value) and "\n" not in str(info.value).strip()
    with pytest.raises(ValueError, match="runtime must be one of bubblewrap, gvisor"):
        SandboxLimits(runtime="docker")


def test_gvisor_without_runsc_is_refused_in_one_line_that_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_launcher.host(), "runsc", None)
    with pytest.raises(SandboxUnavailable) as info:
        EnvPool(dataclasses.replace(FAST, runtime="gvisor"))
    message = str(info.value)
    assert message.startswith("gVisor (runsc) is not installed: ")
    assert "apt-get install runsc" in message and "\n" not in message


async def test_a_gvisor_sandbox_runs_in_gvisor_s_kernel() -> None:
    if why := gvisor_missing():
        pytest.skip(why)
    probe = TRIVIAL.replace('return "count to 3", {"seed": seed}',
                            'return open("/proc/version").read(), {}')
    async with EnvPool(dataclasses.replace(FAST, runtime="gvisor"), warm=0) as pool:
        inst = await pool.open(probe)
        version, _info = await inst.reset(0)
        await inst.close()
    with open("/proc/version") as fh:
        assert version != fh.read()   # gVisor's own kernel answers (it says 4.4.0), not the host's
