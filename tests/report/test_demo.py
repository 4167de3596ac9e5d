"""`envduels demo`: a simulated tournament of planted skill, reported by the real analysis, that
says it is simulated and what it recovered; its report read in headless Chromium."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from envduels.report.commands import demo_command
from envduels.report.demo import PLANTED

sys.path.insert(0, str(Path(__file__).parents[1]))
from browser_helpers import chromium  # noqa: E402

# The cheaper bootstrap keeps this test quicker; the ratings' order does not depend on it.
BOOTSTRAP = 200
pytestmark = pytest.mark.slow  # one analysis of 2,880 episodes: about 10 s of CPU
PLOT_SECTIONS = ["ratings", "lift", "divergence", "transitivity", "learning"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert demo_command(json_path=out / "demo.json", html_path=out / "demo.html",
                            bootstrap=BOOTSTRAP) == 0
    (out / "printed.txt").write_text(printed.getvalue())
    return out


def test_the_demo_recovers_the_planted_solver_order(demo):
    report = json.loads((demo / "demo.json").read_text())
    found = [row["model"] for row in report["ratings"]["solver"]]
    assert found == [p.name for p in sorted(PLANTED, key=lambda p: -p.solving)]
    assert report["run"]["name"] == "demo (simulated players)"
    assert report["run"]["cost_usd"] is None  # a simulation has no bill to show


def test_the_demo_report_says_first_that_its_players_are_simulated(demo):
    html = (demo / "demo.html").read_text()
    about = html.index('<section id="about"')
    assert about < html.index('<section id="summary"')
    assert "Demo: simulated players of planted skill, not models. Nothing here is a finding about any model" in html
    assert "Planted solving skill: ada (+1.2) &gt; bo (+0.6) &gt; cy (+0.0) &gt; dee (-0.6) &gt; eli (-1.2). " \
           "Solver ratings found: ada &gt; bo &gt; cy &gt; dee &gt; eli" in html


def test_the_demo_prints_its_preface_before_the_summary(demo):
    out = (demo / "printed.txt").read_text()
    assert out.startswith("• Demo: simulated players of planted skill, not models.")
    assert out.index("Planted hint-writing skill:") < out.index("Best author by rating:")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from chromium(tmp_path_factory)


@pytest.mark.browser
def test_every_section_of_the_demo_report_says_what_it_found(browser, demo):
    from selenium.webdriver.common.by import By

    browser.get((demo / "demo.html").as_uri())
    assert [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")] == []
    about = browser.find_elements(By.CSS_SELECTOR, "#about li")
    assert len(about) == 4 and about[0].text.startswith("Demo: simulated players")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#summary li")) >= 5
    for section in PLOT_SECTIONS:
        el = browser.find_element(By.ID, section)
        figures = el.find_elements(By.TAG_NAME, "figure")
        assert figures, f"section {section} shows no plot"
        for figure in figures:
            img = figure.find_element(By.TAG_NAME, "img")
            browser.execute_script("arguments[0].scrollIntoView();", img)
            assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth",
                                          img) > 100
            caption = figure.find_element(By.TAG_NAME, "figcaption").text
            assert caption.endswith((".", ")")) and len(caption) > 40, (section, caption)
    # no source to compare and no bill: each says why, never a made-up figure or a blank
    design = [p.text for p in browser.find_elements(By.CSS_SELECTOR, "#design p.missing")]
    assert design == ["Left out: these episodes carry no environment source to compare designs "
                      "(recorded by another harness, or simulated)."]
    costs = [p.text for p in browser.find_elements(By.CSS_SELECTOR, "#costs p.missing")]
    assert "Left out: no cost or token counts were recorded for any player." in costs
