"""`envduels report` and `envduels leaderboard` on real run databases."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from envduels.errors import UserError
from envduels.report.commands import leaderboard_command, report_command

from .rundb import HOSTILE_HINT, small_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return small_run(tmp_path_factory.mktemp("run") / "sim")


def test_report_writes_spec_json_and_one_html_file_in_the_current_folder_not_the_run(
        run_dir, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert report_command([run_dir], json_path=None, html_path=None, bootstrap=50) == 0
    assert not (run_dir / "report.json").exists() and not (run_dir / "report.html").exists()
    j = json.loads((tmp_path / "sim-report.json").read_text())
    assert j["run"]["name"] == "sim" and j["run"]["history"] == "all"
    assert j["run"]["players"] == ["m00", "m01", "m02", "m03", "m04"]
    assert j["run"]["cost_usd"] == pytest.approx(0.25 * (1 + 2 + 3 + 4 + 5))
    assert {"solvers", "authors", "ratings", "transitivity", "divergence", "environments"} <= set(j)
    assert any(e["hint"] == HOSTILE_HINT for e in j["environments"])
    html = (tmp_path / "sim-report.html").read_text()
    assert html.startswith("<!DOCTYPE html>")
    out = capsys.readouterr().out
    assert "sim-report.json" in out and "sim-report.html" in out
    assert "Best solver by rating" in out or "Solvers are" in out or "No single best solver" in out


def test_report_escapes_model_written_text_and_loads_nothing_external(run_dir, tmp_path):
    html_path = tmp_path / "r.html"
    report_command([run_dir], json_path=None, html_path=html_path, bootstrap=20)
    html = html_path.read_text()
    assert "<script" not in html.lower()
    assert "<iframe" not in html.lower() and "<img src=x" not in html
    assert "&lt;script&gt;alert(&#39;title&#39;)&lt;/script&gt;" in html
    assert "&lt;/pre&gt;&lt;script&gt;" in html
    assert 'src="http' not in html and "href=\"http" not in html and "@import" not in html
    assert not (tmp_path / "report.json").exists()


def test_several_runs_are_compared_side_by_side(run_dir, tmp_path):
    other = small_run(tmp_path / "none", seed=4, name="no-history", history="none")
    out = tmp_path / "both.json"
    assert report_command([run_dir, other], json_path=out, html_path=tmp_path / "both.html", bootstrap=20) == 0
    j = json.loads(out.read_text())
    assert [r["run"]["name"] for r in j["runs"]] == ["sim", "no-history"]
    assert [r["history"] for r in j["comparison"]["runs"]] == ["all", "none"]
    html = (tmp_path / "both.html").read_text()
    assert 'id="comparison"' in html and 'id="run2-ratings"' in html


def test_leaderboard_prints_three_rating_tables(run_dir, capsys):
    assert leaderboard_command(run_dir, bootstrap=50) == 0
    out = capsys.readouterr().out
    for title in ("Duel rating", "Author rating", "Solver rating"):
        assert title in out
    assert out.count("m00") == 3 and "95% interval" in out


def test_a_folder_without_a_run_database_is_a_one_line_user_error(tmp_path):
    with pytest.raises(UserError, match="holds no run database"):
        report_command([tmp_path], json_path=None, html_path=None, bootstrap=10)
    with pytest.raises(UserError, match="bootstrap must be 0 or more"):
        leaderboard_command(tmp_path, bootstrap=-1)


@pytest.mark.slow
def test_cli_report_exits_zero_and_bad_folder_exits_nonzero_in_one_line(run_dir, tmp_path):
    ok = subprocess.run([sys.executable, "-m", "envduels.cli", "report", str(run_dir), "--json",
                         str(tmp_path / "x.json"), "--bootstrap", "20"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads((tmp_path / "x.json").read_text())["run"]["bootstrap"] == 20
    bad = subprocess.run([sys.executable, "-m", "envduels.cli", "leaderboard", str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0
    assert bad.stderr.strip().count("\n") == 0 and "holds no run database" in bad.stderr
