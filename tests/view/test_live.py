"""A page of a run in progress follows the run while the run writes, without a reload."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from urllib.parse import quote

import pytest

from envduels.store import DB_NAME
from envduels.store.writer import RunWriter

from .conftest import analysed

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def copy_run(src, dst):
    dst.mkdir()
    with sqlite3.connect(src / DB_NAME) as a, sqlite3.connect(dst / DB_NAME) as b:
        a.backup(b)
    return dst


def test_a_run_in_progress_updates_its_overview_while_the_run_writes(browser, scripted_run, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from envduels.view import create_app
    from envduels.view.commands import running

    run = copy_run(scripted_run, tmp_path / "live")
    writer = RunWriter(run)
    with running(create_app([run], bootstrap=50)) as url:
        browser.get(analysed(url) + "run/0/")
        done = lambda b: b.find_element(By.CSS_SELECTOR, "[data-live-key=episodes_done]").text  # noqa: E731
        assert done(browser) == "24"
        browser.execute_script("window.sameDocument = 'yes'")
        template = [e for e in writer.reader.episodes() if e.env_id == "r1-alice-0"][:6]
        for k, e in enumerate(template):
            writer.put_episode(replace(e, episode_key=f"live-{k}", seed=1000 + k))
            if k == 2:
                WebDriverWait(browser, 20).until(lambda b: done(b) == "27")
        WebDriverWait(browser, 20).until(lambda b: done(b) == "30")
        assert browser.execute_script("return window.sameDocument") == "yes"   # no reload
        first = browser.find_element(By.CSS_SELECTOR, "#latest tr a")
        assert first.get_attribute("href").endswith(f"/run/0/episode/{quote('live-5', safe='')}")
        assert browser.find_element(By.CSS_SELECTOR, "[data-live-key='outcomes.success']").text == str(
            sum(1 for e in writer.reader.episodes() if e.outcome == "success"))
        browser.get("about:blank")   # stop polling a server about to go away
        assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
    writer.close()


def test_an_overview_opened_before_the_first_analysis_shows_it_when_ready(browser, scripted_run):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from envduels.view import create_app
    from envduels.view.commands import running

    # warm=False: the analysis starts with this first page (a worker process that imports the
    # analysis stack: seconds), so the page is drawn before it is done
    with running(create_app([scripted_run], bootstrap=20, warm=False)) as url:
        browser.get(url + "run/0/")
        assert browser.find_elements(By.ID, "pending")
        assert browser.find_element(By.CSS_SELECTOR, "#ratings-duel tbody").text == "computing…"
        WebDriverWait(browser, 120).until(lambda b: not b.find_elements(By.ID, "pending"))
        rows = browser.find_elements(By.CSS_SELECTOR, "#ratings-duel tbody tr")
        assert {r.find_elements(By.TAG_NAME, "td")[1].text for r in rows} == {"alice", "bob", "carol", "dave"}
        assert "24 episodes" in browser.find_element(By.ID, "headline").text
        browser.get("about:blank")
        assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
