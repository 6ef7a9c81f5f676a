"""Server-side SVG charts and the HTML shell of the status pages (trainer, router) and the demo report."""

from shared.charts.page import card, cards, esc, fmt_value, num, page, row, table
from shared.charts.plots import Band, Frame, Series, bar_chart, line_chart, scatter_chart, stacked_bars

__all__ = ["Band", "Frame", "Series", "bar_chart", "card", "cards", "esc", "fmt_value", "line_chart", "num", "page",
           "row", "scatter_chart", "stacked_bars", "table"]
