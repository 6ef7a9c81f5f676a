"""``python -m demo --screenshots DIR``: PNGs of the status pages (and the report) for the documentation.

Taken with headless Chromium (``demo.browser``) while the stack still runs: the router's ``/ui``, the short
pool trainer's ``/ui``, and ``demo-report.html`` once written.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from demo.browser import BrowserError, Chromium, find_chromium


async def _take(pages: dict[str, str], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        async with Chromium(Path(tmp)) as browser:
            page = await browser.page()
            for name, url in pages.items():
                await page.open(url)
                path = out_dir / f"{name}.png"
                await page.screenshot(path)
                written.append(path)
    return written


def take(pages: dict[str, str], out_dir: Path) -> list[Path]:
    """Screenshot each ``{name: url}`` into ``out_dir/<name>.png``; [] (with a message) without Chromium."""
    if find_chromium() is None:
        print("screenshots skipped: no chromium installed (make install installs it when it can)")
        return []
    try:
        return asyncio.run(_take(pages, out_dir))
    except BrowserError as exc:
        print(f"screenshots failed: {exc}")
        return []
