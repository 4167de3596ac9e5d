"""The viewer in headless Chromium, over a real scripted tournament served on loopback."""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from duel_script import CRASHY_HINT, LOCK_HINT, lock_code

from envduels.store import Store

pytestmark = pytest.mark.browser
SHOTS = os.environ.get("ENVDUELS_VIEW_SCREENSHOTS")
"""Set to a folder (docs/) to save the overview, environment and episode screenshots there."""


def severe(browser) -> list[dict]:
    return [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR", "WARNING")]


def crawl(browser, start: str) -> dict[str, str]:
    """Every same-origin page reachable by links from `start`: path -> page text."""
    origin = urlsplit(start)
    seen: dict[str, str] = {}
    todo = deque([urlsplit(start).path or "/"])
    from selenium.webdriver.common.by import By

    while todo:
        path = todo.popleft()
        if path in seen:
            continue
        browser.get(f"{origin.scheme}://{origin.netloc}{path}")
        seen[path] = browser.find_element(By.TAG_NAME, "body").text
        for a in browser.find_elements(By.CSS_SELECTOR, "a[href]"):
            u = urlsplit(a.get_attribute("href"))
            if u.netloc == origin.netloc and u.path.startswith(("/run/", "/")) and not u.query \
                    and not u.path.startswith("/static") and u.path not in seen:
                todo.append(u.path)
    return seen


@pytest.fixture(scope="module")
def pages(browser, viewer):
    return crawl(browser, viewer + "/")


def test_links_reach_every_environment_episode_and_player(pages, scripted_run):
    store = Store(scripted_run, create=False)
    envs = {f"/run/0/env/{quote(e.env_id, safe='')}" for e in store.environments()}
    eps = {f"/run/0/episode/{quote(e.episode_key, safe='')}" for e in store.episodes()}
    players = {f"/run/0/player/{n}" for n in ("alice", "bob", "carol", "dave")}
    store.close()
    assert len(envs) == 3 and len(eps) == 24
    assert envs <= set(pages) and eps <= set(pages) and players <= set(pages)
    assert {"/", "/run/0/", "/run/0/environments"} <= set(pages)


def test_overview_shows_progress_ratings_usage_and_findings(browser, viewer):
    from selenium.webdriver.common.by import By

    browser.get(viewer + "/run/0/")
    assert browser.find_element(By.CSS_SELECTOR, "[data-live-key=episodes_done]").text == "24"
    assert browser.find_element(By.CSS_SELECTOR, "[data-live-key=episodes_left]").text == "0"
    # what the analysis makes of duel_script's table (a 6-pair run: no author rating yet)
    expected = {"duel": {"carol", "alice", "bob", "dave"}, "solver": {"carol", "bob"}}
    for kind, models in expected.items():
        rows = browser.find_elements(By.CSS_SELECTOR, f"#ratings-{kind} tbody tr")
        assert {r.find_elements(By.TAG_NAME, "td")[1].text for r in rows} == models
        assert all(" – " in r.find_elements(By.TAG_NAME, "td")[3].text for r in rows)  # an interval
    assert browser.find_element(By.CSS_SELECTOR, "#ratings-author tbody").text == "not enough data yet"
    usage = {tuple(td.text for td in r.find_elements(By.TAG_NAME, "td")[:2])
             for r in browser.find_elements(By.CSS_SELECTOR, "#usage tbody tr")}
    assert usage == {("alice", "author"), ("alice", "solver"), ("bob", "author"), ("bob", "solver"),
                     ("carol", "solver"), ("dave", "author")}
    assert "3 environments (2 valid), 24 episodes" in browser.find_element(By.ID, "headline").text
    assert severe(browser) == []


def test_environment_page_shows_source_hint_repair_conversation_and_grid(browser, viewer):
    from selenium.webdriver.common.by import By

    browser.get(viewer + "/run/0/env/r1-bob-0")
    assert browser.find_element(By.ID, "hint").text == CRASHY_HINT
    code = browser.find_element(By.ID, "source")
    assert "class Crashy" in code.text and code.find_elements(By.CSS_SELECTOR, ".linenos")
    assert code.find_elements(By.CSS_SELECTOR, ".k")   # highlighted keywords
    attempts = browser.find_elements(By.CSS_SELECTOR, "details.attempt")
    assert [a.find_element(By.TAG_NAME, "summary").text for a in attempts] == [
        "attempt 0: invalid", "attempt 1: valid"]
    attempts[0].find_element(By.TAG_NAME, "summary").click()
    assert attempts[0].find_elements(By.CSS_SELECTOR, ".reasons li")
    assert "class Broken(:" in attempts[0].find_element(By.CSS_SELECTOR, "pre.reply").text
    grid = browser.find_element(By.ID, "grid")
    rows = {r.find_element(By.TAG_NAME, "th").text.split()[0]: [td.text for td in r.find_elements(By.TAG_NAME, "td")]
            for r in grid.find_elements(By.CSS_SELECTOR, "tbody tr")}
    # duel_script.EXPECTED, both seeds: (no hint, hint) per seed
    assert rows == {"alice": ["F2", "S1"] * 2, "bob": ["S1", "S1"] * 2, "carol": ["I1", "I1"] * 2}
    assert severe(browser) == []


def test_episode_page_shows_every_turn_with_the_hint_marked(browser, viewer, scripted_run):
    from selenium.webdriver.common.by import By

    store = Store(scripted_run, create=False)
    ep = next(e for e in store.episodes() if e.env_id == "r1-alice-0" and e.solver == "bob"
              and e.hinted)
    store.close()
    browser.get(f"{viewer}/run/0/episode/{quote(ep.episode_key, safe='')}")
    assert browser.find_element(By.ID, "outcome").text.startswith("success")
    marks = browser.find_elements(By.CSS_SELECTOR, "mark.hint")
    assert [m.text for m in marks] == [LOCK_HINT]
    items = browser.find_elements(By.CSS_SELECTOR, "#transcript > li")
    assert [i.get_attribute("class").split()[1] for i in items] == [
        "role-system", "role-user", "role-assistant", "role-env", "role-outcome"]
    assert "hint shown" in items[1].text
    assert items[3].find_element(By.CSS_SELECTOR, "code.action").text == f"\\boxed{{{lock_code(ep.seed)}}}"
    assert "1.00" in items[3].text
    assert severe(browser) == []


def test_episode_page_flags_a_reply_with_no_action(browser, viewer, scripted_run):
    from selenium.webdriver.common.by import By

    store = Store(scripted_run, create=False)
    ep = next(e for e in store.episodes() if e.env_id == "r1-bob-0" and e.solver == "alice"
              and not e.hinted)
    store.close()
    browser.get(f"{viewer}/run/0/episode/{quote(ep.episode_key, safe='')}")
    flagged = [li for li in browser.find_elements(By.CSS_SELECTOR, "#transcript > li")
               if "format_error" in li.find_element(By.CLASS_NAME, "who").text]
    assert len(flagged) == 1 and "No action extracted" in flagged[0].text


def test_player_page_shows_calls_environments_and_episodes(browser, viewer):
    from selenium.webdriver.common.by import By

    browser.get(viewer + "/run/0/player/bob")
    roles = [r.find_element(By.TAG_NAME, "td").text for r in browser.find_elements(By.CSS_SELECTOR, "#usage tbody tr")]
    assert roles == ["author", "solver"]
    assert [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#authored tbody a")] == ["r1-bob-0"]
    assert len(browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr")) == 8


def test_environment_filter_keeps_only_what_was_chosen(browser, viewer):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(viewer + "/run/0/environments")
    shown = lambda: [r.get_attribute("data-env") for r in browser.find_elements(By.CSS_SELECTOR, "#envs tbody tr[data-env]")]  # noqa: E731

    def submit() -> None:
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.support import expected_conditions as ec
        from selenium.webdriver.support.ui import WebDriverWait

        old = browser.find_element(By.ID, "envs")
        browser.find_element(By.ID, "apply").click()
        # the filtered page is loaded; while the old page is torn down Chromium may answer
        # "Node with given id does not belong to the document" instead of "stale": ask again
        WebDriverWait(browser, 20, ignored_exceptions=(WebDriverException,)).until(
            ec.staleness_of(old))

    assert sorted(shown()) == ["r1-alice-0", "r1-bob-0", "r1-dave-0"]
    Select(browser.find_element(By.NAME, "valid")).select_by_value("no")
    submit()
    assert shown() == ["r1-dave-0"]
    Select(browser.find_element(By.NAME, "valid")).select_by_value("")
    Select(browser.find_element(By.NAME, "author")).select_by_value("bob")
    submit()
    assert shown() == ["r1-bob-0"]
    assert browser.current_url.endswith("?author=bob&round=&valid=&flag=&sort=&order=")
    browser.get(viewer + "/run/0/environments?sort=lift&order=desc")
    assert shown()[-1] == "r1-dave-0"   # never played: last whatever the order


@pytest.mark.slow
def test_hostile_replies_and_observations_run_nothing_and_load_nothing_on_any_page(
        browser, viewer, pages, canary):
    from selenium.webdriver.common.by import By

    shown_as_text = 0
    for path in pages:
        browser.get(viewer + path)
        scripts = [s.get_attribute("src") for s in browser.find_elements(By.TAG_NAME, "script")]
        assert scripts == [viewer + "/static/live.js"], path
        assert browser.find_elements(By.TAG_NAME, "img") == [], path
        assert browser.find_elements(By.CSS_SELECTOR, "a[href^='javascript'], iframe, object, embed") == [], path
        assert severe(browser) == [], path
        shown_as_text += "<script>fetch(" in browser.find_element(By.TAG_NAME, "body").text
    # the payloads are really on the pages (as text): the replies, observations, author reply
    assert shown_as_text >= 13
    assert canary.hits == []


def test_screenshots_of_overview_environment_and_episode(browser, viewer, scripted_run, tmp_path):
    from selenium.webdriver.common.by import By

    store = Store(scripted_run, create=False)
    ep = next(e for e in store.episodes() if e.env_id == "r1-bob-0" and e.solver == "alice"
              and e.hinted)
    store.close()
    out = Path(SHOTS) if SHOTS else tmp_path
    shots = {"viewer-overview.png": "/run/0/", "viewer-environment.png": "/run/0/env/r1-bob-0",
             "viewer-episode.png": f"/run/0/episode/{quote(ep.episode_key, safe='')}"}
    for name, path in shots.items():
        browser.get(viewer + path)
        png = browser.find_element(By.TAG_NAME, "body").screenshot_as_png
        assert len(png) > 10_000
        (out / name).write_bytes(png)
