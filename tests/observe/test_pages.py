"""Both status pages as a person sees them: rendered by headless Chromium from the running servers.

Per page: a screenshot is taken (a PNG of the whole page), the browser reports no console error (no failed
resource, no script error: the page must work offline), every plot that has data is visibly drawn (pixel
variance and coloured marks inside its box, not a blank frame), and every number on the page equals the
JSON it was built from — ``/ui/data`` and, for the numbers they share, the trainer's ``/data/status`` and the
proxy's ``/status``.
"""

from __future__ import annotations

import asyncio
import io
import math
import re
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from PIL import Image

from demo.browser import Chromium
from demo.stack import Stack
from tests.waiting import wait_for

READ = """({
  charts: Array.from(document.querySelectorAll('svg.chart')).map(s => {
    const r = s.getBoundingClientRect();
    return {x: r.x + scrollX, y: r.y + scrollY, w: r.width, h: r.height, points: +s.dataset.points,
            title: s.getAttribute('aria-label')};
  }),
  nums: Array.from(document.querySelectorAll('.num')).map(e => [e.dataset.key, e.dataset.value, e.textContent]),
  refresh: (document.querySelector('meta[http-equiv=refresh]') || {}).content || null,
  title: document.title,
})"""
DECAYING = (".correction",)
"""Per-pod correction factors decay towards 1 with time, between the page and the JSON read after it."""
TIME_VARYING = ("ingest.series", "retrain.cycles")
"""Values that move while the stack is idle: the ingest rate of the current bin, the retrain loop's tick count."""


async def _render(executable: str, url: str, workdir: Path) -> tuple[bytes, dict[str, Any], list[str]]:
    async with Chromium(workdir, executable) as browser:
        page = await browser.page()
        await page.open(url)
        seen = await page.evaluate(READ)
        png = await page.screenshot(workdir / "page.png")
        return png, seen, page.console_errors()


def _resolve(doc: Any, key: str) -> Any:
    """A ``data-key`` path in the JSON: dots separate keys and list indices (negative allowed); ``length`` of a
    list, ``total`` of a map of counts."""
    for part in key.split("."):
        if part == "length" and isinstance(doc, list):
            return len(doc)
        if part == "total" and isinstance(doc, dict) and "total" not in doc:
            return sum(doc.values())
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def _check_numbers(nums: list[list[str]], doc: dict[str, Any]) -> int:
    checked = 0
    for key, raw, text in nums:
        if key.startswith(TIME_VARYING):
            continue
        expected = _resolve(doc, key)
        if expected is None:
            assert raw == "" and text == "–", (key, raw, text)
            continue
        rel = 0.05 if key.endswith(DECAYING) else 1e-9
        assert math.isclose(float(raw), float(expected), rel_tol=rel, abs_tol=1e-9), (key, raw, expected)
        shown = text.replace(",", "").replace("\u202f", "").strip()
        scale = 100.0 if shown.endswith("%") else 1.0
        number = shown.rstrip("% ").strip()
        decimals = len(number.split(".")[1]) if "." in number else 0
        tolerance = 0.5 * 10 ** -decimals / scale + (rel * abs(float(expected)))
        assert abs(float(number) / scale - float(expected)) <= tolerance + 1e-12, (key, text, expected)
        checked += 1
    return checked


def _drawn(png: bytes, charts: list[dict[str, Any]]) -> list[str]:
    """Titles of the charts with data whose pixels look drawn (variance and coloured marks in their box)."""
    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(np.int16)
    drawn = []
    for c in charts:
        if not c["points"]:
            continue
        box = image[int(c["y"]):int(c["y"] + c["h"]), int(c["x"]):int(c["x"] + c["w"])]
        assert box.size, f"chart {c['title']!r} is outside the screenshot"
        saturation = box.max(axis=2) - box.min(axis=2)
        if box.std() > 10 and int((saturation > 60).sum()) > 30:
            drawn.append(c["title"])
    return drawn


def _coefficients(shown: dict[str, float], key: str, base: dict[str, Any]) -> None:
    """The page shows every term of ``base`` (a manifest entry's: terms, coefficients) under ``key``, and nothing
    else there."""
    on_page = {k.removeprefix(key): v for k, v in shown.items() if k.startswith(key)}
    assert on_page == dict(zip(base["terms"], base["coefficients"], strict=True)) and len(on_page) >= 4, on_page


def _bases_read(client: httpx.Client, stack: Stack) -> bool:
    """The router has read the bundle each pool's predictor serves now (it reads them every few seconds)."""
    pools = {p["name"]: p["model"] for p in client.get(stack.router_url + "/status").json()["pools"]}
    return all((pools[pool]["bundle"] or {}).get("version") == client.get(url + "/status").json()["bundle"]["version"]
               for pool, url in stack.predictor_urls.items())


