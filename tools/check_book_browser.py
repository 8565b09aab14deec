"""Check the built book in a real headless browser (Debian's chromium), as a reader would see it.

    python tools/check_book_browser.py _build/html --screenshots /tmp/book-screenshots

Serves the built HTML on 127.0.0.1, opens each page in headless Chromium through the DevTools
protocol, waits for MathJax to finish, and checks that:

- every image of the page loaded (``naturalWidth > 0``), and chapter pages have at least one figure;
- every formula was typeset by MathJax without a MathJax error and shows no TeX as written (a backslash,
  as ``\\_`` inside ``\\text{}`` gives), and chapter pages have formulas;
- every Markdown table that a cell displays is a table, not its pipes;
- every traceback belongs to a cell tagged ``raises-exception`` and is a ``NotImplementedError``
  (the test cells of blank exercises), so no other cell failed;
- nothing failed to load, and nothing was requested from outside 127.0.0.1 (the book works offline).

Screenshots of each page (top, first formula, first figure) go to ``--screenshots``. Exit status 0
when every page passes; the problems are printed otherwise. Needs ``chromium`` (``apt-get install
chromium``) and the ``websocket-client`` package (installed with Jupyter).
"""

import argparse
import base64
import functools
import http.server
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import websocket

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
PAGE_TIMEOUT = 60.0  # seconds to load a page and typeset its math

# Runs in the page once it has loaded: waits for MathJax and the images, then reports what it sees.
INSPECT_PAGE = """
(async () => {
  const mathjaxLoaded = !!(window.MathJax && MathJax.startup && MathJax.startup.promise);
  if (mathjaxLoaded) { await MathJax.startup.promise; }
  const content = document.querySelector('main') || document.body;
  const images = Array.from(content.querySelectorAll('img'));
  await Promise.all(images.map(img => img.complete ? null
      : new Promise(done => { img.addEventListener('load', done); img.addEventListener('error', done); })));
  const formulas = Array.from(content.querySelectorAll('.math'));
  return {
    mathjaxLoaded: mathjaxLoaded,
    formulas: formulas.length,
    typeset: formulas.filter(element => element.querySelector('mjx-container')).length,
    mathErrors: content.querySelectorAll('mjx-merror').length,
    images: images.map(img => ({src: img.getAttribute('src'), width: img.naturalWidth})),
    figures: images.filter(img => img.getAttribute('src').includes('_images/')).length,
    // Formulas whose typeset text still shows a backslash: TeX that MathJax showed as written (\\_ in \\text{}).
    texAsWritten: Array.from(content.querySelectorAll('mjx-assistive-mml'))
        .filter(element => element.textContent.includes('\\\\')).map(element => element.textContent.trim()),
    // Cell outputs that show a Markdown table as its pipes instead of a table.
    pipeTables: Array.from(content.querySelectorAll('.cell_output, .output'))
        .filter(element => /^\\s*\\|.*\\|\\s*$/m.test(element.innerText)
                           && /\\|\\s*:?-{3,}/.test(element.innerText)).length,
    tracebacks: Array.from(content.querySelectorAll('.output.traceback')).map(element => ({
      intended: !!element.closest('.tag_raises-exception'),
      text: element.innerText.trim().split('\\n').slice(-1)[0],
    })),
  };
})()
"""


def find_chromium() -> str | None:
    """The path of a Chromium (or Chrome) executable, or None."""
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


