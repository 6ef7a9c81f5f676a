"""The proxy's ``GET /ui``: the router's status page, rendered from the ``/ui/data`` document (dict → HTML).

Per pool: traffic share per pod over time, predicted (at dispatch) vs measured TTFT/TPOT over time and per
request, per-pod correction factors over time, drift state, shed reasons and fallback decisions, the live
bundle its predictors serve and per model its physical base's coefficients at each version read (a table with
units and one small chart per term: ``shared.charts.coefficients``); the pool classifier's thresholds and pool
tuning's recommendation when present; P/D pools' pairs, times and decider choices (``router_client/pd/ui.py``).
Every number carries ``data-key`` = its path in ``/ui/data`` (``status.pools.0.pods.1.routed`` …).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from router_client.pd.ui import section as pd_section
from shared.charts import Frame, Series, bar_chart, cards, esc, line_chart, num, page, row, scatter_chart, table
from shared.charts.coefficients import base_panel

TIME_AXIS = "seconds (0 = now)"
TARGETS = ("ttft", "tpot")


def _short(url: str) -> str:
    return url.split("://", 1)[-1]


def _xs(samples: Sequence[dict[str, Any]], now: float) -> list[float]:
    return [s["at"] - now for s in samples]


def _pool_samples(d: dict[str, Any], pool: str) -> list[dict[str, Any]]:
    return [s["pools"][pool] | {"at": s["at"]} for s in d["history"] if pool in s["pools"]]


def _share_chart(pool: dict[str, Any], samples: list[dict[str, Any]], now: float) -> str:
    series = [Series(_short(p["url"]), _xs(samples, now), [s["pods"].get(p["url"], {}).get("share") for s in samples])
              for p in pool["pods"]]
    return line_chart(series, Frame(f"{pool['name']}: traffic share per pod", TIME_AXIS, "share of decisions"),
                      y_range=(0.0, 1.0))


def _means_chart(pool: dict[str, Any], samples: list[dict[str, Any]], now: float, target: str) -> str:
    xs = _xs(samples, now)
    series = [Series("predicted p90 (mean)", xs, [s[target].get("predicted_mean_ms") for s in samples], dashed=True),
              Series("measured (mean)", xs, [s[target].get("measured_mean_ms") for s in samples])]
    title = f"{pool['name']}: {target.upper()} predicted vs measured (time-weighted means)"
    return line_chart(series, Frame(title, TIME_AXIS, "ms"), include_zero=True)


def _correction_chart(pool: dict[str, Any], samples: list[dict[str, Any]], now: float, target: str) -> str:
    series = [Series(_short(p["url"]), _xs(samples, now),
                     [s["pods"].get(p["url"], {}).get(target, {}).get("correction") for s in samples])
              for p in pool["pods"]]
    frame = Frame(f"{pool['name']}: per-pod {target.upper()} correction factor", TIME_AXIS, "× model prediction",
                  hlines=((1.0, "1 = no correction"),))
    return line_chart(series, frame)


def _scatter(name: str, recent: dict[str, Any], target: str, q: float) -> str:
    r = recent[target]
    covered = sum(m <= p for p, m in zip(r["predicted"], r["measured"], strict=True))
    n = len(r["measured"])
    share = f" (coverage {100 * covered / n:.0f} %)" if n else ""
    frame = Frame(f"{name}: {target.upper()} last {n} requests{share}", f"predicted p{100 * q:g} at dispatch (ms)",
                  "measured by the router (ms)", height=260)
    return scatter_chart(r["predicted"], r["measured"], frame, covered_label="measured ≤ predicted")


def _reasons(pool: dict[str, Any]) -> str:
    items = [(k if k.startswith("shed") else f"shed: {k}", float(v)) for k, v in pool["shed"].items()]
    items += [(f"fallback: {k}", float(v)) for k, v in pool["fallbacks"].items()]
    return bar_chart(items, Frame(f"{pool['name']}: sheds and fallback decisions (since start)"),
                     value_fmt=lambda v: f"{v:.0f}", empty="no sheds, no fallbacks")


def _pod_rows(i: int, pool: dict[str, Any]) -> list[list[str]]:
    out = []
    for j, p in enumerate(pool["pods"]):
        k = f"status.pools.{i}.pods.{j}"
        cells = [esc(_short(p["url"])), esc(p.get("pod_class", "")), esc(p.get("state") or ""),
                 num(p["share"], f"{k}.share", 3),
                 num(p["routed"], f"{k}.routed"), num(p["in_flight"], f"{k}.in_flight"),
                 num(p["waiting"], f"{k}.waiting"), num(p["kv_cache"], f"{k}.kv_cache", 3)]
        for t in TARGETS:
            s = p[t]
            alarm = '<span class="bad">ALARM</span>' if s.get("alarm") else "ok" if s.get("pairs") else "–"
            cells += [num(s.get("predicted_mean_ms"), f"{k}.{t}.predicted_mean_ms", 1),
                      num(s.get("measured_mean_ms"), f"{k}.{t}.measured_mean_ms", 1),
                      num(s.get("coverage"), f"{k}.{t}.coverage", 3, pct=True),
                      num(s.get("model_coverage"), f"{k}.{t}.model_coverage", 3, pct=True),
                      num(s["correction"], f"{k}.{t}.correction", 3), alarm]
        out.append(cells)
    return out


def _pod_table(i: int, pool: dict[str, Any]) -> str:
    per = ["pred. mean ms", "meas. mean ms", "coverage", "raw model cov.", "correction", "drift"]
    headers = ["pod", "class", "state", "share", "routed", "in flight", "waiting", "KV"] + [
        f"{t.upper()} {h}" for t in TARGETS for h in per]
    return table(headers, _pod_rows(i, pool), left=3)


def _discovery(i: int, pool: dict[str, Any]) -> str:
    """One line on where a discovered pool's pods come from ('' for a static pool)."""
    d, k = pool.get("discovery"), f"status.pools.{i}.discovery"
    if not d:
        return ""
    error = f": {esc(d['last_error'])}" if d.get("last_error") else ""
    return (f"<p>pods discovered from <code>{esc(d['dns'])}</code> every {num(d['refresh_s'], f'{k}.refresh_s')} s "
            f"(last resolution {esc(d['last_outcome'])}{error}, "
            f"{num(d.get('last_refresh_age_s'), f'{k}.last_refresh_age_s', 1)} s ago)</p>")


