"""Read an envduels HTML report in headless Chromium, as a newcomer would, and print what each
section says: its plots' captions, or the sentence saying why a plot is left out. Exit 1 when a
section shows neither (a blank section), a plot did not load, or the page logged an error.

    .venv/bin/python bench/read_report.py quickstart.html [demo.html ...]

bench/time_first_contact.sh runs it on the quickstart's and the demo's reports.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def read(driver, path: Path) -> list[str]:
    """The problems found in one report (none: it reads well); prints what each section says."""
    from selenium.webdriver.common.by import By

    driver.get(path.resolve().as_uri())
    problems = [f"console: {e['message']}" for e in driver.get_log("browser")
                if e["level"] in ("SEVERE", "ERROR")]
    print(f"== {path}: {driver.title}")
    for item in driver.find_elements(By.CSS_SELECTOR, "#about li, #summary li"):
        print(f"  • {item.text}")
    for section in driver.find_elements(By.CSS_SELECTOR, "main > section"):
        sid = section.get_attribute("id")
        if sid in ("about", "summary", "tables", "gallery", "glossary"):
            continue
        title = section.find_element(By.TAG_NAME, "h2").text
        said = []
        for figure in section.find_elements(By.TAG_NAME, "figure"):
            img = figure.find_element(By.TAG_NAME, "img")
            if not driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img):
                problems.append(f"{title}: a plot did not load")
            said.append("plot: " + figure.find_element(By.TAG_NAME, "figcaption").text)
        said += ["says: " + p.text for p in section.find_elements(By.CSS_SELECTOR, "p") if p.text]
        if not said:
            problems.append(f"{title}: a blank section")
        print(f"  [{title}]")
        for line in said:
            print(f"    {line}")
    return problems


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__)
        return 2
    os.environ.setdefault("SE_OFFLINE", "true")  # the system driver; never a download
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="read-report-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                f"--user-data-dir={profile}", "--window-size=1280,1600", "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    try:
        problems = {p: read(driver, Path(p)) for p in paths}
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    bad = {p: found for p, found in problems.items() if found}
    for p, found in bad.items():
        print(f"{p}: " + "; ".join(found))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
