"""``GET /ui``: the trainer's status page, rendered from the ``/ui/data`` document (pure: dict → HTML).

Per model: coverage and pinball over time (the live model's prequential error as a line, every retrain's
holdout score as a dot), newest rows actual vs predicted (y = x line, p50–p99 band), feature importances of
the live bundle, the physical base's coefficients (live and newest fit, with units; one small chart per term
over time: ``shared.charts.coefficients``), the retrain history with what was decided and why. Service-wide:
bundle, durable log, ingest rate, quarantine and drift alarms. Every number carries ``data-key`` = its path in
``/ui/data``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from shared.charts import Band, Frame, Series, bar_chart, cards, esc, line_chart, num, page, row, scatter_chart, table
from shared.charts.coefficients import base_panel

TIME_AXIS = "seconds (0 = now)"
HISTORY_ROWS = 25


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(at))


def _ago(xs: Sequence[float], now: float) -> list[float]:
    return [x - now for x in xs]


def _coverage_chart(name: str, m: dict[str, Any], d: dict[str, Any]) -> str:
    live, retrains, now = m["live_series"], m["retrains"], d["now"]
    low, high = d["drift"]["band"]
    q = d["quantile"]
    series = [Series("live (prequential)", _ago([p["at"] for p in live], now), [p["coverage"] for p in live]),
              Series("retrain holdout", _ago([r["at"] for r in retrains], now), [r["coverage"] for r in retrains],
                     markers=True, line=False)]
    frame = Frame(f"{name.upper()} coverage (target {q:.2f})", TIME_AXIS, "share of actual ≤ p" + f"{100 * q:.0f}",
                  hlines=((q, f"target {q:.2f}"), (low, f"alarm < {low:.2f}"), (high, f"alarm > {high:.2f}")))
    return line_chart(series, frame, y_range=(min([0.5, *[v for s in series for v in s.ys if v is not None]]), 1.0))


def _pinball_chart(name: str, m: dict[str, Any], d: dict[str, Any]) -> str:
    live, retrains, now = m["live_series"], m["retrains"], d["now"]
    series = [Series("live (prequential)", _ago([p["at"] for p in live], now), [p["pinball"] for p in live]),
              Series("retrain holdout", _ago([r["at"] for r in retrains], now), [r["pinball"] for r in retrains],
                     markers=True, line=False),
              Series("reference slice", _ago([r["at"] for r in retrains], now),
                     [r["reference_metrics"].get("pinball") for r in retrains], markers=True, line=False)]
    return line_chart(series, Frame(f"{name.upper()} pinball loss (ms)", TIME_AXIS, "pinball (ms)"), include_zero=True)


def _scatter(name: str, m: dict[str, Any]) -> str:
    recent = m["recent"]
    primary = recent["primary"]
    if not recent["n"] or primary is None:
        return scatter_chart([], [], Frame(f"{name.upper()} newest rows: actual vs predicted"))
    pred, actual = recent["predicted"], recent["actual"]
    keys = sorted(pred, key=float)
    order = sorted(range(len(actual)), key=lambda i: pred[primary][i])
    xs = [pred[primary][i] for i in order]
    band = Band(f"p{float(keys[0]) * 100:g}–p{float(keys[-1]) * 100:g}", xs, [pred[keys[0]][i] for i in order],
                [pred[keys[-1]][i] for i in order]) if len(keys) > 1 else None
    cov = recent["coverage"]
    frame = Frame(f"{name.upper()} newest {recent['n']} rows (coverage {100 * cov:.0f} %)",
                  f"predicted p{float(primary) * 100:g} (ms)", "actual (ms)", height=260)
    return scatter_chart(xs, [actual[i] for i in order], frame, band=band, covered_label="actual ≤ predicted")


def _importances(name: str, m: dict[str, Any]) -> str:
    items = list(m["live_entry"].get("importances", {}).items())[:12]
    return bar_chart(items, Frame(f"{name.upper()} feature importance (gain share, live bundle)"),
                     value_fmt=lambda v: f"{100 * v:.1f} %", empty="no importances (prior bundle)")


def _selection(r: dict[str, Any]) -> str:
    sel, metric = r["selection"], {"mae_ms": "MAE ms", "log_rmse": "log-RMSE"}.get(r["selection_metric"], "")
    return esc(f"{metric}: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(sel.items(), key=lambda kv: kv[1])))


def _history_table(name: str, m: dict[str, Any]) -> str:
    rows = []
    for i, r in reversed(list(enumerate(m["retrains"]))[-HISTORY_ROWS:]):
        key = f"models.{name}.retrains.{i}"
        decision = f'<span class="{"ok" if r["decision"] == "published" else "warn"}">{esc(r["decision"])}</span>'
        rows.append([esc(_clock(r["at"])), num(r["rows"], f"{key}.rows"), num(r["holdout_rows"], f"{key}.holdout_rows"),
                     num(r["fit_s"], f"{key}.fit_s"), num(r["mae"], f"{key}.mae"), num(r["rmse"], f"{key}.rmse"),
                     num(r["coverage"], f"{key}.coverage", 3, pct=True), num(r["pinball"], f"{key}.pinball"),
                     num(r["reference_metrics"].get("pinball"), f"{key}.reference_metrics.pinball"),
                     decision + (f" v{r['version']}" if r["version"] is not None else ""),
                     esc(r["candidate"]), f"{r['location_rounds']}+{r['quantile_rounds']}", _selection(r),
                     esc(r["reason"])])
    if not rows:
        return '<p class="note">No retrain yet: a model retrains when it holds enough rows and new rows arrived.</p>'
    return table(["time (UTC)", "rows", "holdout", "fit s", "MAE", "RMSE", "coverage", "pinball", "ref. pinball",
                  "decision", "chosen", "rounds", "selection (lower won)", "why"], rows, left=1, text=(9, 10, 12, 13))


def _live_cards(name: str, m: dict[str, Any]) -> str:
    live, entry, window = m["live"], m["live_entry"], m["window"]
    k = f"models.{name}"
    alarm = '<span class="bad">ALARM</span>' if live["alarm"] else '<span class="ok">ok</span>'
    last = m["retrains"][-1]["decision"] if m["retrains"] else "–"
    return cards([("live coverage (prequential)", num(live["coverage"], f"{k}.live.coverage", 3, pct=True)),
                  ("live pinball (ms)", num(live["pinball"], f"{k}.live.pinball")),
                  ("rows predicted live", num(live["rows"], f"{k}.live.rows")), ("drift alarm", alarm),
                  ("window train / holdout", num(window["train"], f"{k}.window.train") + " / "
                   + num(window["holdout"], f"{k}.window.holdout")),
                  ("retrains shown", num(len(m["retrains"]), f"{k}.retrains.length")), ("last decision", esc(last)),
                  ("live configuration", esc(entry.get("candidate", "prior" if entry.get("prior") else "–")))])


def _model_section(name: str, m: dict[str, Any], d: dict[str, Any]) -> list[str]:
    return [f"<h2>{name.upper()} model</h2>", _live_cards(name, m),
            row(_coverage_chart(name, m, d), _pinball_chart(name, m, d)),
            row(_scatter(name, m), _importances(name, m)),
            *base_panel(f"{name.upper()} physical base: coefficients (ms per unit of each term) over time", m["base"],
                        f"models.{name}.base", d["now"], name.upper(), newest="newest fit"),
            f"<h3>{name.upper()} retrain history (newest first)</h3>", _history_table(name, m)]


def _service_section(d: dict[str, Any]) -> list[str]:
    b, r, q = d["bundle"] or {}, d["retrain"], d["quarantine"]
    series = d["ingest"]["series"]
    now = d["now"]
    rate = series[-1][1] if series else 0.0
    version = num(b.get("version"), "bundle.version") + (" (prior)" if b.get("prior") else "")
    top = cards([("live bundle", version), ("durable rows", num(d["durable"]["rows"], "durable.rows")),
                 ("durable bytes", num(d["durable"]["bytes"], "durable.bytes")),
                 ("rows ingested (since start)", num(d["ingest"]["total"], "ingest.total")),
                 ("ingest now (rows/s)", num(rate, "ingest.series.-1.1", 1)),
                 ("retrain cycles / failures", num(r["cycles"], "retrain.cycles") + " / "
                  + num(r["failures"], "retrain.failures")),
                 ("quarantined now / total", num(q["held"], "quarantine.held") + " / "
                  + num(q["total_held"], "quarantine.total_held")),
                 ("released from quarantine", num(q["released"], "quarantine.released"))])
    ingest = line_chart([Series("rows/s", _ago([p[0] for p in series], now), [p[1] for p in series])],
                        Frame(f"ingest rate ({d['ingest']['bin_s']:g} s bins)", TIME_AXIS, "rows/s"),
                        include_zero=True)
    events = d["drift"]["events"]
    alarms = table(["time (UTC)", "model", "change", "coverage"],
                   [[esc(_clock(e["at"])), esc(e["model"]), esc("raised" if e["raised"] else "cleared"),
                     f"{100 * e['coverage']:.1f} %"] for e in reversed(events)]) if events else (
        '<p class="note">No drift alarm so far (band '
        f'{d["drift"]["band"][0]:.2f}–{d["drift"]["band"][1]:.2f}, hold {d["drift"]["hold_s"]:g} s).</p>')
    error = f'<p class="bad">last retrain error: {esc(r["last_error"])}</p>' if r.get("last_error") else ""
    return [top, error, row(ingest), "<h3>Drift alarms</h3>", alarms]


def render(d: dict[str, Any], refresh_s: int) -> str:
    b = d["bundle"] or {}
    subtitle = (f"p{100 * d['quantile']:g} {esc(d['objective'])} models · bundle v{esc(b.get('version'))} · "
                f"retrain every {d['retrain']['interval_s']:g} s · generated {esc(d['generated_at'])} · "
                f"JSON: <a href=\"/ui/data\">/ui/data</a>")
    body = _service_section(d)
    for name, m in d["models"].items():
        body += _model_section(name, m, d)
    return page("latency-trainer status", subtitle, body, refresh_s)