def _pool_cards(i: int, pool: dict[str, Any], totals: dict[str, Any]) -> str:
    name = pool["name"]
    t = totals.get(name, {})
    items = [("requests finished", num(t.get("requests", 0), f"totals.{name}.requests"))]
    for target in TARGETS:
        cov = t.get(target, {})
        items.append((f"{target.upper()} coverage since start",
                      num(cov.get("coverage"), f"totals.{name}.{target}.coverage", 3, pct=True)))
        items.append((f"{target.upper()} coverage recent", num(pool[target].get("coverage"),
                                                               f"status.pools.{i}.{target}.coverage", 3, pct=True)))
    alarms = [tg.upper() for tg in TARGETS if pool[tg].get("alarm")]
    items.append(("drift alarm", f'<span class="bad">{esc(", ".join(alarms))}</span>' if alarms
                  else '<span class="ok">none</span>'))
    items.append(("shed", num(sum(pool["shed"].values()), f"status.pools.{i}.shed.total")))
    items.append(("fallback decisions", num(sum(pool["fallbacks"].values()), f"status.pools.{i}.fallbacks.total")))
    return cards(items)


def _model_line(i: int, pool: dict[str, Any]) -> str:
    """Which bundle the pool's predictors serve, where and when it was read, failed reads."""
    m, k = pool["model"], f"status.pools.{i}.model"
    bundle = m["bundle"]
    error = f'; <span class="bad">last read failed: {esc(m["last_error"])}</span>' if m["last_error"] else ""
    failed = f"failed reads {num(m['errors'], f'{k}.errors')}{error}"
    if bundle is None:
        return f'<p class="note">No model read from the predictors yet ({failed}).</p>'
    chosen = ", ".join(f"{esc(n.upper())} {esc(e['candidate'] or '–')}" for n, e in bundle["models"].items())
    read = time.strftime("%H:%M:%S", time.gmtime(m["read_at"]))
    prior = " (prior)" if bundle["prior"] else ""
    return (f"<p>bundle v{num(bundle['version'], f'{k}.bundle.version')}{prior} served, read from "
            f"<code>{esc(m['url'])}</code>/status at {read} UTC; configuration chosen: {chosen}; {failed}</p>")


