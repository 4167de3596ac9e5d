"""Screenshots of the HTML report for the constructed runs in tests/report/runs.py.

    PYTHONPATH=src .venv/bin/python scripts/report_screenshots.py docs/report/after
    PYTHONPATH=/path/to/old/checkout/src .venv/bin/python scripts/report_screenshots.py docs/report/before

Renders whichever `envduels` is first on the path, so the same script remakes the "before"
pictures from an older checkout. Writes per run NAME.png (the whole page, scaled to 640 px wide,
256 colours) and NAME.txt (the summary lines the terminal prints). Needs headless Chromium and
chromedriver at /usr/bin.
"""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.report.runs

WIDTH = 640


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


def full_page(driver, html: Path) -> bytes:  # noqa: ANN001
    driver.get(html.as_uri())
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(int(height) + 40, 16000))
    return driver.get_screenshot_as_png()


def small_png(png: bytes, out: Path) -> None:
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    img = img.resize((WIDTH, round(img.height * WIDTH / img.width)), Image.LANCZOS)
    img.quantize(colors=256).save(out, optimize=True)


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
                small_png(full_page(driver, page), out_dir / f"{name}.png")
                (out_dir / f"{name}.txt").write_text("".join(f"• {s}\n" for s in headline(a.json)), encoding="utf-8")
                print(f"wrote {out_dir / name}.png and .txt")
    finally:
        driver.quit()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: report_screenshots.py OUT_DIR")
    sys.exit(main(Path(sys.argv[1])))