def _common(png: bytes, seen: dict[str, Any], errors: list[str], title: str) -> Image.Image:
    assert errors == [], errors
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG" and image.width >= 1000 and image.height > 1500, image.size
    assert seen["title"] == title and seen["refresh"] == "5", seen["refresh"]
    with_data = [c for c in seen["charts"] if c["points"]]
    assert sorted(_drawn(png, seen["charts"])) == sorted(c["title"] for c in with_data)
    return image


def test_trainer_page_renders_with_plots_and_its_numbers(observed: Stack, chromium: str, tmp_path: Path) -> None:
    url = observed.trainer_urls["short"]
    png, seen, errors = asyncio.run(_render(chromium, url + "/ui", tmp_path))
    with httpx.Client(timeout=30) as client:
        doc = client.get(url + "/ui/data").json()
        status = client.get(url + "/data/status").json()
    _common(png, seen, errors, "latency-trainer status")
    titles = [c["title"] for c in seen["charts"] if c["points"]]
    for expected in ("TTFT coverage", "TTFT pinball", "TTFT newest", "TTFT feature importance", "TPOT coverage",
                     "TPOT newest", "ingest rate", "TTFT base: constant", "TTFT base: effective_input_tokens",
                     "TPOT base: constant", "TPOT base: num_request_running"):
        assert any(t.startswith(expected) for t in titles), (expected, titles)
    assert _check_numbers(seen["nums"], doc) > 20
    shown = {key: float(raw) for key, raw, _ in seen["nums"] if raw}
    assert shown["durable.rows"] == status["durable"]["rows"]
    assert shown["models.ttft.window.train"] == status["training_data"]["ttft_samples"]
    assert shown["models.tpot.window.holdout"] == status["test_data"]["tpot_samples"]
    for name in ("ttft", "tpot"):
        _coefficients(shown, f"models.{name}.base.live.coefficients.", doc["models"][name]["live_entry"]["base"])
    assert len(doc["models"]["ttft"]["retrains"]) >= 2 and doc["models"]["ttft"]["recent"]["n"] > 0


def test_router_page_renders_with_plots_and_its_numbers(observed: Stack, chromium: str, tmp_path: Path) -> None:
    url = observed.router_url
    with httpx.Client(timeout=30) as client:
        wait_for(lambda: _bases_read(client, observed), timeout=30, interval=0.5, what="the router reads the bases")
    png, seen, errors = asyncio.run(_render(chromium, url + "/ui", tmp_path))
    with httpx.Client(timeout=30) as client:
        doc = client.get(url + "/ui/data").json()
        status = client.get(url + "/status").json()
        served = {pool: client.get(p + "/status").json()["bundle"] for pool, p in observed.predictor_urls.items()}
    _common(png, seen, errors, "latency-router status")
    titles = [c["title"] for c in seen["charts"] if c["points"]]
    for expected in ("short: traffic share per pod", "short: TTFT predicted vs measured", "short: TTFT last",
                     "short: TPOT last", "short: sheds and fallback", "short TTFT base: constant",
                     "short TTFT base: effective_input_tokens", "short TPOT base: constant", "long TTFT base: constant",
                     "long TPOT base: num_request_running"):
        assert any(t.startswith(expected) for t in titles), (expected, titles)
    assert _check_numbers(seen["nums"], doc) > 20
    shown = {key: float(raw) for key, raw, _ in seen["nums"] if raw}
    short = status["pools"][0]
    assert [shown[f"status.pools.0.pods.{j}.routed"] for j in range(len(short["pods"]))] == [
        p["routed"] for p in short["pods"]]
    assert shown["status.pools.0.shed.total"] == sum(short["shed"].values()) >= 1
    assert shown["classifier.total_threshold_tokens"] == 2048
    for i, pool in enumerate(("short", "long")):
        assert shown[f"status.pools.{i}.model.bundle.version"] == served[pool]["version"]
        for name in ("ttft", "tpot"):
            _coefficients(shown, f"bases.{pool}.{name}.live.coefficients.", served[pool]["models"][name]["base"])


def test_console_errors_are_caught(observed: Stack, chromium: str, tmp_path: Path) -> None:
    """The check above can fail: a page whose image 404s and whose script logs an error reports both."""
    html = (f'<img src="{observed.trainer_urls["short"]}/no-such-image.png">'
            "<script>console.error('boom')</script>")
    page = tmp_path / "broken.html"
    page.write_text(html)

    async def run() -> list[str]:
        async with Chromium(tmp_path, chromium) as browser:
            p = await browser.page()
            await p.open(page.as_uri())
            await asyncio.sleep(0.3)
            return p.console_errors()

    errors = asyncio.run(run())
    assert any("boom" in e for e in errors) and any(re.search(r"404|Failed to load", e) for e in errors), errors