def _models_section(i: int, pool: dict[str, Any], d: dict[str, Any]) -> list[str]:
    name = pool["name"]
    if pool.get("model") is None:
        return []
    out = [f"<h3>pool {esc(name)}: live models (from its predictors)</h3>", _model_line(i, pool)]
    for model, doc in d["bases"].get(name, {}).items():
        out += base_panel(f"{name}: {model.upper()} physical base: coefficients (ms per unit of each term) at each "
                          "bundle version", doc, f"bases.{name}.{model}", d["now"], f"{name} {model.upper()}")
    return out


def _pool_section(i: int, pool: dict[str, Any], d: dict[str, Any]) -> list[str]:
    samples, now, q = _pool_samples(d, pool["name"]), d["now"], d["status"]["prediction_quantile"]
    recent = d["recent"].get(pool["name"], {"n": 0, **{t: {"predicted": [], "measured": []} for t in TARGETS}})
    return [f"<h2>pool {esc(pool['name'])}</h2>", _discovery(i, pool), _pool_cards(i, pool, d["totals"]),
            row(_share_chart(pool, samples, now), _reasons(pool)),
            row(*(_means_chart(pool, samples, now, t) for t in TARGETS)),
            row(*(_scatter(pool["name"], recent, t, q) for t in TARGETS)),
            row(*(_correction_chart(pool, samples, now, t) for t in TARGETS)),
            _pod_table(i, pool), *_models_section(i, pool, d)]


def _classifier_section(d: dict[str, Any]) -> list[str]:
    c = d["classifier"]
    total = c["total_threshold_tokens"]
    rows = [["expected output above", num(c["output_threshold_tokens"], "classifier.output_threshold_tokens"),
             "tokens → " + esc(c["long_pool"])],
            ["prompt + expected output above", num(total, "classifier.total_threshold_tokens") if total is not None
             else "–", "tokens → " + esc(c["long_pool"])]]
    rows += [[f"max context of {esc(p)}", num(n, f"classifier.max_context.{p}"), ""]
             for p, n in c["max_context"].items()]
    out = ["<h2>pool classifier</h2>", table(["rule", "threshold", ""], rows, left=1)]
    tuning = d.get("tuning")
    if tuning:
        out.append("<h3>pool tuning</h3>" + _tuning(tuning))
    return out


def _tuning(t: dict[str, Any]) -> str:
    last = t.get("last") or {}
    rows = [[esc(k), esc(v)] for k, v in t.items() if k != "last"]
    rows += [[esc(f"last recommendation: {k}"), esc(v)] for k, v in last.items()]
    return table(["", "value"], rows, left=2)


def render(d: dict[str, Any], refresh_s: int) -> str:
    s = d["status"]
    subtitle = (f"routing on the predicted p{100 * s['prediction_quantile']:g} · generated {esc(s['generated_at'])} · "
                f"{d['requests_logged']} requests logged · JSON: <a href=\"/ui/data\">/ui/data</a>, "
                f"<a href=\"/status\">/status</a>")
    body = _classifier_section(d)
    for i, pool in enumerate(s["pools"]):
        body += _pool_section(i, pool, d)
    body += pd_section(d.get("pd"))
    return page("latency-router status", subtitle, body, refresh_s)
