"""Headless Chromium driven through its DevTools protocol over a pipe (`--remote-debugging-pipe`): no Python
dependency, no port, no download; Debian's `chromium` (.ci/run installs it). Used by the tests that look at
report.html as a reader's browser renders it (integration/test_report_in_chromium.py,
unit/harness/report/test_report_render.py).

The protocol: JSON messages ending in a NUL byte; Chromium reads commands from its fd 3 and writes replies and
events to its fd 4 (chromium's `--remote-debugging-pipe`). One page is opened in a target of its own and spoken to
through a flattened session (`Target.attachToTarget`, `flatten: true`).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
# Headless, nothing of Chromium's own that would reach a network or a profile outside the temporary one.
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
         "--disable-extensions", "--mute-audio", "--remote-debugging-pipe")
LOCAL_SCHEMES = ("file:", "data:", "about:")


def is_local(url: str) -> bool:
    """A URL that never leaves the machine: the file itself, an embedded data: URI, about:blank."""
    return url.startswith(LOCAL_SCHEMES)


WIDTH = 1400                    # the page width a report is read at (benchmarks/report_screenshots.py)
# report.html as measured in the page, after every <details> is opened (a folded table has no width until it is).
LAYOUT_JS = """(() => {
  document.querySelectorAll('details').forEach(d => d.open = true);
  const width = document.documentElement.clientWidth;
  const headers = t => [...t.querySelectorAll('tr:first-child th')].map(th => th.textContent);
  const tables = [...document.querySelectorAll('table')].map((t, i) => {
    const box = t.closest('.tablebox') || t;
    const r = t.getBoundingClientRect();
    return {index: i, right: Math.round(r.right), box_scrolls: box.scrollWidth > box.clientWidth + 1,
            header: headers(t).slice(0, 4).join(' | ')};
  });
  const anchors = [...document.querySelectorAll('a[href^="#"]')].map(a => a.getAttribute('href'));
  const firstTable = document.querySelector('table');
  const firstH2 = document.querySelector('h2');
  return {
    viewport: width, page_scroll_width: document.documentElement.scrollWidth, tables,
    first_h2: firstH2 ? firstH2.textContent : null,
    h2: [...document.querySelectorAll('h2')].map(h => h.textContent),
    details: document.querySelectorAll('details').length,
    first_table_headers: firstTable ? headers(firstTable) : [],
    first_table_under_first_h2: !!(firstTable && firstH2 &&
      (firstH2.compareDocumentPosition(firstTable) & Node.DOCUMENT_POSITION_FOLLOWING)),
    images: [...document.images].map(img => ({alt: img.alt, complete: img.complete, width: img.naturalWidth})),
    anchors: anchors.length,
    unresolved_anchors: anchors.filter(h => !document.getElementById(decodeURIComponent(h.slice(1)))),
    outside_references: [...document.querySelectorAll('[src],[href]')]
      .map(e => e.getAttribute('src') || e.getAttribute('href'))
      .filter(u => !u.startsWith('#') && !u.startsWith('data:')),
  };
})()"""


def report_problems(layout: dict, requested: list[str]) -> list[str]:
    """What a reader would see wrong, one line each (empty: the page is as it should be)."""
    out = []
    if not (layout["first_h2"] or "").startswith("Findings"):
        out.append(f"the first section is {layout['first_h2']!r}, not the findings")
    if not ({"finding", "status"} <= set(layout["first_table_headers"]) and layout["first_table_under_first_h2"]):
        out.append(f"the first table is not the findings table: {layout['first_table_headers']}")
    if not layout["images"]:
        out.append("no figure in the report")
    out += [f"figure {img['alt']!r} did not load (naturalWidth 0)" for img in layout["images"] if img["width"] <= 0]
    out += [f"request leaves the file: {url[:120]}" for url in requested if not is_local(url)]
    out += [f"reference to outside the file: {ref[:120]}" for ref in layout["outside_references"]]
    if not layout["anchors"]:
        out.append("no in-page link (the contents)")
    out += [f"link {href} lands on no element" for href in layout["unresolved_anchors"]]
    out += [f"table {t['index']} ({t['header']}) is wider than the page: right edge {t['right']} px of "
            f"{layout['viewport']}, scrolls in its box: {t['box_scrolls']}"
            for t in layout["tables"] if t["right"] > layout["viewport"] or t["box_scrolls"]]
    if layout["page_scroll_width"] > layout["viewport"]:
        out.append(f"the page scrolls sideways: {layout['page_scroll_width']} px of {layout['viewport']}")
    return out


def find_chromium() -> str | None:
    return next((shutil.which(n) for n in CHROMIUM_NAMES if shutil.which(n)), None)


def chromium_or_skip() -> str:
    """The Chromium to run; outside CI its absence skips the test, in CI (CI=true, or .ci/run's
    MEMLENS_REQUIRE_CHROMIUM=1) it fails it: CI installs it."""
    import pytest  # only the tests that use a browser need pytest's skip and fail

    found = find_chromium()
    if found:
        return found
    if os.environ.get("CI", "").lower() == "true" or os.environ.get("MEMLENS_REQUIRE_CHROMIUM") == "1":
        pytest.fail("no Chromium on PATH, and CI requires it: .ci/run installs Debian's chromium "
                    "(apt-get install chromium)")
    pytest.skip("no Chromium on PATH (apt-get install chromium; .ci/run installs it in CI)")


class ChromiumError(RuntimeError):
    pass


class Chromium:
    """One headless Chromium process and one page in it; `with Chromium(exe) as page: page.open(url)`."""

    def __init__(self, executable: str, width: int = 1400, height: int = 900, timeout: float = 60.0):
        self.executable, self.width, self.height, self.timeout = executable, width, height, timeout
        self.events: list[dict] = []
        self._next_id = 0
        self._buffer = b""

    # ------------------------------------------------------------------------------------------ process
    def __enter__(self) -> Chromium:
        self._profile = tempfile.TemporaryDirectory(prefix="memlens-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # The child's ends moved above 3 and 4, so that placing them on 3 and 4 cannot overwrite one with the other.
        child_r, child_w = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_child_r, from_child_w))

        def child_pipes():             # in the child, before exec: commands on fd 3, replies on fd 4
            os.dup2(child_r, 3)        # dup2 clears close-on-exec on the copy
            os.dup2(child_w, 4)

        # pass_fds=(3, 4): kept open through exec (subprocess closes every other descriptor after preexec_fn); both
        # are open in this process while it forks, since the pipes just made took the lowest free descriptors.
        self.process = subprocess.Popen(
            [self.executable, *FLAGS, f"--user-data-dir={self._profile.name}", f"--window-size={self.width},{self.height}",
             "about:blank"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=child_pipes, close_fds=True, pass_fds=(3, 4))
        for fd in (to_child_r, from_child_w, child_r, child_w):
            os.close(fd)
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)["sessionId"]
        self.send("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height,
                                                         "deviceScaleFactor": 1, "mobile": False})
        self.send("Network.enable")
        self.send("Page.enable")
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.send("Browser.close", session=False)
        except (ChromiumError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()                       # our own child, by its handle
            self.process.wait()
        for fd in (self._to_child, self._from_child):
            os.close(fd)
        if self.process.stderr:
            self.process.stderr.close()
        self._profile.cleanup()

    # ------------------------------------------------------------------------------------------ protocol
    def send(self, method: str, params: dict | None = None, session: bool = True) -> dict:
        """Send one command and return its result (events that arrive meanwhile are kept in `events`)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise ChromiumError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str) -> dict:
        """The first event `method` of this page (already received or the next to arrive)."""
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self._read()
            self.events.append(event)
            if event.get("method") == method:
                return event

    def _read(self) -> dict:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._from_child], [], [], max(left, 0))
            if not ready:
                raise ChromiumError(f"no reply from Chromium within {self.timeout} s")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                err = self.process.stderr.read().decode(errors="replace")[-2000:] if self.process.stderr else ""
                raise ChromiumError(f"Chromium closed its pipe (exit {self.process.poll()}): {err}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    # ------------------------------------------------------------------------------------------ the page
    def open(self, url: str) -> None:
        """Navigate and wait for the load event (every image of the document loaded or failed by then)."""
        self.send("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """A JavaScript expression's value (JSON), evaluated in the page; awaits a promise."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            raise ChromiumError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def requested_urls(self) -> list[str]:
        """Every URL the page asked for (the document, its images, scripts, fonts...), in order."""
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        """A PNG of the first screen, or of the whole page."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params |= {"captureBeyondViewport": True,
                       "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", params)["data"]))
        return path