class Browser:
    """Headless Chromium driven through the DevTools protocol, one page at a time."""

    def __init__(self, executable: str, width: int = 1280, height: int = 900):
        self.profile = tempfile.mkdtemp(prefix="book-browser-")
        self.process = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--remote-debugging-port=0", "--remote-allow-origins=*",
             f"--user-data-dir={self.profile}", f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        port = self._debugging_port()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
            page = next(target for target in json.load(response) if target["type"] == "page")
        self.socket = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=PAGE_TIMEOUT,
                                                  suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []
        for domain in ("Page", "Network", "Runtime"):
            self.call(f"{domain}.enable")

    def _debugging_port(self) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if match := re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line):
                return int(match.group(1))
            if not line and self.process.poll() is not None:
                break
        raise RuntimeError("chromium did not start (no 'DevTools listening' line on its standard error)")

    def call(self, method: str, **params) -> dict:
        """Send a DevTools command and return its result; events that arrive meanwhile are kept."""
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error'].get('message')}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for_event(self, method: str, timeout: float = PAGE_TIMEOUT) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events:
                if event.get("method") == method:
                    self.events.remove(event)
                    return event
            self.events.append(json.loads(self.socket.recv()))
        raise TimeoutError(f"no {method} within {timeout} s")

    def open(self, url: str) -> None:
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_for_event("Page.loadEventFired")

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"script failed in the page: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def screenshot(self, path: Path, scroll_to: str | None = None) -> bool:
        """Save a PNG of the viewport, scrolled to the first element matching ``scroll_to``."""
        if scroll_to is not None:
            found = self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(scroll_to)}); "
                                  "if (e) { e.scrollIntoView({block: 'center'}); } return !!e; })()")
            if not found:
                return False
            time.sleep(0.3)
        else:
            self.evaluate("window.scrollTo(0, 0)")
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return True

    def close(self) -> None:
        self.socket.close()
        self.process.terminate()
        self.process.wait(timeout=10)
        shutil.rmtree(self.profile, ignore_errors=True)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(directory: Path) -> http.server.ThreadingHTTPServer:
    """Serve ``directory`` on 127.0.0.1 (a free port) in a background thread."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_QuietHandler, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def page_problems(report: dict, network_failures: list[str], is_chapter: bool) -> list[str]:
    """What is wrong with a page, from what :data:`INSPECT_PAGE` and the network saw."""
    problems = [f"failed to load {failure}" for failure in network_failures]
    problems += [f"image {image['src']} did not load" for image in report["images"] if image["width"] == 0]
    if report["formulas"] and not report["mathjaxLoaded"]:
        problems.append("MathJax did not load")
    elif report["typeset"] < report["formulas"]:
        problems.append(f"only {report['typeset']} of {report['formulas']} formulas were typeset")
    if report["mathErrors"]:
        problems.append(f"{report['mathErrors']} formulas have MathJax errors")
    problems += [f"a formula shows its TeX: {text}" for text in report["texAsWritten"]]
    if report["pipeTables"]:
        problems.append(f"{report['pipeTables']} outputs show a Markdown table as text")
    for traceback in report["tracebacks"]:
        if not traceback["intended"] or "NotImplementedError" not in traceback["text"]:
            problems.append(f"unexpected traceback: {traceback['text']}")
    if is_chapter and not report["figures"]:
        problems.append("no figure")
    if is_chapter and not report["formulas"]:
        problems.append("no formula")
    return problems


def _network_failures(events: list[dict], origin: str) -> list[str]:
    requested = {e["params"]["requestId"]: e["params"]["request"]["url"]
                 for e in events if e.get("method") == "Network.requestWillBeSent"}
    failures = [f"{url} (outside the book: the book must work offline)" for url in requested.values()
                if not url.startswith((origin, "data:", "about:", "blob:"))]
    for event in events:
        if (event.get("method") == "Network.loadingFailed"
                and requested.get(event["params"]["requestId"], "").startswith(origin)):
            failures.append(f"{requested[event['params']['requestId']]} ({event['params'].get('errorText')})")
        if (event.get("method") == "Network.responseReceived" and event["params"]["response"]["status"] >= 400
                and not event["params"]["response"]["url"].endswith("/favicon.ico")):  # the browser's own request
            failures.append(f"{event['params']['response']['url']} (HTTP {event['params']['response']['status']})")
    return failures


def is_chapter_page(page: str) -> bool:
    """Whether ``page`` (relative to the book) is a chapter's: ``chapters/NN_topic/NN_topic.html``, or in
    a translated book ``chapters/LANG/NN_topic/NN_topic.html`` (not its ``chapters/LANG/intro.html``)."""
    path = Path(page)
    return path.parts[0] == "chapters" and path.stem == path.parent.name


def check_book(html_dir: Path, screenshots: Path | None = None, pages: list[str] | None = None,
               chromium: str | None = None, log=print) -> dict[str, list[str]]:
    """Open each page (default: every chapter page and the top-level pages); return their problems."""
    html_dir = Path(html_dir)
    executable = chromium or find_chromium()
    if executable is None:
        raise RuntimeError("no chromium found: install it with `apt-get install chromium`")
    if pages is None:
        pages = sorted(str(p.relative_to(html_dir)) for p in html_dir.glob("chapters/**/*.html"))
        pages += sorted(p.name for p in html_dir.glob("*.html")
                        if p.name not in ("genindex.html", "search.html", "index.html"))
    if screenshots is not None:
        Path(screenshots).mkdir(parents=True, exist_ok=True)
    server, browser = serve(html_dir), Browser(executable)
    origin = f"http://127.0.0.1:{server.server_address[1]}/"
    results = {}
    try:
        for page in pages:
            browser.open(origin + page)
            report = browser.evaluate(INSPECT_PAGE)
            time.sleep(0.5)  # let late network events (fonts) arrive
            browser.evaluate("1")
            problems = page_problems(report, _network_failures(browser.events, origin), is_chapter_page(page))
            results[page] = problems
            if screenshots is not None:
                stem = Path(screenshots) / page.removesuffix(".html").replace("/", "__")
                browser.screenshot(stem.with_name(stem.name + ".png"))
                browser.screenshot(stem.with_name(stem.name + "-math.png"), "div.math")
                browser.screenshot(stem.with_name(stem.name + "-figure.png"), "main img[src*='_images/']")
            log(f"{page}: {report['typeset']}/{report['formulas']} formulas typeset, {report['figures']} figures, "
                f"{len(report['tracebacks'])} tracebacks: {'ok' if not problems else '; '.join(problems)}")
    finally:
        browser.close()
        server.shutdown()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("html_dir", type=Path, help="the built book, e.g. _build/html")
    parser.add_argument("--screenshots", type=Path, help="folder for the screenshots")
    parser.add_argument("--page", action="append", dest="pages",
                        help="a page to check, relative to html_dir (repeatable)")
    parser.add_argument("--chromium", help="the browser executable (default: chromium from PATH)")
    args = parser.parse_args(argv)
    if not (args.html_dir / "index.html").exists():
        parser.error(f"{args.html_dir} is not a built book (no index.html): run `jupyter-book build .` first")
    results = check_book(args.html_dir, args.screenshots, args.pages, args.chromium)
    failed = [page for page, problems in results.items() if problems]
    print(f"{len(results) - len(failed)} of {len(results)} pages pass")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
