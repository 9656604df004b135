"""Look at a page in a real headless Chromium: what renders, which images load, which links resolve.

Chromium is found through `$GPOLIB_CHROMIUM` (its executable) or on PATH under one of `NAMES`; `make test`
installs Debian's `chromium` where apt-get works without a password, and otherwise says how to get it.
It runs headless with a fresh profile and is
driven over the DevTools protocol (a websocket, `websocket-client`): navigate, wait for the load event
(images included), evaluate expressions that list the page's images and links (`inventory`) and where its parts sit
(`layout`), take a screenshot.

    python -m gpolib.workbook.browser reports/index.html [SHOT.png]

(README's screenshot is taken by `gpolib.workbook.screenshot`, which also marks it with the scoreboard it shows.)
"""
from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlparse

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--remote-debugging-port=0")
"""how Chromium is started: headless, no sandbox (containers run as root), nothing fetched in the background"""
OFFLINE = ("--no-proxy-server", "--host-resolver-rules=MAP * ~NOTFOUND")
"""added for a page read without a network: no proxy, and no host name resolves"""
NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
ENV = "GPOLIB_CHROMIUM"
"""the Chromium (or Chrome) executable to use, a path or a name on PATH; unset: the first of NAMES on PATH"""
HOW_TO_GET = (f"install Chromium (Debian/Ubuntu: apt-get install chromium; macOS: brew install --cask chromium) "
              f"or set {ENV} to its executable")

_INVENTORY = """JSON.stringify({
  title: document.title,
  rows: document.querySelectorAll('.board details.claim').length,
  images: Array.from(document.images).map(i => ({src: i.src, width: i.naturalWidth, ok: i.complete && i.naturalWidth > 0})),
  links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href)})"""


_LAYOUT = """JSON.stringify({
  width: document.documentElement.clientWidth, scroll_width: document.documentElement.scrollWidth,
  phenomena: Array.from(document.querySelectorAll('.phenomenon')).map(f => ({id: f.id,
    bottom: f.getBoundingClientRect().bottom + scrollY, images: f.querySelectorAll('img').length})),
  board_top: (document.querySelector('.board') || document.body).getBoundingClientRect().top + scrollY,
  board_bottom: (document.querySelector('.board') || document.body).getBoundingClientRect().bottom + scrollY,
  line: parseFloat(getComputedStyle(document.querySelector('.board summary span') || document.body).lineHeight),
  rows: Array.from(document.querySelectorAll('.board details.claim')).map(d => ({id: d.id, open: d.open,
    height: d.getBoundingClientRect().height,
    clipped: Array.from(d.querySelectorAll('summary > span')).filter(s => s.scrollWidth > s.clientWidth + 1 ||
      s.scrollHeight > s.clientHeight + 1).length})),
  scale: Array.from(document.querySelectorAll('.phenomenon img, .figures img')).map(i => ({
    where: i.closest('.phenomenon') ? 'card' : 'gallery', name: i.alt,
    shown: i.naturalWidth ? i.getBoundingClientRect().width / i.naturalWidth : 0}))})"""


_MATHS = """(window.MathJax && MathJax.startup ? MathJax.startup.promise : Promise.resolve()).then(() =>
  JSON.stringify({typeset: document.querySelectorAll('mjx-container').length,
    errors: document.querySelectorAll('mjx-merror, [data-mml-node="merror"]').length,
    raw: Array.from(document.querySelectorAll('.jp-RenderedMarkdown'))
      .filter(e => /\\$[^$\\s][^$]*\\$/.test(e.innerText)).length}))"""


def find_chromium() -> str:
    """Path of a Chromium executable: `$GPOLIB_CHROMIUM`, else the first of NAMES on PATH; raises
    FileNotFoundError saying how to get one."""
    given = os.environ.get(ENV)
    if given:
        found = shutil.which(given)
        if found is None:
            raise FileNotFoundError(f"{ENV}={given} is not an executable; {HOW_TO_GET}")
        return found
    for name in NAMES:
        if shutil.which(name):
            return shutil.which(name)
    raise FileNotFoundError(f"no Chromium on PATH (looked for {', '.join(NAMES)}); {HOW_TO_GET}")


def can_install() -> bool:
    """True where `make test` can install Chromium itself: apt-get on PATH, run as root or through a sudo
    that asks no password."""
    if shutil.which("apt-get") is None:
        return False
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return True
    if shutil.which("sudo") is None:
        return False
    return subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0


class Page:
    """One tab, spoken to over the DevTools protocol."""

    def __init__(self, ws):
        self.ws, self.next_id, self.events = ws, 0, []

    def call(self, method: str, **params) -> dict:
        """Send a command and return its result; events that arrive meanwhile are kept in `events`."""
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def goto(self, url: str, timeout: float = 60.0) -> None:
        """Navigate and wait for the load event (every image loaded or failed)."""
        self.events.clear()
        self.call("Page.enable")
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not finish loading in {timeout} s")
            self.events.append(json.loads(self.ws.recv()))

    def evaluate(self, expression: str):
        """Value of a JavaScript expression in the page."""
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def screenshot(self, out: Path | str, height: float | None = None) -> Path:
        """PNG of the viewport, or of the page's top `height` CSS pixels (beyond the viewport), written to `out`."""
        clip = {} if height is None else {"captureBeyondViewport": True, "clip": {
            "x": 0, "y": 0, "width": self.evaluate("document.documentElement.clientWidth"), "height": height, "scale": 1}}
        data = self.call("Page.captureScreenshot", format="png", **clip)["data"]
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(data))
        return out


