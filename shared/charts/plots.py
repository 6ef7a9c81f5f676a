"""Small server-side SVG charts: lines over time, scatter with y = x and a band, horizontal bars.

Every chart is one self-contained ``<svg class="chart">`` string (no script, no external resource, so a
page works offline and renders the same in any browser). ``data-points`` on the element counts the data
marks drawn; a chart without data says so in its frame (``class="chart empty"``). Why hand-written SVG and
not matplotlib: see ``bench/results/pages/RESULTS-pages.md`` (import time and RSS of a server, page time).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

from shared.charts.scale import Scale, extent, finite, fmt

MAX_LINE_POINTS = 240
"""A line keeps at most this many points (every k-th, and the last): about one per two pixels of a chart."""
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
MARGIN = (40, 14, 40, 58)  # top, right, bottom, left
Formatter = Callable[[float], str]


@dataclass(frozen=True)
class Series:
    name: str
    xs: Sequence[float]
    ys: Sequence[float | None]
    color: str = ""
    dashed: bool = False
    markers: bool = False
    """Draw a dot per point (retrain points) instead of, or as well as, a line."""
    line: bool = True


@dataclass(frozen=True)
class Band:
    """A shaded range ``lo..hi`` over ``xs`` (e.g. the p50–p99 quantile band, or a coverage band)."""

    name: str
    xs: Sequence[float]
    lo: Sequence[float]
    hi: Sequence[float]


@dataclass(frozen=True)
class Frame:
    title: str
    x_label: str = ""
    y_label: str = ""
    width: int = 520
    height: int = 230
    x_fmt: Formatter = fmt
    y_fmt: Formatter = fmt
    hlines: Sequence[tuple[float, str]] = field(default_factory=tuple)
    label: str = ""
    """The chart's accessible name (``aria-label``) when the visible title leaves out its context; "": the title."""


def _open(frame: Frame, points: int) -> list[str]:
    cls = "chart" if points else "chart empty"
    return [f'<svg class="{cls}" data-points="{points}" xmlns="http://www.w3.org/2000/svg" role="img" '
            f'aria-label="{escape(frame.label or frame.title)}" viewBox="0 0 {frame.width} {frame.height}" '
            f'width="{frame.width}" height="{frame.height}" font-family="sans-serif" font-size="11">',
            f'<rect width="{frame.width}" height="{frame.height}" fill="#fff"/>',
            f'<text x="{MARGIN[3]}" y="16" font-size="13" font-weight="bold">{escape(frame.title)}</text>']


def _empty(frame: Frame, message: str = "no data yet") -> str:
    parts = _open(frame, 0)
    parts.append(f'<text x="{frame.width / 2:.0f}" y="{frame.height / 2:.0f}" text-anchor="middle" '
                 f'fill="#888">{escape(message)}</text></svg>')
    return "".join(parts)


