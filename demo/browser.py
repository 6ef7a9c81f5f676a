"""Headless Chromium over the DevTools protocol: open a page, read its DOM, collect console errors, screenshot.

Used by the page tests (``tests/observe/``) and by ``python -m demo --screenshots DIR``. One browser process
per :class:`Chromium` (fresh ``--user-data-dir``, no network beyond what the page loads), driven through its
websocket (aiohttp, already a dev dependency) — no browser-automation package needed. Console errors are
``console.error`` calls, uncaught exceptions, browser log entries of level ``error`` and every resource that
failed to load or answered an HTTP error status (what DevTools shows as "Failed to load resource").
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--disable-dev-shm-usage", "--remote-debugging-port=0")
NAMES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    return next((path for path in map(shutil.which, NAMES) if path), None)


class BrowserError(RuntimeError):
    pass


class Chromium:
    """``async with Chromium(workdir) as browser: page = await browser.page()``."""

    def __init__(self, workdir: Path, executable: str | None = None, timeout_s: float = 30.0) -> None:
        self.executable = executable or find_chromium()
        if self.executable is None:
            raise BrowserError(f"no Chromium found (looked for {', '.join(NAMES)})")
        self.profile = workdir / "chromium-profile"
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []

    async def __aenter__(self) -> Chromium:
        self.profile.mkdir(parents=True, exist_ok=True)
        log = (self.profile.parent / "chromium.log").open("wb")
        self._proc = subprocess.Popen([str(self.executable), *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                      stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        endpoint = await self._endpoint()
        self._session = aiohttp.ClientSession()
        self._ws = await self._session.ws_connect(endpoint, max_msg_size=0)
        self._reader = asyncio.get_running_loop().create_task(self._read())
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._reader is not None:
            self._reader.cancel()
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)

    async def _endpoint(self) -> str:
        """The browser's websocket URL, from ``DevToolsActivePort`` in the profile (written once it listens)."""
        marker = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise BrowserError(f"chromium exited with {self._proc.returncode} (log: {self.profile.parent})")
            lines = marker.read_text().split() if marker.is_file() else []
            if len(lines) >= 2:
                return f"ws://127.0.0.1:{lines[0]}{lines[1]}"
            await asyncio.sleep(0.05)
        raise BrowserError(f"chromium did not open its DevTools port in {self.timeout_s:g} s")

    async def _read(self) -> None:
        assert self._ws is not None
        async for message in self._ws:
            data = message.json()
            future = self._pending.pop(data.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(data)
            elif "method" in data:
                self.events.append(data)

    async def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> Any:
        assert self._ws is not None
        ident = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        await self._ws.send_json(message)
        reply = await asyncio.wait_for(future, self.timeout_s)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    async def page(self, width: int = 1300, height: int = 900) -> Page:
        target = await self.send("Target.createTarget", {"url": "about:blank"})
        attached = await self.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
        page = Page(self, attached["sessionId"])
        for domain in ("Page", "Runtime", "Log", "Network"):
            await page.send(f"{domain}.enable")
        await page.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                               "deviceScaleFactor": 1, "mobile": False})
        return page


class Page:
    def __init__(self, browser: Chromium, session: str) -> None:
        self.browser = browser
        self.session = session

    async def send(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return await self.browser.send(method, params, self.session)

    def _events(self, *methods: str) -> list[dict[str, Any]]:
        return [e for e in self.browser.events if e.get("sessionId") == self.session and e["method"] in methods]

    async def open(self, url: str) -> None:
        """Navigate and wait for the load event."""
        seen = len(self._events("Page.loadEventFired"))
        result = await self.send("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise BrowserError(f"navigating to {url}: {result['errorText']}")
        deadline = time.monotonic() + self.browser.timeout_s
        while len(self._events("Page.loadEventFired")) <= seen:
            if time.monotonic() > deadline:
                raise BrowserError(f"{url} did not finish loading in {self.browser.timeout_s:g} s")
            await asyncio.sleep(0.05)

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                      "awaitPromise": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"evaluating {expression[:60]!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def console_errors(self) -> list[str]:
        out = []
        for e in self._events("Runtime.consoleAPICalled", "Runtime.exceptionThrown", "Log.entryAdded",
                              "Network.loadingFailed", "Network.responseReceived"):
            p = e["params"]
            if e["method"] == "Network.loadingFailed":
                out.append(f"Failed to load resource: {p.get('errorText')} ({p.get('type', '')})")
            elif e["method"] == "Network.responseReceived" and int(p["response"].get("status", 0)) >= 400:
                out.append(f"Failed to load resource: the server responded with a status of "
                           f"{p['response']['status']} ({p['response'].get('url', '')})")
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") == "error":
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif e["method"] == "Runtime.exceptionThrown":
                out.append(str(p["exceptionDetails"].get("text")))
            elif e["method"] == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(f"{p['entry'].get('text')} ({p['entry'].get('url', '')})")
        return out

    async def screenshot(self, path: Path | None = None) -> bytes:
        """A PNG of the whole page (not just the viewport)."""
        size = await self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        clip = {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
        shot = await self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                          "clip": clip})
        png = base64.b64decode(shot["data"])
        if path is not None:
            path.write_bytes(png)
        return png
