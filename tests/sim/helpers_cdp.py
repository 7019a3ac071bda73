"""Open a local HTML file in headless Chromium over the Chrome DevTools Protocol (tests only).

`open_page(path, work_dir)` launches `chromium --headless=new --remote-debugging-port=0` with a fresh
profile in work_dir, reads the port from DevToolsActivePort, opens a page target, enables Runtime, Log,
Network and Page, navigates to the file:// URL and waits for the load event (plus a short settle time).
It returns a PageVisit: console errors, uncaught exceptions, log errors, every network request URL, a
PNG screenshot, and an `evaluate` helper while the browser is still open (use it as a context manager).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_chromium() -> str | None:
    for name in BROWSERS:
        exe = shutil.which(name)
        if exe:
            return exe
    return None


@dataclass
class PageVisit:
    url: str
    console_errors: list = field(default_factory=list)
    exceptions: list = field(default_factory=list)
    log_errors: list = field(default_factory=list)
    requests: list = field(default_factory=list)
    screenshot: bytes = b""


class _Conn:
    def __init__(self, ws_url: str, timeout_s: float):
        import websocket
        self.ws = websocket.create_connection(ws_url, timeout=timeout_s, suppress_origin=True)
        self.timeout_s = timeout_s
        self.next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, params: dict | None = None) -> dict:
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params or {}}))
        # the whole timeout for the answer: pump() leaves the socket with the rest of its own window (as
        # little as 0.05 s), after which a slow answer (a screenshot, an evaluate on a loaded machine) read
        # as a stall
        self.ws.settimeout(self.timeout_s)
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def pump(self, until_method: str | None, timeout_s: float) -> None:
        """Collect events until `until_method` arrives (or for timeout_s when None)."""
        import websocket
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            self.ws.settimeout(max(0.05, end - time.monotonic()))
            try:
                msg = json.loads(self.ws.recv())
            except websocket.WebSocketTimeoutException:
                break
            if "method" in msg:
                self.events.append(msg)
                if msg["method"] == until_method:
                    return
        if until_method is not None:
            raise TimeoutError(f"no {until_method} within {timeout_s} s")

    def close(self) -> None:
        self.ws.close()


class Browser:
    """A headless Chromium process with one page, for one visit."""

    def __init__(self, exe: str, work_dir: Path, timeout_s: float = 60.0):
        self.timeout_s = timeout_s
        profile = work_dir / "chromium-profile"
        profile.mkdir(parents=True, exist_ok=True)
        port_file = profile / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)        # a stale file of an earlier browser names a dead port
        args = [exe, "--headless=new", "--remote-debugging-port=0", f"--user-data-dir={profile}",
                "--no-first-run", "--no-default-browser-check", "--disable-gpu", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-default-apps", "--mute-audio", "--hide-scrollbars", "about:blank"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.insert(1, "--no-sandbox")     # Chromium refuses to run as root with its sandbox
        # HOME and XDG dirs inside work_dir: crash-report and dconf files must not land in the user's home
        home = work_dir / "chromium-home"
        env = dict(os.environ, HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
                   XDG_CACHE_HOME=str(home / ".cache"))
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        end = time.monotonic() + timeout_s
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if self.proc.poll() is not None or time.monotonic() > end:
                self.close()
                raise RuntimeError("chromium did not start its DevTools endpoint")
            time.sleep(0.05)
        port, browser_path = port_file.read_text().splitlines()[:2]
        try:
            self.browser = _Conn(f"ws://127.0.0.1:{port}{browser_path}", timeout_s)
            target = self.browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            self.page = _Conn(f"ws://127.0.0.1:{port}/devtools/page/{target}", timeout_s)
        except BaseException:
            self.close()           # never leave the browser running
            raise

    def visit(self, path: Path, width: int = 1280, height: int = 1800) -> PageVisit:
        p = self.page
        for domain in ("Runtime", "Log", "Network", "Page"):
            p.call(f"{domain}.enable")
        p.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                      "mobile": False})
        url = path.resolve().as_uri()
        p.events.clear()
        p.call("Page.navigate", {"url": url})
        p.pump("Page.loadEventFired", self.timeout_s)
        p.pump(None, 0.5)          # late console messages or requests
        v = PageVisit(url)
        for ev in p.events:
            m, prm = ev["method"], ev.get("params", {})
            if m == "Runtime.consoleAPICalled" and prm.get("type") in ("error", "assert"):
                v.console_errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in prm["args"]))
            elif m == "Runtime.exceptionThrown":
                v.exceptions.append(prm["exceptionDetails"].get("text", "") + " " +
                                    str(prm["exceptionDetails"].get("exception", {}).get("description", "")))
            elif m == "Log.entryAdded" and prm["entry"].get("level") == "error":
                v.log_errors.append(prm["entry"].get("text", ""))
            elif m == "Network.requestWillBeSent":
                v.requests.append(prm["request"]["url"])
        shot = p.call("Page.captureScreenshot", {"format": "png"})
        v.screenshot = base64.b64decode(shot["data"])
        return v

    def evaluate(self, expression: str):
        r = self.page.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"evaluate: {r['exceptionDetails']}")
        return r["result"].get("value")

    def close(self) -> None:
        for c in ("page", "browser"):
            conn = getattr(self, c, None)
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # noqa: BLE001 - closing a dead socket during teardown
                    pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