def _axes(frame: Frame, xs: Scale, ys: Scale) -> list[str]:
    top, right, bottom, left = MARGIN
    w, h = frame.width, frame.height
    out = [f'<rect x="{left}" y="{top}" width="{w - left - right}" height="{h - top - bottom}" fill="none" '
           f'stroke="#999"/>']
    for t in ys.ticks(5):
        y = ys(t)
        out.append(f'<line x1="{left}" x2="{w - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
                   f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{escape(frame.y_fmt(t))}</text>')
    for t in xs.ticks(6):
        x = xs(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{h - bottom}" stroke="#f2f2f2"/>'
                   f'<text x="{x:.1f}" y="{h - bottom + 14}" text-anchor="middle">{escape(frame.x_fmt(t))}</text>')
    out.append(f'<text x="{(left + w - right) / 2:.0f}" y="{h - 6}" text-anchor="middle" fill="#444">'
               f'{escape(frame.x_label)}</text>')
    out.append(f'<text transform="translate(12 {(top + h - bottom) / 2:.0f}) rotate(-90)" text-anchor="middle" '
               f'fill="#444">{escape(frame.y_label)}</text>')
    for value, label in frame.hlines:
        if ys.lo <= value <= ys.hi:
            y = ys(value)
            out.append(f'<line x1="{left}" x2="{w - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#555" '
                       f'stroke-dasharray="4 3"/><text x="{w - right - 2}" y="{y - 3:.1f}" text-anchor="end" '
                       f'fill="#555">{escape(label)}</text>')
    return out


def _legend(frame: Frame, entries: Sequence[tuple[str, str]]) -> list[str]:
    out, x = [], float(frame.width - MARGIN[1])
    for name, color in reversed(entries):
        x -= 12 + 6.2 * len(name)
        out.append(f'<rect x="{x:.0f}" y="21" width="9" height="9" fill="{color}"/>'
                   f'<text x="{x + 12:.0f}" y="29">{escape(name)}</text>')
        x -= 8
    return out


def _scales(frame: Frame, x_range: tuple[float, float], y_range: tuple[float, float], x_log: bool,
            y_log: bool) -> tuple[Scale, Scale]:
    top, right, bottom, left = MARGIN
    xs = Scale(x_range[0], x_range[1], left, frame.width - right, x_log)
    ys = Scale(y_range[0], y_range[1], frame.height - bottom, top, y_log)
    return xs, ys


def _band(band: Band, xs: Scale, ys: Scale) -> str:
    pts = [(x, lo, hi) for x, lo, hi in zip(band.xs, band.lo, band.hi, strict=True)
           if math.isfinite(x) and math.isfinite(lo) and math.isfinite(hi)]
    if not pts:
        return ""
    upper = " ".join(f"{xs(x):.1f},{ys(hi):.1f}" for x, _, hi in pts)
    lower = " ".join(f"{xs(x):.1f},{ys(lo):.1f}" for x, lo, _ in reversed(pts))
    return f'<polygon class="band" points="{upper} {lower}" fill="#9ecae1" fill-opacity="0.35" stroke="none"/>'


def _thin(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(points) <= MAX_LINE_POINTS:
        return points
    step = math.ceil(len(points) / MAX_LINE_POINTS)
    kept = points[::step]
    return kept if kept[-1] == points[-1] else [*kept, points[-1]]


def line_chart(series: Sequence[Series], frame: Frame, *, band: Band | None = None, y_log: bool = False,
               include_zero: bool = False, y_range: tuple[float, float] | None = None) -> str:
    """Lines (and optional dots) over a shared x axis, with optional band and horizontal reference lines."""
    pairs = [_thin([(x, float(y)) for x, y in zip(s.xs, s.ys, strict=True) if y is not None and math.isfinite(y)
                    and (not y_log or y > 0)]) for s in series]
    points = sum(map(len, pairs))
    if not points:
        return _empty(frame)
    all_x = [x for p in pairs for x, _ in p] + (list(band.xs) if band else [])
    all_y = [y for p in pairs for _, y in p] + (finite([*band.lo, *band.hi]) if band else [])
    all_y += [v for v, _ in frame.hlines]
    xr = extent(all_x, pad=0.0) if len(set(all_x)) > 1 else (all_x[0] - 1, all_x[0] + 1)
    xs, ys = _scales(frame, xr, y_range or extent(all_y, y_log, include_zero), False, y_log)
    out = _open(frame, points) + _axes(frame, xs, ys)
    if band is not None:
        out.append(_band(band, xs, ys))
    colors = [s.color or PALETTE[i % len(PALETTE)] for i, s in enumerate(series)]
    for s, p, color in zip(series, pairs, colors, strict=True):
        dash = ' stroke-dasharray="5 3"' if s.dashed else ""
        if s.line and len(p) > 1:
            path = " ".join(f"{xs(x):.1f},{ys(y):.1f}" for x, y in p)
            out.append(f'<polyline class="mark" points="{path}" fill="none" stroke="{color}" '
                       f'stroke-width="1.6"{dash}/>')
        if s.markers or len(p) == 1:
            out.extend(f'<circle class="mark" cx="{xs(x):.1f}" cy="{ys(y):.1f}" r="3" fill="{color}"/>'
                       for x, y in p)
    out += _legend(frame, [(s.name, c) for s, c in zip(series, colors, strict=True)] +
                   ([(band.name, "#9ecae1")] if band else []))
    out.append("</svg>")
    return "".join(out)


def scatter_chart(xs_: Sequence[float], ys_: Sequence[float], frame: Frame, *, band: Band | None = None,
                  diagonal: bool = True, log: bool = True, covered_label: str = "covered") -> str:
    """Points (x, y) with the y = x line and an optional band; points above the line are drawn red."""
    pts = [(x, y) for x, y in zip(xs_, ys_, strict=True) if math.isfinite(x) and math.isfinite(y)
           and (not log or (x > 0 and y > 0))]
    if not pts:
        return _empty(frame)
    values = [v for p in pts for v in p] + (finite([*band.lo, *band.hi]) if band else [])
    lo, hi = extent(values, log)
    xs, ys = _scales(frame, (lo, hi), (lo, hi), log, log)
    out = _open(frame, len(pts)) + _axes(frame, xs, ys)
    if band is not None:
        out.append(_band(band, xs, ys))
    if diagonal:
        out.append(f'<line class="diagonal" x1="{xs(lo):.1f}" y1="{ys(lo):.1f}" x2="{xs(hi):.1f}" y2="{ys(hi):.1f}" '
                   f'stroke="#333" stroke-width="1.2"/>')
    for x, y in pts:
        color = PALETTE[0] if y <= x else PALETTE[1]
        out.append(f'<circle class="mark" cx="{xs(x):.1f}" cy="{ys(y):.1f}" r="2.4" fill="{color}" '
                   f'fill-opacity="0.7"/>')
    legend = [(covered_label, PALETTE[0]), ("above", PALETTE[1])] + ([(band.name, "#9ecae1")] if band else [])
    out += _legend(frame, legend)
    out.append("</svg>")
    return "".join(out)


def bar_chart(items: Sequence[tuple[str, float]], frame: Frame, value_fmt: Formatter = fmt,
              empty: str = "no data yet") -> str:
    """Horizontal bars, one per (label, value), longest scale = the largest value."""
    items = [(label, v) for label, v in items if math.isfinite(v)]
    if not items:
        return _empty(frame, empty)
    row = 18
    height = MARGIN[0] + row * len(items) + 10
    left = 12 + 6.2 * max(len(label) for label, _ in items)
    scale = Scale(0.0, max(max(v for _, v in items), 1e-12), left, frame.width - 60)
    out = _open(Frame(frame.title, width=frame.width, height=height), len(items))
    for i, (label, value) in enumerate(items):
        y = MARGIN[0] + i * row
        out.append(f'<text x="{left - 6:.0f}" y="{y + 12}" text-anchor="end">{escape(label)}</text>'
                   f'<rect class="mark" x="{left:.0f}" y="{y + 2}" width="{max(scale(value) - left, 0.5):.1f}" '
                   f'height="{row - 5}" fill="{PALETTE[0]}"/><text x="{scale(value) + 4:.0f}" y="{y + 12}">'
                   f'{escape(value_fmt(value))}</text>')
    out.append("</svg>")
    return "".join(out)


def stacked_bars(groups: Sequence[tuple[str, Sequence[tuple[str, float]]]], frame: Frame,
                 value_fmt: Formatter = fmt) -> str:
    """One horizontal stacked bar per group (e.g. client TTFT = components), with a shared legend."""
    groups = [(g, [(k, max(v, 0.0)) for k, v in parts if math.isfinite(v)]) for g, parts in groups]
    groups = [(g, parts) for g, parts in groups if parts]
    if not groups:
        return _empty(frame)
    names = list(dict.fromkeys(k for _, parts in groups for k, _ in parts))
    color = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(names)}
    row = 26
    height = MARGIN[0] + 18 + row * len(groups) + 8
    left = 12 + 6.2 * max(len(g) for g, _ in groups)
    total = max(sum(v for _, v in parts) for _, parts in groups) or 1.0
    scale = Scale(0.0, total, left, frame.width - 70)
    out = _open(Frame(frame.title, width=frame.width, height=height), sum(len(p) for _, p in groups))
    lx = float(MARGIN[3])
    for k in names:
        out.append(f'<rect x="{lx:.0f}" y="{MARGIN[0] - 6}" width="9" height="9" fill="{color[k]}"/>'
                   f'<text x="{lx + 12:.0f}" y="{MARGIN[0] + 2}">{escape(k)}</text>')
        lx += 24 + 6.2 * len(k)
    for i, (g, parts) in enumerate(groups):
        y, x = MARGIN[0] + 14 + i * row, left
        out.append(f'<text x="{left - 6:.0f}" y="{y + 14}" text-anchor="end">{escape(g)}</text>')
        for k, v in parts:
            w = scale(v) - left
            out.append(f'<rect class="mark" x="{x:.1f}" y="{y}" width="{max(w, 0.0):.1f}" height="{row - 8}" '
                       f'fill="{color[k]}"><title>{escape(k)}: {escape(value_fmt(v))}</title></rect>')
            x += w
        out.append(f'<text x="{x + 4:.0f}" y="{y + 14}">{escape(value_fmt(sum(v for _, v in parts)))}</text>')
    out.append("</svg>")
    return "".join(out)
