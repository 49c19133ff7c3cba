"""report.html as a reader sees it: render it in headless Chromium at 1400 px, save screenshots, check the layout.

    pip install -e '.[screenshots]'             # playwright (the Python driver); Chromium itself:
    apt-get install -y chromium                 # or `playwright install chromium`
    python benchmarks/report_screenshots.py runs/quickstart/report/report.html [--out DIR] [--width 1400]

Writes DIR/report_top.png (the first screen: contents, findings, comparison figure), DIR/report_full.png (the
whole page, every folded section closed) and DIR/layout.json, and prints one line per check:
  - no table is wider than the page (each table's right edge within the viewport, with no horizontal scroll of
    the page or of a table's own box);
  - the document leads with the findings table and the comparison figure (h2 order);
  - the maps are folded per model (<details>).
Exit 0 when every check passes, 1 otherwise. The tests run the same checks without playwright, through Chromium's
DevTools pipe (tests/chromium.py): tests/unit/harness/report/test_report_render.py on a small report and
tests/integration/test_report_in_chromium.py on the smoke run's; .ci/run installs Debian's chromium for them.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_chromium() -> str | None:
    """A Chromium on PATH, else None (playwright's own download is used if it has one)."""
    return next((shutil.which(n) for n in CHROMIUM_NAMES if shutil.which(n)), None)


def missing_browser() -> str | None:
    """Why the check cannot run here, or None when it can."""
    try:
        import playwright.sync_api  # noqa: F401  (optional: `pip install -e '.[screenshots]'`)
    except ImportError:
        return "playwright is not installed (pip install -e '.[screenshots]')"
    if find_chromium() is None:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            if not Path(pw.chromium.executable_path).is_file():
                return "no Chromium (apt-get install -y chromium, or playwright install chromium)"
    return None


# Measured in the page: each table's box against the viewport, the page's own horizontal overflow, the h2 order.
LAYOUT_JS = """() => {
  const width = document.documentElement.clientWidth;
  const tables = [...document.querySelectorAll('table')].map((t, i) => {
    const box = t.closest('.tablebox') || t;
    const r = t.getBoundingClientRect();
    return {index: i, right: Math.round(r.right), width: Math.round(r.width),
            box_scrolls: box.scrollWidth > box.clientWidth + 1,
            header: [...t.querySelectorAll('th')].map(th => th.textContent).slice(0, 4).join(' | ')};
  });
  return {viewport: width, page_scroll_width: document.documentElement.scrollWidth,
          h2: [...document.querySelectorAll('h2')].map(h => h.textContent),
          details: document.querySelectorAll('details').length, tables};
}"""


def measure(report: Path, out_dir: Path, width: int = 1400) -> dict:
    """Render `report` at `width` px, save report_top.png and report_full.png under out_dir, return the layout."""
    from playwright.sync_api import sync_playwright  # optional dependency, only this check needs it

    out_dir.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=find_chromium(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.goto(report.resolve().as_uri())
        layout = page.evaluate(LAYOUT_JS)
        page.screenshot(path=str(out_dir / "report_top.png"))
        page.screenshot(path=str(out_dir / "report_full.png"), full_page=True)
        browser.close()
    layout["checks"] = checks(layout)
    (out_dir / "layout.json").write_text(json.dumps(layout, indent=1))
    return layout


def checks(layout: dict) -> dict[str, bool]:
    width = layout["viewport"]
    h2 = layout["h2"]
    return {
        "no table wider than the page": all(t["right"] <= width and not t["box_scrolls"] for t in layout["tables"])
        and layout["page_scroll_width"] <= width,
        "findings first, then the comparison": len(h2) >= 2 and h2[0].startswith("Findings")
        and h2[1].startswith("Memorization by training method"),
        "maps folded per model": layout["details"] > 0,
    }


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 2
    report = Path(argv[0])
    out_dir = Path(argv[argv.index("--out") + 1]) if "--out" in argv else report.parent / "screenshots"
    width = int(argv[argv.index("--width") + 1]) if "--width" in argv else 1400
    why = missing_browser()
    if why:
        print(f"report_screenshots: {why}", file=sys.stderr)
        return 2
    layout = measure(report, out_dir, width)
    for t in layout["tables"]:
        if t["right"] > layout["viewport"] or t["box_scrolls"]:
            print(f"  table {t['index']} ({t['header']}): right edge {t['right']} px, scrolls: {t['box_scrolls']}")
    for name, ok in layout["checks"].items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
    print(f"{len(layout['tables'])} tables at {width} px; screenshots and layout.json in {out_dir}")
    return 0 if all(layout["checks"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
