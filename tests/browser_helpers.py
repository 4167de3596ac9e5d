"""Headless Chromium for the browser tests (the report's and the viewer's), always with the
system driver and offline, so Selenium Manager never tries to download one."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A selenium Chrome driver with a fresh profile, browser logs on; skips where Chromium is
    not installed (CI installs it, so there the skip fails the run)."""
    if not (Path(CHROMIUM).exists() and Path(DRIVER).exists()):
        pytest.skip("headless Chromium is not installed")
    os.environ.setdefault("SE_OFFLINE", "true")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tmp_path_factory.mktemp("chromium-profile")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--no-first-run", f"--user-data-dir={profile}",
                "--window-size=1280,1600", "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)
