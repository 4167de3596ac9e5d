"""`envduels correlate` end to end: a real run database, the CLI as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from transfer_tables import env_row, pair_rows, write_run

ENVDUELS = Path(sys.executable).parent / "envduels"
AUTHORS = [f"m{i}" for i in range(12)]
SOLVERS = ["s1", "s2", "s3"]


def _lifts() -> dict[str, float]:
    # author i: i of the 12 panel pairs on its environment are rescued -> lift i/12
    return {a: i / 12 for i, a in enumerate(AUTHORS)}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("run")
    envs, eps = [], []
    for i, author in enumerate(AUTHORS):
        env_id = f"r1-{author}-0"
        envs.append(env_row(env_id, author, source=f"class E{i}: pass\n"))
        k = 0
        for solver in SOLVERS:
            for seed in (1, 2, 3, 4):
                eps += pair_rows(env_id, author, solver, seed, 0, int(k < i))
                k += 1
    write_run(run, envs, eps, players=AUTHORS + SOLVERS)
    return run


def _gains_with_exact_correlation(x: np.ndarray, rho: float) -> np.ndarray:
    xc = x - x.mean()
    z = np.random.default_rng(5).normal(size=len(x))
    z -= z.mean()
    z -= (z @ xc) / (xc @ xc) * xc
    return rho * xc / np.linalg.norm(xc) + np.sqrt(1 - rho**2) * z / np.linalg.norm(z)


def _correlate(run: Path, gains: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ENVDUELS), "correlate", str(run), "--gains", str(gains), "--bootstrap", "500", *extra],
        capture_output=True, text=True, timeout=120,
    )


def test_correlate_recovers_a_known_correlation_and_saves_json_and_plots(run_dir, tmp_path):
    lifts = _lifts()
    x = np.array([lifts[a] for a in AUTHORS])
    gains = _gains_with_exact_correlation(x, 0.75)
    csv = tmp_path / "gains.csv"
    csv.write_text("author,gain\n" + "".join(f"{a},{float(g)!r}\n" for a, g in zip(AUTHORS, gains, strict=True)))
    out = tmp_path / "out"
    proc = _correlate(run_dir, csv, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "correlate.json").read_text())
    lift = next(r for r in doc["results"] if r["predictor"] == "mean_hint_lift")
    assert lift["n"] == 12
    assert lift["pearson"]["r"] == pytest.approx(0.75, abs=1e-9)
    assert lift["pearson"]["ci_low"] < 0.75 < lift["pearson"]["ci_high"]
    assert lift["pearson"]["p_value"] < 0.05
    assert lift["critical_r"] == pytest.approx(0.576, abs=1e-3)
    assert "< alpha = 0.05 (the permutation test decides" in lift["conclusion"]
    assert (out / "scatter.png").stat().st_size > 1000
    assert (out / "scatter.svg").read_text().lstrip().startswith("<?xml")
    assert "mean_hint_lift" in proc.stdout


def test_three_pools_print_that_nothing_can_be_concluded(run_dir, tmp_path):
    csv = tmp_path / "gains.csv"
    csv.write_text("author,gain\nm1,0.1\nm5,0.3\nm9,0.2\n")
    proc = _correlate(run_dir, csv)
    assert proc.returncode == 0, proc.stderr
    assert "too few to conclude anything" in " ".join(proc.stdout.split())
    assert (run_dir / "correlate" / "correlate.json").is_file()


MALFORMED = {
    "missing_gain_column": ("author,score\nm1,0.1\n", "line 1", "no `gain` column"),
    "missing_unit_column": ("model,gain\nm1,0.1\n", "line 1", "neither `author` nor `env_id`"),
    "unknown_author": ("author,gain\nm1,0.1\nzed,0.2\n", "line 3", "'zed' is not in this run"),
    "unknown_env": ("env_id,gain\nr1-m1-0,0.1\nr9-x-0,0.3\n", "line 3", "'r9-x-0' is not in this run"),
    "non_numeric": ("author,gain\nm1,0.1\n\nm2,lots\n", "line 4", "'lots' for author 'm2' is not a finite number"),
    "empty_gain": ("author,gain\nm1,\n", "line 2", "an empty cell"),
    "duplicate": ("author,gain\nm1,0.1\nm2,0.2\nm1,0.3\n", "line 4", "already appears on line 2"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_gains_file_gets_one_line_error_naming_the_row(run_dir, tmp_path, case):
    text, where, what = MALFORMED[case]
    csv = tmp_path / "gains.csv"
    csv.write_text(text)
    proc = _correlate(run_dir, csv)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{csv} {where}:" in lines[0]
    assert what in lines[0]


def test_missing_run_folder_is_a_one_line_error(tmp_path):
    csv = tmp_path / "gains.csv"
    csv.write_text("author,gain\nm1,0.1\n")
    proc = _correlate(tmp_path / "nope", csv)
    assert proc.returncode != 0
    assert proc.stderr.strip().count("\n") == 0
    assert "does not exist" in proc.stderr


def test_the_printed_tables_are_readable_at_80_columns(run_dir, tmp_path):
    """Issue 15, defect 8: at 80 columns the `n` column vanished and headers were cut."""
    import os

    lifts = _lifts()
    gains = _gains_with_exact_correlation(np.array([lifts[a] for a in AUTHORS]), 0.75)
    csv = tmp_path / "gains.csv"
    csv.write_text("author,gain\n" + "".join(f"{a},{float(g)!r}\n" for a, g in zip(AUTHORS, gains, strict=True)))
    proc = subprocess.run(
        [str(ENVDUELS), "correlate", str(run_dir), "--gains", str(csv), "--bootstrap", "500", "--out", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=120, env=os.environ | {"COLUMNS": "80", "TERM": "xterm"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    headers = next(line for line in lines if "predictor" in line and "crit |r|" in line)
    cells = [c.strip() for c in headers.strip("┃ ").split("┃")]
    assert cells == ["predictor", "n", "r", "95% CI", "p", "p adj.", "crit |r|"]
    rho_headers = next(line for line in lines if "predictor" in line and "ρ" in line)
    assert [c.strip() for c in rho_headers.strip("┃ ").split("┃")] == ["predictor", "n", "ρ", "95% CI", "p"]
    rows = [line for line in lines if line.startswith("│ mean_hint_lift")]
    assert len(rows) == 2  # one per table, each with its n and its interval whole
    for row in rows:
        cells = [c.strip() for c in row.strip("│ ").split("│")]
        assert cells[1] == "12" and cells[3].startswith("[") and cells[3].endswith("]")
