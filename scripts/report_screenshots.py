"""Screenshots of the HTML report for the constructed runs in tests/report/runs.py.

    PYTHONPATH=src .venv/bin/python scripts/report_screenshots.py docs/report/after
    PYTHONPATH=/path/to/old/checkout/src .venv/bin/python scripts/report_screenshots.py docs/report/before

Renders whichever `envduels` is first on the path, so the same script remakes the "before"
pictures from an older checkout. Writes per run NAME.png (the whole page, scaled to 480 px wide,
128 colours), NAME-summary.png (the summary section, 900 px wide) and NAME.txt (the summary
lines the terminal prints). Needs headless Chromium and
chromedriver at /usr/bin.
"""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.report.runs

WIDTH = 480  # the whole page: its layout at a glance
SUMMARY_WIDTH = 900  # the summary section: readable


def browser():  # noqa: ANN201 - selenium's driver type
    import os

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
                "--window-size=1280,1000", "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def full_page(driver, html: Path) -> tuple[bytes, bytes]:  # noqa: ANN001
    """The whole page and the summary section, as PNG bytes."""
    import base64

    from selenium.webdriver.common.by import By

    driver.get(html.as_uri())
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}})
    summary = driver.find_element(By.CSS_SELECTOR, "section[id$='summary']").screenshot_as_png
    return base64.b64decode(shot["data"]), summary


def small_png(png: bytes, out: Path, width: int) -> None:
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    if img.width > width:
        img = img.resize((width, round(img.height * width / img.width)), Image.LANCZOS)
    img.quantize(colors=128).save(out, optimize=True)


def main(out_dir: Path) -> int:
    from envduels.analysis import analyze
    from envduels.report.html import headline, render_html
    from tests.report.runs import RUNS, tables_of, write

    out_dir.mkdir(parents=True, exist_ok=True)
    driver = browser()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, build in RUNS.items():
                run_dir = write(Path(tmp) / name, build(), name)
                a = analyze(tables_of(run_dir), bootstrap=200, permutations=200, name=name)
                page = Path(tmp) / f"{name}.html"
                page.write_text(render_html([a]), encoding="utf-8")
                whole, summary = full_page(driver, page)
                small_png(whole, out_dir / f"{name}.png", WIDTH)
                small_png(summary, out_dir / f"{name}-summary.png", SUMMARY_WIDTH)
                (out_dir / f"{name}.txt").write_text("".join(f"• {s}\n" for s in headline(a.json)), encoding="utf-8")
                print(f"wrote {out_dir / name}.png and .txt")
    finally:
        driver.quit()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: report_screenshots.py OUT_DIR")
    sys.exit(main(Path(sys.argv[1])))
