"""The shared smoke run's report.html as a reader's browser shows it: Debian's headless Chromium (tests/chromium.py,
its DevTools protocol over a pipe) at 1400 px. The findings table comes first, every figure has loaded, nothing is
requested from outside the file, every in-page link lands on an element, and no table is wider than the page (with
every folded section opened). Skipped only where Chromium is absent outside CI; with CI=true its absence fails.
A failing run keeps its screenshots (the first screen and the whole page) and the measured layout; the failure
names their folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.chromium import LAYOUT_JS, WIDTH, Chromium, chromium_or_skip, report_problems


def test_the_smoke_reports_html_reads_right_in_chromium(smoke, tmp_path):
    chromium = chromium_or_skip()
    report = tmp_path / "report.html"          # a copy: the shared run is never touched
    shutil.copyfile(smoke[0] / "report" / "report.html", report)
    shots = tmp_path / "screenshots"
    with Chromium(chromium, width=WIDTH) as page:
        page.open(report.resolve().as_uri())
        layout = page.evaluate(LAYOUT_JS)
        found = report_problems(layout, page.requested_urls())
        page.screenshot(shots / "report_top.png")
        if found:                              # kept for the reader of a failing run
            page.screenshot(shots / "report_full.png", full_page=True)
            (shots / "layout.json").write_text(json.dumps(layout, indent=1))
    assert len(layout["tables"]) > 3 and len(layout["images"]) > 3, layout
    assert (shots / "report_top.png").stat().st_size > 10_000
    assert not found, "\n".join(found) + f"\nscreenshots and layout.json: {shots}"


def test_the_check_sees_a_broken_figure_a_dead_link_an_outside_request_and_a_wide_table(smoke, tmp_path):
    """The same check on a damaged copy of the report: each fault is named (the check can fail)."""
    chromium = chromium_or_skip()
    html = (smoke[0] / "report" / "report.html").read_text(encoding="utf-8")
    broken = html.replace("src='data:image/png;base64,", "src='data:image/png;base64,AAAA", 1)
    broken = broken.replace("</body>", "<a href='#nowhere'>x</a><img alt='outside' src='http://127.0.0.1:9/x.png'>"
                                       "<table><tr><th>" + "w" * 3000 + "</th></tr></table></body>", 1)
    report = Path(tmp_path / "report.html")
    report.write_text(broken, encoding="utf-8")
    with Chromium(chromium, width=WIDTH) as page:
        page.open(report.resolve().as_uri())
        found = report_problems(page.evaluate(LAYOUT_JS), page.requested_urls())
    text = "\n".join(found)
    assert "did not load" in text and "link #nowhere lands on no element" in text, text
    assert "request leaves the file: http://127.0.0.1:9/x.png" in text, text
    assert "wider than the page" in text or "scrolls sideways" in text, text
