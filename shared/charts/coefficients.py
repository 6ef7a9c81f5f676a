"""A latency model's physical base on a status page: the live coefficients with their units, and each over time.

A base's coefficients (``shared.base``) differ by orders of magnitude and in unit — ms, ms/token, ms/token², ms
per request — so one chart of them all would show one line and a few flat ones at zero. Instead a table of the
live coefficients with their units, and one small chart per term on its own y axis, in its unit: the coefficient
served over time (a step line ending at the live value now) and the fits that were not published (grey dots).
Both status pages (trainer, router) render it from one document shape, the *base history*
(:func:`base_history` builds it)::

    {"terms": [term, …],                     the order to show them in
     "live": {"version", "coefficients": {term: ms per unit}, "rows", "source"} | None,
     "series": [{"at", "version", "published", "coefficients": {term: …}, "rows", "source"}, …]}   oldest first

Every number shown carries ``data-key`` = ``key`` (the document's path in the page's JSON) + its path inside it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from shared.base import CONSTANT, TERMS, term_columns
from shared.charts.page import esc, num, row, table
from shared.charts.plots import Frame, Series, line_chart

TIME_AXIS = "seconds (0 = now)"
CHART_SIZE = (400, 180)
"""Three small charts side by side on a 1,300 px wide page."""
COLUMN_UNITS = {"effective_input_tokens": "token", "input_token_length": "token", "prefill_tokens_in_flight": "token",
                "decode_tokens_in_flight": "token", "num_tokens_generated": "token", "num_request_waiting": "request",
                "num_request_running": "request", "kv_cache_percentage": "KV fraction"}
"""What one unit of a feature column is (a column not listed is its own unit)."""
SIG = 3
"""Significant digits of a coefficient."""


def term_unit(term: str) -> str:
    """The unit of a term's coefficient: ``ms`` (the constant), ``ms/token``, ``ms/token²``, ``ms/request`` …"""
    columns = term_columns(term)
    if not columns:
        return "ms"
    if columns == ("kv_cache_percentage",):
        return "ms at full KV cache"
    units = [COLUMN_UNITS.get(c, c) for c in columns]
    if len(units) == 2 and units[0] == units[1]:
        return f"ms/{units[0]}²"
    return "ms/" + "·".join(units)


def term_label(term: str) -> str:
    return "constant" if term == CONSTANT else " × ".join(term_columns(term))


def base_history(model: str, live: Mapping[str, Any] | None, series: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The document the panel reads: ``model``'s terms in their usual order (``shared.base.TERMS``; terms it does not
    know after them), the live base and the series as given."""
    seen = dict.fromkeys(t for doc in ([live] if live else []) + list(series) for t in doc["coefficients"])
    known = [t for t in TERMS.get(model, ()) if t in seen]
    return {"terms": known + [t for t in seen if t not in known], "live": live, "series": list(series)}


def _steps(doc: Mapping[str, Any], term: str, now: float) -> tuple[list[float], list[float | None]]:
    """The coefficient served over time: each published value held until the next one, the live value until now
    (from the first point shown when nothing shown was published: it was live all along)."""
    published = [p for p in doc["series"] if p["published"]]
    live = (doc["live"] or {}).get("coefficients", {}).get(term)
    xs: list[float] = []
    ys: list[float | None] = []
    for i, p in enumerate(published):
        value = p["coefficients"].get(term)
        end = published[i + 1]["at"] if i + 1 < len(published) else now
        xs += [p["at"] - now, end - now]
        ys += [value, value]
    if live is not None:
        if not published and doc["series"]:
            xs.append(doc["series"][0]["at"] - now)
            ys.append(live)
        xs.append(0.0)
        ys.append(live)
    return xs, ys


def _term_chart(term: str, doc: Mapping[str, Any], now: float, context: str) -> str:
    others = [p for p in doc["series"] if not p["published"]]
    xs, ys = _steps(doc, term, now)
    lines = [Series("served", xs, ys)]
    if others:
        lines.append(Series("fit not published", [p["at"] - now for p in others],
                            [p["coefficients"].get(term) for p in others], color="#999", markers=True, line=False))
    label = term_label(term)
    frame = Frame(label, TIME_AXIS, term_unit(term), width=CHART_SIZE[0], height=CHART_SIZE[1],
                  label=f"{context} base: {label}")
    return line_chart(lines, frame, include_zero=True)


def _table(doc: Mapping[str, Any], key: str, newest: str | None) -> str:
    live = doc["live"] or {}
    last = len(doc["series"]) - 1
    rows = []
    for term in doc["terms"]:
        cells = [esc(term_label(term)), esc(term_unit(term)),
                 num(live.get("coefficients", {}).get(term), f"{key}.live.coefficients.{term}", sig=SIG)]
        if newest is not None:
            value = doc["series"][-1]["coefficients"].get(term) if doc["series"] else None
            cells.append(num(value, f"{key}.series.{last}.coefficients.{term}", sig=SIG))
        rows.append(cells)
    headers = ["term", "unit", "live"] + ([newest] if newest is not None else [])
    return table(headers, rows, left=2)


SOURCES = {"default": "the prior's default coefficients (a GPU roofline)",
           "profile": "a profile's coefficients (learnt on a simulated engine)"}


def _caption(doc: Mapping[str, Any], key: str) -> str:
    live = doc["live"]
    if live is None:
        return '<p class="note">No live base: no bundle yet, or its model is the trees alone.</p>'
    version = "" if live.get("version") is None else "v" + num(live["version"], f"{key}.live.version") + ": "
    source = live.get("source") or ""
    origin = SOURCES.get(source) or (f"fitted on {num(live.get('rows'), f'{key}.live.rows')} rows"
                                     + ("" if source == "fit" else f" (source {esc(source or '–')})"))
    grey = ("; grey dots: fits that were not published" if any(not p["published"] for p in doc["series"]) else "")
    return (f'<p class="note">live {version}{origin}; the trees learn a residual on top of it. Each chart: the '
            f"coefficient served over time, a step at every new version{grey}.</p>")


def base_panel(heading: str, doc: Mapping[str, Any], key: str, now: float, context: str,
               newest: str | None = None) -> list[str]:
    """``<h3>heading</h3>``, the live base's caption and table (with a ``newest`` column of the newest point when
    given), then one small chart per term; ``context`` names the charts (``aria-label``: "TTFT base: constant")."""
    charts: Iterable[str] = (_term_chart(t, doc, now, context) for t in doc["terms"])
    return [f"<h3>{esc(heading)}</h3>", _caption(doc, key), _table(doc, key, newest), row(*charts)]
