"""``demo-report.html``: the demo's report with its plots embedded (SVG, one file, opens offline).

What it shows, per pool: the router-measured TTFT/TPOT of every request against the p90 predicted at
dispatch (y = x: points below are covered), coverage over the run (rolling, with the moment the first
trained bundle was served), client-observed vs router-measured TTFT over time, and where the client's TTFT
goes (``demo.truth.PARTS``). The verdict line comes first.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from demo.truth import MIN_WINDOW_PAIRS, PARTS, TARGETS, WINDOW_FLOOR, WINDOW_S, Joined, pairs
from demo.verdict import judgement_text
from demo.watch import BundleSeen
from shared.charts import Frame, Series, cards, esc, line_chart, page, row, scatter_chart, stacked_bars, table

ROLLING = 50
BIN_S = 5.0


def _rolling(joined: Sequence[Joined], target: str, t0: float) -> tuple[list[float], list[float]]:
    pts = [(j.dispatched_at - t0, float(j.measured[target] <= j.predicted[target]))  # type: ignore[operator]
           for j in joined if j.predicted[target] is not None and j.measured[target] is not None]
    size = window_size(len(pts))
    xs, ys = [], []
    for i in range(size - 1, len(pts), max(1, size // 5)):
        window = pts[i - size + 1: i + 1]
        xs.append(window[-1][0])
        ys.append(sum(v for _, v in window) / size)
    return xs, ys


def window_size(n: int) -> int:
    """Requests per rolling-coverage point: ``ROLLING``, fewer on short runs (at least 10)."""
    return max(1, min(ROLLING, max(10, n // 5), n))


def _first_trained(pool: str, bundles: Sequence[BundleSeen], t0: float) -> float | None:
    times = [b.at_wall - t0 for b in bundles if b.pool == pool and not b.prior]
    return min(times) if times else None


def _coverage_chart(pool: str, joined: Sequence[Joined], bundles: Sequence[BundleSeen], t0: float, q: float) -> str:
    series = [Series(t.upper(), *_rolling(joined, t, t0)) for t in TARGETS]
    first = _first_trained(pool, bundles, t0)
    if first is not None:
        series.append(Series("first trained bundle", [first, first], [0.0, 1.0], color="#777", dashed=True))
    size = window_size(len(joined))
    frame = Frame(f"{pool}: coverage over the run (last {size} requests)", "seconds since the load started",
                  "share measured ≤ predicted",
                  hlines=((q, f"target {q:.2f}"), (WINDOW_FLOOR, f"{WINDOW_S:g} s window floor {WINDOW_FLOOR:.2f}")))
    return line_chart(series, frame, y_range=(0.0, 1.0))


def _binned_means(joined: Sequence[Joined], t0: float) -> tuple[list[float], list[list[float | None]]]:
    bins: dict[int, list[Joined]] = {}
    for j in joined:
        bins.setdefault(int((j.dispatched_at - t0) // BIN_S), []).append(j)
    xs, cols = [], [[], [], []]  # type: ignore[var-annotated]

    def mean(values: list[float | None]) -> float | None:
        got = [v for v in values if v is not None]
        return sum(got) / len(got) if got else None

    for b in sorted(bins):
        xs.append((b + 0.5) * BIN_S)
        cols[0].append(mean([j.client_ttft_ms for j in bins[b]]))
        cols[1].append(mean([j.measured["ttft"] for j in bins[b]]))
        cols[2].append(mean([j.predicted["ttft"] for j in bins[b]]))
    return xs, cols


def _ttft_chart(pool: str, joined: Sequence[Joined], t0: float) -> str:
    xs, (client, router, predicted) = _binned_means(joined, t0)
    series = [Series("client-observed", xs, client), Series("router-measured", xs, router),
              Series("predicted p90", xs, predicted, dashed=True)]
    return line_chart(series, Frame(f"{pool}: mean TTFT per {BIN_S:g} s", "seconds since the load started", "ms"),
                      include_zero=True)


def _scatter(pool: str, joined: Sequence[Joined], target: str) -> str:
    got = pairs(joined, target)
    covered = sum(m <= p for p, m in got)
    share = f", coverage {100 * covered / len(got):.0f} %" if got else ""
    frame = Frame(f"{pool}: {target.upper()} per request ({len(got)}{share})", "predicted p90 at dispatch (ms)",
                  "measured by the router (ms)", height=260)
    return scatter_chart([p for p, _ in got], [m for _, m in got], frame, covered_label="measured ≤ predicted")


def _accuracy_table(acc: dict[str, Any], judged: dict[str, Any]) -> str:
    def cov(s: dict[str, Any]) -> str:
        return f"{100 * s['coverage']:.1f} % ({s['pairs']})" if s.get("pairs") else "–"

    rows = [[esc(pool), t.upper(), cov(a), esc(judgement_text(judged[pool][t])), cov(a["model"]), cov(a["prior"]),
             cov(a["trained"]), cov(a["first_half"]), cov(a["second_half"]), _lowest_window(a.get("windows") or {}),
             esc(a.get("mean_predicted_ms", "–")), esc(a.get("mean_measured_ms", "–"))]
            for pool, targets in acc.items() for t, a in targets.items()]
    return table(["pool", "target", "coverage (pairs)", "verdict", "raw model", "prior bundle", "trained bundles",
                  "first half", "second half",
                  f"lowest {WINDOW_S:g} s window after the first trained bundle (pairs, from)", "mean predicted ms",
                  "mean measured ms"], rows, left=2)


def _lowest_window(w: dict[str, Any]) -> str:
    """The lowest coverage among the windows with enough pairs (``demo.truth.windowed``); below the floor in bold."""
    if not w.get("judged"):
        return f"– (no window of ≥ {MIN_WINDOW_PAIRS} pairs)"
    low = w["lowest"]
    text = f"{100 * low['coverage']:.1f} % ({low['pairs']}, +{low['from_s']:g} s)"
    return f"<b>{text} ✗</b>" if low["coverage"] < WINDOW_FLOOR else text


def _overhead_section(obs: dict[str, Any]) -> list[str]:
    groups = [(pool, [(name, o["parts"][name]["mean_ms"]) for name in PARTS]) for pool, o in obs.items()
              if pool != "load_generator_loop_lag"]
    chart = stacked_bars(groups, Frame("where the client's TTFT goes (mean ms per request)", width=900),
                         value_fmt=lambda v: f"{v:.1f} ms")
    rows = [[esc(pool), f"{o['client_ttft']['mean_ms']:.1f}"] + [f"{o['parts'][n]['mean_ms']:.1f} / "
                                                                 f"{o['parts'][n]['p90_ms']:.1f}" for n in PARTS]
            for pool, o in obs.items() if pool != "load_generator_loop_lag"]
    lag = obs.get("load_generator_loop_lag") or {}
    note = (f'<p class="note">The load generator\'s own event loop ran {lag["mean_ms"]:.1f} ms late on average '
            f'(p90 {lag["p90_ms"]:.1f} ms): that delay lands in its two parts, before the request leaves and after '
            f"the first token arrives.</p>") if lag else ""
    return [chart, table(["pool", "client TTFT mean ms", *[f"{n} mean / p90 ms" for n in PARTS]], rows), note]


def render(summary: dict[str, Any], joined: Sequence[Joined], bundles: Sequence[BundleSeen], t0: float) -> str:
    v = summary["verdict"]
    q = 0.9
    body = [f'<p class="{"ok" if v["met"] else "bad"}">{esc(v["line"])}</p>',
            cards([("requests", esc(summary["requests"])), ("joined with the router's records",
                                                            esc(summary["requests_joined"])),
                   ("shed (429)", esc(summary["shed"])), ("errors", esc(summary["errors"])),
                   ("fallback decisions", esc(summary["fallback_decisions"])),
                   ("bundles published", esc(summary["retrains"]))]),
            "<h2>Predictions vs what the router measured</h2>",
            '<p class="note">The router predicts the p90 of the latency <i>it</i> measures: TTFT from sending the '
            "request to the pod until the first content chunk, TPOT between tokens. Coverage = share of requests "
            "whose measured latency was at or below the prediction made at dispatch (target 90 %), judged per pool "
            "and target against the two-sided 99 % binomial interval for its pair count.</p>",
            _accuracy_table(summary["accuracy"], v["judged"])]
    for pool in sorted({j.pool for j in joined}):
        mine = [j for j in joined if j.pool == pool]
        body += [f"<h3>pool {esc(pool)}</h3>", row(*(_scatter(pool, mine, t) for t in TARGETS)),
                 row(_coverage_chart(pool, mine, bundles, t0, q), _ttft_chart(pool, mine, t0))]
    body += ["<h2>Client-observed latency, separately</h2>",
             '<p class="note">The load generator measures more than the router: its own scheduling, the loopback '
             "hop, the proxy's decision and the relay back. Its TTFT is split here using the wall-clock stamps both "
             "sides recorded for the same request id.</p>", *_overhead_section(summary["client_observed"]),
             "<h2>Retrains</h2>", table(["retrain log line"], [[esc(x)] for x in summary["retrain_log"]] or [["–"]])]
    s = summary["settings"]
    subtitle = esc(f"{s['duration_s']:g} s of {s['trace']} from +{s.get('trace_start_s', 0):g} s at rate "
                   f"×{s['rate_scale']:g}, pods at time-scale "
                   f"{s['time_scale']:g}, retrain every {s['retrain_interval_s']:g} s, seed {s['seed']}")
    return page("latency-router demo report", subtitle, body)


def write(path: Path, summary: dict[str, Any], joined: Sequence[Joined], bundles: Sequence[BundleSeen],
          t0: float) -> None:
    path.write_text(render(summary, joined, bundles, t0), encoding="utf-8")
