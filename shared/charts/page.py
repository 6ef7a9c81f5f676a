"""The HTML shell of the status pages and the demo report: inline CSS, no script, no external resource.

Numbers are written with :func:`num`: the visible text is rounded, ``data-key`` names the value and
``data-value`` holds it unrounded, so a test (or a person with the inspector) can match the page against
the JSON endpoint it was built from. A page refreshes itself with ``<meta http-equiv="refresh">``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from html import escape

CSS = """
body{font-family:system-ui,sans-serif;margin:16px 24px;color:#222;background:#fafafa}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:22px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:14px;margin:14px 0 6px}.sub{color:#666;font-size:12px;margin-bottom:10px}
.row{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:8px 0}
.card{background:#fff;border:1px solid #ddd;border-radius:4px;padding:6px 10px;min-width:110px}
.card .k{font-size:11px;color:#666}.card .v{font-size:17px;font-weight:600}
table{border-collapse:collapse;background:#fff;font-size:12px;margin:6px 0}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:right;vertical-align:top}
th{background:#f0f0f0}td.l,th.l,td.text{text-align:left}
svg.chart{background:#fff;border:1px solid #ddd;border-radius:4px}
.ok{color:#2a7d2a;font-weight:600}.bad{color:#c0392b;font-weight:600}.warn{color:#b7791f;font-weight:600}
.note{font-size:12px;color:#555;max-width:1100px}
"""


def esc(text: object) -> str:
    return escape(str(text))


def significant(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits without trailing zeros (25, 0.08, 0.00042, 1.2e-6, 12,346): for
    numbers whose magnitudes differ by orders, such as a latency model's coefficients."""
    magnitude = abs(value)
    if magnitude == 0:
        return "0"
    if 1e-4 <= magnitude < 1e6:
        text = f"{value:,.{max(0, digits - 1 - math.floor(math.log10(magnitude)))}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    mantissa, exponent = f"{value:.{digits - 1}e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.') if '.' in mantissa else mantissa}e{int(exponent)}"


def fmt_value(value: float | int | None, digits: int = 2, pct: bool = False, sig: int | None = None) -> str:
    """``digits`` decimals (a percentage with ``pct``), or ``sig`` significant digits when given."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if sig is not None:
        return significant(float(value), sig)
    if pct:
        return f"{100 * value:.{max(0, digits - 2)}f} %"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def num(value: float | int | None, key: str, digits: int = 2, pct: bool = False, sig: int | None = None) -> str:
    """``<span class="num" data-key=… data-value=…>`` with the rounded value as its text."""
    raw = "" if value is None else repr(value)
    return (f'<span class="num" data-key="{esc(key)}" data-value="{esc(raw)}">'
            f"{esc(fmt_value(value, digits, pct, sig))}</span>")


def card(label: str, value_html: str) -> str:
    return f'<div class="card"><div class="k">{esc(label)}</div><div class="v">{value_html}</div></div>'


def cards(items: Iterable[tuple[str, str]]) -> str:
    return '<div class="cards">' + "".join(card(k, v) for k, v in items) + "</div>"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], left: int = 1, text: Sequence[int] = ()) -> str:
    """Cells are HTML already (use :func:`esc` / :func:`num`); the first ``left`` columns and the columns in
    ``text`` align left."""
    def cls(i: int) -> str:
        return "l" if i < left or i in text else ""

    head = "".join(f'<th class="{cls(i)}">{esc(h)}</th>' for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f'<td class="{cls(i)}">{c}</td>' for i, c in enumerate(r)) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def row(*charts: str) -> str:
    return '<div class="row">' + "".join(charts) + "</div>"


def page(title: str, subtitle: str, body: Iterable[str], refresh_s: int = 0) -> str:
    refresh = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s > 0 else ""
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title>{refresh}<link rel=\"icon\" href=\"data:,\">"
            f"<style>{CSS}</style></head><body><h1>{esc(title)}</h1><div class=\"sub\">{subtitle}</div>"
            + "".join(body) + "</body></html>")
