"""The transfer loop end to end on CPU: a scripted duel, export per author pool, SmolLM2 trained
on each pool with TRL, evaluated on a held-out export, gains correlated. A smoke test of the
plumbing: its numbers say nothing about models."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="needs the train extra: pip install 'envduels[train]'")

ROOT = Path(__file__).resolve().parents[2]
POOLS = ["a1", "a2", "a3", "a4"]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_smoke_run_trains_four_author_pools_and_ends_with_a_correlate_report(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TRL_EXPERIMENTAL_SILENCE": "1"}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "transfer" / "smoke.py"),
                           str(tmp_path)], capture_output=True, text=True, timeout=1700,
                          env=env, cwd=ROOT)
    wall = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "transfer"
    with (out / "gains.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["author"] for r in rows] == POOLS
    doc = json.loads((out / "transfer.json").read_text())
    assert doc["label"] == "smoke test"
    for author in POOLS:
        pool = doc["pools"][author]
        assert pool["environments"] == [f"r1-{author}-0"]
        assert pool["gain"] == pytest.approx(pool["trained_rate"] - doc["base_rate"])
        rescue = (out / "pools" / author / "train" / "rescue.jsonl").read_text().splitlines()
        assert len(rescue) == 1 and json.loads(rescue[0])["groups"] == 1
    report = json.loads((out / "correlate" / "correlate.json").read_text())
    assert report["n_units"] == 4 and report["unit"] == "author"
    lifts = {p["unit"]: p["mean_hint_lift"] for p in report["points"]}
    assert lifts == pytest.approx({"a1": 0.8, "a2": 0.6, "a3": 0.4, "a4": 0.2})
    assert "these numbers are a smoke test, not a finding" in proc.stdout
    print(f"transfer smoke run: {wall:.0f} s wall")
