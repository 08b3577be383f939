"""A small headless-Chromium driver over the DevTools protocol, for the browser tests.

Debian's ``chromium`` (installed by ``.ci/run`` when missing) is started with a fresh profile and every
network feature that would phone home switched off; pages are opened through the DevTools protocol
(websocket-client, already a dependency of jupyter_server), so nothing is downloaded at run time. A page
visit records what a reader's browser would complain about (console errors, uncaught exceptions, failed
loads) and can evaluate JavaScript in the page or write a full-page screenshot.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import websocket

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class Visit:
    """What one page load left behind."""

    url: str
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, failed requests
    loaded: bool = False


class Chromium:
    """One headless Chromium process; use as a context manager."""

    def __init__(self, binary: str | None = None, width: int = 1280, height: int = 900, timeout: float = 30.0):
        self.binary = binary or find_chromium()
        if self.binary is None:
            raise FileNotFoundError("no chromium on PATH (Debian: apt-get install chromium)")
        self.width, self.height, self.timeout = width, height, timeout
        self._ids = itertools.count(1)
        self._events: list[dict] = []

    def __enter__(self) -> "Chromium":
        self._profile = tempfile.mkdtemp(prefix="heavytail-chromium-")
        self._proc = subprocess.Popen(
            [self.binary, *CHROMIUM_FLAGS, f"--user-data-dir={self._profile}", "--remote-debugging-port=0",
             f"--window-size={self.width},{self.height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = self._devtools_url()
        self._ws = websocket.create_connection(url, timeout=self.timeout, suppress_origin=True)
        target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self._call(f"{domain}.enable", session=True)
        self._call("Emulation.setDeviceMetricsOverride",
                   {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False}, session=True)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._ws.close()
        finally:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            shutil.rmtree(self._profile, ignore_errors=True)

    def _devtools_url(self) -> str:
        # Chromium prints the browser's websocket address on stderr once it listens.
        deadline = time.monotonic() + self.timeout
        seen = []
        while time.monotonic() < deadline:
            line = self._proc.stderr.readline()
            if not line:
                if self._proc.poll() is not None:
                    break
                continue
            seen.append(line)
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                return m.group(1)
        raise RuntimeError("chromium did not start its DevTools endpoint:\n" + "".join(seen[-20:]))

    def _call(self, method: str, params: dict | None = None, session: bool = False) -> dict:
        msg_id = next(self._ids)
        msg = {"id": msg_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self._session
        self._ws.send(json.dumps(msg))
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            reply = json.loads(self._ws.recv())
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)
        raise TimeoutError(f"no reply to {method} within {self.timeout} s")

    def _drain(self, seconds: float) -> None:
        """Collect events for ``seconds`` (late console errors, image loads)."""
        self._ws.settimeout(0.1)
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                try:
                    self._events.append(json.loads(self._ws.recv()))
                except websocket.WebSocketTimeoutException:
                    pass
        finally:
            self._ws.settimeout(self.timeout)

    def open(self, url: str, settle: float = 0.5) -> Visit:
        """Load ``url`` and wait for its load event; returns the errors a reader's console would show."""
        self._events.clear()
        visit = Visit(url=url)
        self._call("Page.navigate", {"url": url}, session=True)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline and not visit.loaded:
            self._drain(0.2)
            visit.loaded = any(e.get("method") == "Page.loadEventFired" for e in self._events)
        self._drain(settle)
        for e in self._events:
            method, p = e.get("method"), e.get("params", {})
            if method == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                visit.errors.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
            elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                visit.errors.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                          for a in p.get("args", [])))
            elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                entry = p["entry"]
                visit.errors.append(f"log: {entry.get('text')} {entry.get('url', '')}".strip())
            elif method == "Network.loadingFailed" and not p.get("canceled"):
                visit.errors.append(f"failed request: {p.get('errorText')} ({p.get('type')})")
        if not visit.loaded:
            visit.errors.append(f"no load event within {self.timeout} s")
        return visit

    def evaluate(self, expression: str):
        """The JSON value of a JavaScript expression in the current page (promises are awaited)."""
        result = self._call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                 "awaitPromise": True}, session=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float) -> bool:
        """Poll a JavaScript condition until it is truthy or ``timeout`` seconds pass."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.evaluate(expression):
                return True
            time.sleep(0.25)
        return False

    def screenshot(self, path: os.PathLike, full_page: bool = True) -> Path:
        """Write a PNG of the current page (the whole scroll height when ``full_page``)."""
        params: dict = {"format": "png"}
        if full_page:
            size = self._call("Page.getLayoutMetrics", session=True)["cssContentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": self.width, "height": min(size["height"], 16000), "scale": 1})
        data = self._call("Page.captureScreenshot", params, session=True)["data"]
        path = Path(path)
        path.write_bytes(base64.b64decode(data))
        return path
