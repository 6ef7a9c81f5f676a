"""The proxy's request log: records per finished request, exact coverage since start, paging by sequence."""

from __future__ import annotations

from router_client.request_log import RequestLog
from router_client.router import Decision


def _decision(i: int, pool: str = "short", predicted: float | None = 100.0, raw: float | None = 50.0) -> Decision:
    return Decision(f"r{i}", pool, f"http://pod-{i % 2}", False, "ok", predicted, 10.0,
                    raw_predicted_ttft_ms=raw, raw_predicted_tpot_ms=10.0)


def test_coverage_since_start_counts_acted_on_and_raw_predictions() -> None:
    log = RequestLog(size=2)
    for i, ttft in enumerate((80.0, 120.0, 40.0, 99.0)):
        log.add(_decision(i), ttft, 12.0 if i % 2 else 8.0, 10, None, 1.0, 1.5, 500.0)
    log.add(_decision(9), None, None, 0, "midstream", 1.0, 1.5, 5.0)
    log.add(_decision(10, predicted=None, raw=None), 70.0, 5.0, 10, None, 1.0, 1.5, 500.0)  # a fallback decision
    totals = log.totals()["short"]
    assert totals["requests"] == 6 and totals["errors"] == 1
    assert totals["ttft"] == {"pairs": 4, "coverage": 0.75, "model_coverage": 0.25}  # ≤100 thrice, ≤50 once
    assert totals["tpot"]["pairs"] == 5 and totals["tpot"]["coverage"] == 0.6  # 8 ≤ 10, 12 > 10; fallback 5 ≤ 10
    assert [r.seq for r in log.after(0, 10)] == [5, 6] and log.last_seq == 6  # only the newest two are kept


def test_records_carry_wall_clock_stamps_in_order() -> None:
    log = RequestLog()
    log.add(_decision(1), 30.0, 5.0, 4, None, 100.0, 100.002, 80.0)
    rec = log.after(0, 1)[0]
    assert rec.dispatched_at - rec.received_at == 0.002 or abs(rec.dispatched_at - rec.received_at - 0.002) < 1e-6
    assert abs(rec.first_token_at - rec.dispatched_at - 0.030) < 1e-6  # type: ignore[operator]
    assert abs(rec.ended_at - rec.dispatched_at - 0.080) < 1e-6
    assert abs(log.wall(100.0) - rec.received_at) < 1e-9


def test_paging_and_recent_per_pool() -> None:
    log = RequestLog()
    for i in range(10):
        log.add(_decision(i, "short" if i % 3 else "long"), 10.0, 1.0, 2, None, 0.0, 0.0, 20.0)
    assert [r.seq for r in log.after(3, 4)] == [4, 5, 6, 7]
    assert log.after(10, 5) == [] and [r.seq for r in log.after(0, 100)][-1] == 10
    assert [r.request_id for r in log.recent("long", 2)] == ["r6", "r9"]
    assert len(log.recent("short", 100)) == 6