def _devtools_url(profile_dir: Path, proc, timeout: float) -> str:
    """The websocket of the first tab, once Chromium has written its DevToolsActivePort file."""
    port_file, deadline = profile_dir / "DevToolsActivePort", time.monotonic() + timeout
    while not port_file.exists() or not port_file.read_text().strip():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"Chromium did not start (exit code {proc.poll()})")
        time.sleep(0.1)
    port = port_file.read_text().split()[0]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as r:
        tabs = [t for t in json.load(r) if t.get("type") == "page"]
    return tabs[0]["webSocketDebuggerUrl"]


@contextlib.contextmanager
def open_page(width: int = 1280, height: int = 1000, timeout: float = 60.0, offline: bool = False):
    """A headless Chromium with a fresh profile and one tab of width x height (no network: `offline`, OFFLINE);
    closed on exit."""
    import websocket  # websocket-client

    profile_dir = Path(tempfile.mkdtemp(prefix="gpolib-chromium-"))
    proc = subprocess.Popen([find_chromium(), *FLAGS, *(OFFLINE if offline else ()), f"--user-data-dir={profile_dir}",
                             f"--window-size={width},{height}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ws = None
    try:
        ws = websocket.create_connection(_devtools_url(profile_dir, proc, timeout), timeout=timeout,
                                         suppress_origin=True)
        yield Page(ws)
    finally:
        if ws is not None:
            ws.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile_dir, ignore_errors=True)


def inventory(page: Page) -> dict:
    """title, number of scoreboard rows, images (src, naturalWidth, ok) and link targets of the loaded page."""
    return json.loads(page.evaluate(_INVENTORY))


def layout(page: Page) -> dict:
    """Where things sit on the loaded page (CSS pixels): viewport and scroll width, each phenomenon's bottom and
    image count, the scoreboard's top and bottom, its line height, each scoreboard line's height, state and count
    of cells whose text is cut off (`clipped`), and each figure's shown width over its natural width (`scale`)."""
    return json.loads(page.evaluate(_LAYOUT))


def maths(page: Page, html: Path | str) -> dict:
    """Open a local page and wait for its MathJax (if any) to finish: how many formulas it typeset, how many of them
    are TeX errors, how many rendered Markdown cells still show raw `$...$`, and the http(s) URLs it requested."""
    page.call("Network.enable")
    page.goto(Path(html).resolve().as_uri())
    result = page.call("Runtime.evaluate", expression=_MATHS, awaitPromise=True, returnByValue=True)["result"]
    urls = [e["params"]["request"]["url"] for e in page.events if e.get("method") == "Network.requestWillBeSent"]
    return {**json.loads(result["value"]), "requests": [u for u in urls if urlparse(u).scheme in ("http", "https")]}


def _has_id(file: Path, fragment: str) -> bool:
    """True if the HTML file has an element whose id is the fragment (as written, or percent-decoded)."""
    text = file.read_text(encoding="utf-8", errors="replace")
    return any(f'id="{f}"' in text for f in {fragment, unquote(fragment)})


def problems(inv: dict) -> list:
    """Why the page is broken (empty when it is whole): images that did not load, links to missing files,
    to a section the target does not have, or outside the local folder (data URIs are part of the file)."""
    found = [f"image did not load: {i['src'][:60] if i['src'].startswith('data:') else i['src']}"
             for i in inv["images"] if not i["ok"]]
    for href in inv["links"]:
        url = urlparse(href)
        target = Path(unquote(url.path))
        if url.scheme != "file":
            found.append(f"link leaves the local folder: {href}")
        elif not target.is_file():
            found.append(f"broken link: {href}")
        elif url.fragment and not _has_id(target, url.fragment):
            found.append(f"link to a missing section: {href}")
    return found


def check(html: Path | str, screenshot: Path | str | None = None) -> tuple:
    """Open a local HTML file; returns (inventory, problems) and writes a screenshot if asked."""
    with open_page() as page:
        page.goto(Path(html).resolve().as_uri())
        inv = inventory(page)
        if screenshot is not None:
            page.screenshot(screenshot)
    return inv, problems(inv)


def main(argv=None) -> int:
    """`python -m gpolib.workbook.browser PAGE.html [SCREENSHOT.png]`: exit 1 if the page has a problem."""
    args = sys.argv[1:] if argv is None else argv
    inv, found = check(args[0], args[1] if len(args) > 1 else None)
    print(f"{args[0]}: {len(inv['images'])} images, {len(inv['links'])} links, {inv['rows']} claims")
    for msg in found:
        print(msg, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
