"""Server-side SVG charts: axis ticks, scales, and what a chart with and without data contains."""

from __future__ import annotations

import re
from typing import Any

import pytest

from shared.charts import Band, Frame, Series, bar_chart, line_chart, num, page, scatter_chart, stacked_bars
from shared.charts.coefficients import base_history, base_panel, term_label, term_unit
from shared.charts.page import significant
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


@pytest.mark.parametrize(("value", "text"), [
    (25.0, "25"), (0.08, "0.08"), (0.00042, "0.00042"), (1e-6, "1e-6"), (2.5e-5, "2.5e-5"), (12_345.6, "12,346"),
    (0.0, "0"), (1234567.0, "1.23e6"), (-0.125, "-0.125"),
])
def test_significant_digits_read_across_orders_of_magnitude(value: float, text: str) -> None:
    assert significant(value) == text
    assert num(value, "k", sig=3) == f'<span class="num" data-key="k" data-value="{value!r}">{text}</span>'


@pytest.mark.parametrize(("term", "unit", "label"), [
    ("1", "ms", "constant"), ("effective_input_tokens", "ms/token", "effective_input_tokens"),
    ("num_request_waiting", "ms/request", "num_request_waiting"), ("kv_cache_percentage", "ms at full KV cache",
                                                                   "kv_cache_percentage"),
    ("effective_input_tokens*input_token_length", "ms/token²", "effective_input_tokens × input_token_length"),
    ("num_request_running*decode_tokens_in_flight", "ms/request·token",
     "num_request_running × decode_tokens_in_flight"),
])
def test_each_term_has_a_unit_and_a_label(term: str, unit: str, label: str) -> None:
    assert (term_unit(term), term_label(term)) == (unit, label)


def _base_doc() -> dict[str, Any]:
    fit = {"rows": 500, "source": "fit"}
    series = [{"at": at, "version": version, "published": version is not None, **fit,
               "coefficients": {"1": constant, "num_request_waiting": waiting}}
              for at, version, constant, waiting in ((100.0, 2, 20.0, 50.0), (130.0, None, 40.0, 0.0),
                                                     (160.0, 3, 22.0, 45.0))]
    live = {"version": 3, "coefficients": {"num_request_waiting": 45.0, "1": 22.0}, **fit}
    return base_history("ttft", live, series)


def test_a_base_panel_tables_the_live_coefficients_and_charts_each_term_over_time() -> None:
    doc = _base_doc()
    assert doc["terms"] == ["1", "num_request_waiting"]  # shared.base.TERMS order, not the live dict's
    html = "".join(base_panel("TTFT base", doc, "models.ttft.base", 200.0, "TTFT", newest="newest fit"))
    assert 'data-key="models.ttft.base.live.coefficients.num_request_waiting" data-value="45.0">45<' in html
    assert 'data-key="models.ttft.base.series.2.coefficients.1" data-value="22.0">22<' in html
    assert 'data-key="models.ttft.base.live.version" data-value="3"' in html and "<th class=\"\">newest fit" in html
    charts = re.findall(r'<svg class="chart" data-points="(\d+)"[^>]*aria-label="([^"]+)"', html)
    assert charts == [("6", "TTFT base: constant"), ("6", "TTFT base: num_request_waiting")]  # 2 × 2 steps, now, 1 dot
    assert 'fitted on <span class="num" data-key="models.ttft.base.live.rows" data-value="500">' in html
    assert "grey dots: fits that were not published" in html
    constant = html[html.index('aria-label="TTFT base: constant"'):]
    assert constant.index("fit not published") < constant.index("</svg>") and ">ms<" in constant


def test_a_base_panel_without_a_live_base_says_so() -> None:
    html = "".join(base_panel("TPOT base", base_history("tpot", None, []), "k", 0.0, "TPOT"))
    assert "No live base" in html and "<svg" not in html


def test_with_no_publish_shown_the_live_value_was_served_all_along() -> None:
    doc = _base_doc()
    doc["series"] = [p for p in doc["series"] if not p["published"]]
    doc["live"] = {**doc["live"], "source": "default", "rows": 0}
    svg = "".join(base_panel("TTFT base", doc, "k", 200.0, "TTFT"))
    assert "live v<span" in svg and "the prior's default coefficients" in svg and "fitted on" not in svg
    first = re.search(r'<polyline class="mark" points="([^"]+)"', svg).group(1).split()  # type: ignore[union-attr]
    assert len(first) == 2 and first[0].split(",")[1] == first[1].split(",")[1]  # flat: 22 ms from t = 130 to now
