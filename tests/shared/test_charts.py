"""Server-side SVG charts: axis ticks, scales, and what a chart with and without data contains."""

from __future__ import annotations

import re

import pytest

from shared.charts import Band, Frame, Series, bar_chart, line_chart, num, page, scatter_chart, stacked_bars
from shared.charts.plots import MAX_LINE_POINTS
from shared.charts.scale import Scale, extent, fmt, log_ticks, nice_ticks


@pytest.mark.parametrize(("lo", "hi", "expected"), [
    (0.0, 1.0, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
    (0.0, 97.0, [0.0, 20.0, 40.0, 60.0, 80.0]),
    (-300.0, 0.0, [-300.0, -200.0, -100.0, 0.0]),
    (5.0, 5.0, [5.0]),
])
def test_nice_ticks(lo: float, hi: float, expected: list[float]) -> None:
    assert nice_ticks(lo, hi, 5) == pytest.approx(expected)


def test_log_ticks_add_2_and_5_on_short_ranges() -> None:
    assert log_ticks(3.0, 400.0) == pytest.approx([5.0, 10.0, 20.0, 50.0, 100.0, 200.0])
    assert log_ticks(1.0, 1e5) == pytest.approx([1.0, 10.0, 100.0, 1e3, 1e4, 1e5])
    assert log_ticks(2.2, 7.5) == pytest.approx([3.0, 4.0, 5.0, 6.0, 7.0])  # under a decade: linear values


def test_scales_map_the_range_onto_pixels_and_clamp_outliers() -> None:
    y = Scale(0.0, 10.0, 200.0, 40.0)
    assert (y(0.0), y(10.0), y(5.0)) == (200.0, 40.0, 120.0)
    assert y(1e9) == pytest.approx(40.0 - 8.0)  # just outside the frame
    log = Scale(1.0, 1000.0, 0.0, 300.0, log=True)
    assert log(10.0) == pytest.approx(100.0) and log(0.0) == 0.0


def test_extent_pads_and_keeps_log_ranges_positive() -> None:
    assert extent([], log=True) == (1.0, 10.0)
    lo, hi = extent([2.0, 200.0], log=True)
    assert 0 < lo < 2.0 and hi > 200.0
    assert extent([3.0, 3.0]) == pytest.approx((2.7, 3.3))
    assert [fmt(v) for v in (0, 0.0123, 250, 12_500, 3_400_000)] == ["0", "0.0123", "250", "12.5k", "3.4M"]


def test_a_chart_without_data_says_so() -> None:
    svg = line_chart([Series("a", [1.0, 2.0], [None, None])], Frame("Coverage <live>"))
    assert 'class="chart empty"' in svg and 'data-points="0"' in svg and "no data yet" in svg
    assert "Coverage &lt;live&gt;" in svg and "<live>" not in svg


def test_a_line_chart_draws_its_points_band_and_reference_lines() -> None:
    xs = [float(i) for i in range(10)]
    svg = line_chart([Series("live", xs, [0.5 + i / 40 for i in range(10)]),
                      Series("retrains", [2.0, 6.0], [0.9, 0.8], markers=True, line=False)],
                     Frame("c", hlines=((0.9, "target"),)), band=Band("band", xs, [0.4] * 10, [0.9] * 10))
    assert 'data-points="12"' in svg and svg.count("<polyline") == 1 and svg.count("<circle") == 2
    assert "<polygon" in svg and "target" in svg and svg.endswith("</svg>")


def test_long_lines_are_thinned_but_keep_their_last_point() -> None:
    n = 3 * MAX_LINE_POINTS + 1
    svg = line_chart([Series("s", [float(i) for i in range(n)], [float(i) for i in range(n)])], Frame("t"))
    points = int(re.search(r'data-points="(\d+)"', svg).group(1))  # type: ignore[union-attr]
    assert points <= MAX_LINE_POINTS + 1
    last = re.search(r'<polyline class="mark" points="([^"]+)"', svg).group(1).split()[-1]  # type: ignore[union-attr]
    assert float(last.split(",")[0]) == pytest.approx(Frame("t").width - 14, abs=0.2)


def test_scatter_colours_points_above_the_line() -> None:
    svg = scatter_chart([10.0, 10.0, 100.0], [5.0, 20.0, 90.0], Frame("s"))
    assert 'data-points="3"' in svg and 'class="diagonal"' in svg
    assert svg.count('fill="#d62728" fill-opacity') == 1  # one point above y = x


def test_bars_and_stacked_bars() -> None:
    assert 'data-points="2"' in bar_chart([("a", 2.0), ("b", 1.0)], Frame("b"))
    assert "no sheds" in bar_chart([], Frame("b"), empty="no sheds")
    svg = stacked_bars([("short", [("x", 1.0), ("y", 3.0)]), ("long", [("x", 2.0), ("y", 2.0)])], Frame("s"))
    assert 'data-points="4"' in svg and svg.count("<title>") == 4


def test_numbers_carry_their_key_and_unrounded_value() -> None:
    assert num(0.91234, "a.b", 3, pct=True) == '<span class="num" data-key="a.b" data-value="0.91234">91.2 %</span>'
    assert num(None, "x") == '<span class="num" data-key="x" data-value="">–</span>'
    assert num(12345, "n").endswith(">12,345</span>")
    html = page("T", "sub", ["<p>x</p>"], refresh_s=5)
    assert '<meta http-equiv="refresh" content="5">' in html and 'href="data:,"' in html and "http" not in html.replace(
        "http-equiv", "")
