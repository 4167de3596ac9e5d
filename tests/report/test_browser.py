"""The HTML report in headless Chromium: no console errors, every plot section really shows a plot."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest

from envduels.analysis import analyze, simulate_tournament
from envduels.report.html import render_html

sys.path.insert(0, str(Path(__file__).parents[1]))
from browser_helpers import chromium  # noqa: E402

pytestmark = pytest.mark.browser

PLOT_SECTIONS = ["ratings", "lift", "divergence", "transitivity", "learning", "design", "costs"]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from chromium(tmp_path_factory)


@pytest.fixture(scope="module")
def report_file(tmp_path_factory):
    run = simulate_tournament(players=6, envs_per_author=3, rounds=2, seeds=3, seed=2, p_invalid=0.1, p_incomplete=0.02)
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(render_html([analyze(run.tables, bootstrap=100, permutations=100)]), encoding="utf-8")
    return path


def pixel_variance(png: bytes) -> float:
    import matplotlib.image as mpimg

    img = mpimg.imread(io.BytesIO(png), format="png")
    return float(np.var(img[..., :3]))


def test_report_loads_without_console_errors(browser, report_file):
    browser.get(report_file.as_uri())
    assert browser.title.startswith("envduels report")
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == []


@pytest.mark.parametrize("section", PLOT_SECTIONS)
def test_every_plot_section_shows_a_non_blank_plot(browser, report_file, section):
    from selenium.webdriver.common.by import By

    browser.get(report_file.as_uri())
    el = browser.find_element(By.ID, section)
    imgs = el.find_elements(By.TAG_NAME, "img")
    assert imgs, f"section {section} has no plot"
    for img in imgs:
        browser.execute_script("arguments[0].scrollIntoView();", img)
        assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img) > 100
        assert img.size["width"] > 200 and img.size["height"] > 100
        assert pixel_variance(img.screenshot_as_png) > 1e-3
    assert pixel_variance(el.screenshot_as_png) > 1e-3


def test_gallery_opens_to_code_hint_results_and_transcripts(browser, report_file):
    from selenium.webdriver.common.by import By

    browser.get(report_file.as_uri())
    first = browser.find_element(By.CSS_SELECTOR, "#gallery > details")
    first.find_element(By.TAG_NAME, "summary").click()
    assert "Hint:" in first.text and "solver" in first.text
    inner = first.find_elements(By.CSS_SELECTOR, "details > summary")
    assert any("Transcript" in s.text for s in inner) and any(s.text == "Code" for s in inner)
    assert browser.get_log("browser") == []


@pytest.fixture(scope="module")
def quickstart_file(tmp_path_factory):
    from .runs import quickstart_run, tables_of, write

    tmp = tmp_path_factory.mktemp("quickstart")
    a = analyze(tables_of(write(tmp / "run", quickstart_run(), "quickstart")), bootstrap=50, permutations=50)
    path = tmp / "report.html"
    path.write_text(render_html([a]), encoding="utf-8")
    return path


def test_the_quickstart_shaped_report_says_why_each_missing_plot_is_missing(browser, quickstart_file):
    from selenium.webdriver.common.by import By

    browser.get(quickstart_file.as_uri())
    assert [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")] == []
    first = browser.find_element(By.CSS_SELECTOR, "#summary li").text
    assert first.startswith("No authored environment was valid")
    missing = [p.text for p in browser.find_elements(By.CSS_SELECTOR, "p.missing")]
    assert "No author rating: no authored environment was valid." in missing
    assert any(m.startswith("Left out: this run has one round") for m in missing)
    assert all(m.endswith(".") and "\n" not in m for m in missing)


def test_every_metric_column_has_a_visible_definition_on_hover(browser, report_file):
    from selenium.webdriver.common.by import By

    browser.get(report_file.as_uri())
    heads = browser.find_elements(By.CSS_SELECTOR, "#tables th")
    titled = {h.text: h.get_attribute("title") for h in heads if h.text != "model"}
    for column in ("hint gain", "rescue", "harm", "hint authoring", "design score", "teaching"):
        assert len(titled[column]) > 20, column
    glossary = browser.find_element(By.ID, "glossary").text
    assert "hint authoring" in glossary and "design score" in glossary
