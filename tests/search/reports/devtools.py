"""A tiny Chrome DevTools Protocol client: a page opened in a real headless Chromium, its console errors, sections,
title and images, and a screenshot.

It speaks the protocol over tornado's websocket client (installed with distributed): console errors come
from the protocol itself (``Runtime.consoleAPICalled`` of type error, ``Runtime.exceptionThrown``,
``Log.entryAdded`` at level error: failed resource loads), not from a hook in the page.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["CHROMIUM", "PageResult", "available", "open_page"]

CHROMIUM = "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
)


@dataclasses.dataclass
class PageResult:
    errors: list[str]
    section_ids: list[str]
    title: str
    images: int
    broken_images: int
    screenshot: Path | None
    texts: dict[str, str] = dataclasses.field(default_factory=dict)  # section id -> its rendered text (innerText)
    nav: str = ""  # the table of contents as rendered (with the note on sections left out)
    figures: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # alt, natural and shown size per image
    probe: Any = None  # what the caller's ``probe`` expression returned


def available() -> bool:
    return Path(CHROMIUM).exists()


def open_page(
    url: str, screenshot: Path | None = None, timeout: float = 45.0, width: int = 1280, probe: str = "null"
) -> PageResult:
    """Load ``url`` in a fresh headless Chromium ``width`` CSS pixels wide; return what the page showed, every
    error it logged and what the JavaScript expression ``probe`` evaluated to in the page."""
    profile = tempfile.mkdtemp(prefix="hypersweep-chromium-")
    proc = subprocess.Popen(
        [CHROMIUM, *FLAGS, f"--window-size={width},900", f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = _devtools_port(proc, timeout)
        page_ws = _page_websocket(port, timeout)
        return asyncio.run(asyncio.wait_for(_drive(page_ws, url, screenshot, probe), timeout))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)


def _devtools_port(proc: subprocess.Popen, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    assert proc.stderr is not None
    seen = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {proc.returncode}: {''.join(seen)[-2000:]}")
            continue
        seen.append(line)
        match = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
        if match:
            return int(match.group(1))
    raise TimeoutError(f"chromium printed no DevTools address: {''.join(seen)[-2000:]}")


def _page_websocket(port: int, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as resp:
            targets = json.load(resp)
        pages = [t for t in targets if t.get("type") == "page" and t.get("webSocketDebuggerUrl")]
        if pages:
            return pages[0]["webSocketDebuggerUrl"]
        time.sleep(0.1)
    raise TimeoutError("chromium opened no page target")


class _Session:
    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        call_id = self.next_id
        await self.ws.write_message(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(await self._read())
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    async def wait_event(self, method: str) -> dict[str, Any]:
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            message = json.loads(await self._read())
            self.events.append(message)
            if message.get("method") == method:
                return message

    async def _read(self) -> str:
        message = await self.ws.read_message()
        if message is None:
            raise RuntimeError("the DevTools connection closed")
        return message


async def _drive(page_ws: str, url: str, screenshot: Path | None, probe_js: str = "null") -> PageResult:
    from tornado.websocket import websocket_connect

    ws = await websocket_connect(page_ws, max_message_size=256 * 1024 * 1024)
    try:
        s = _Session(ws)
        for domain in ("Runtime", "Log", "Page"):
            await s.call(f"{domain}.enable")
        await s.call("Page.navigate", url=url)
        await s.wait_event("Page.loadEventFired")
        await asyncio.sleep(0.3)  # late console messages
        probe = await s.call(
            "Runtime.evaluate",
            returnByValue=True,
            expression=(
                "({ids: Array.from(document.querySelectorAll('section[id]')).map(e => e.id), title: document.title,"
                " images: document.images.length,"
                " broken: Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).length,"
                " texts: Object.fromEntries(Array.from(document.querySelectorAll('section[id]'))"
                "   .map(e => [e.id, e.innerText])),"
                " nav: (document.querySelector('nav') || {innerText: ''}).innerText,"
                " figures: Array.from(document.images).map(i => ({alt: i.alt, width: i.naturalWidth,"
                "   height: i.naturalHeight, shown: i.getBoundingClientRect().width}))})"
            ),
        )
        value = probe["result"]["value"]
        asked = await s.call("Runtime.evaluate", returnByValue=True, expression=f"({probe_js})")
        shot = None
        if screenshot is not None:
            metrics = await s.call("Page.getLayoutMetrics")
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
            data = await s.call("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)
            screenshot.write_bytes(base64.b64decode(data["data"]))
            shot = screenshot
        await s.call("Runtime.evaluate", expression="0")  # drain events that arrived meanwhile
        return PageResult(
            _errors(s.events),
            value["ids"],
            value["title"],
            value["images"],
            value["broken"],
            shot,
            value["texts"],
            value["nav"],
            value["figures"],
            asked["result"].get("value"),
        )
    finally:
        ws.close()


def _errors(events: list[dict[str, Any]]) -> list[str]:
    errors = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            errors.append(f"console.{params['type']}: {args}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            errors.append(f"exception: {details.get('exception', {}).get('description') or details.get('text')}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            errors.append(f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}".strip())
    return errors
