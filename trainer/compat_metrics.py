"""The llm-d ``/metrics`` compatibility lines (contract §4), written literally.

One sample per line, ``name{labels} value``; unlabelled samples carry literal empty braces
and no line has a trailing timestamp (the Go client parses the text after the last space).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from shared.features import MODEL_NAMES
from trainer.evaluate import Scores
from trainer.window import N_BUCKETS, N_CACHE, N_PREFIX, N_QUEUE, Rows, bucket_triplet

PREFIX_RANGES = ("0.00-0.25", "0.25-0.50", "0.50-0.75", "0.75-1.00")


def _num(value: float) -> str:
    return repr(round(float(value), 6)) if np.isfinite(value) else "0.0"


def header_lines(model_type: str, objective: str, quantile: float, ensemble_mode: bool) -> list[str]:
    return [f'model_type{{type="{model_type}"}} 1', f'objective_type{{type="{objective}"}} 1',
            f"model_quantile{{}} {_num(quantile)}", "ensemble_active{} 0", f"ensemble_mode{{}} {int(ensemble_mode)}",
            "ttft_intercept{} 0.0", "tpot_intercept{} 0.0"]


def importance_lines(importances: Mapping[str, Mapping[str, float]]) -> list[str]:
    return [f'{name}_importance{{feature="{feature}"}} {_num(value)}'
            for name in MODEL_NAMES for feature, value in importances.get(name, {}).items()]


def bucket_lines(counts: Mapping[str, np.ndarray]) -> list[str]:
    lines: list[str] = []
    for name in MODEL_NAMES:
        per = counts.get(name, np.zeros(N_BUCKETS, np.int64))
        for bucket in range(N_BUCKETS):
            q, c, p = bucket_triplet(bucket)
            lines.append(f'training_samples_count{{model="{name}",queue_bucket="{q}",cache_bucket="{c}",'
                         f'prefix_bucket="{p}"}} {int(per[bucket])}')
        cube = per.reshape(N_QUEUE, N_CACHE, N_PREFIX)
        lines += [f'training_samples_queue_total{{model="{name}",queue_bucket="{q}"}} {int(v)}'
                  for q, v in enumerate(cube.sum(axis=(1, 2)))]
        lines += [f'training_samples_cache_total{{model="{name}",cache_bucket="{c}"}} {int(v)}'
                  for c, v in enumerate(cube.sum(axis=(0, 2)))]
        lines += [f'training_samples_prefix_total{{model="{name}",prefix_bucket="{p}",range="{PREFIX_RANGES[p]}"}} '
                  f"{int(v)}" for p, v in enumerate(cube.sum(axis=(0, 1)))]
    return lines


def prefix_lines(ttft: Rows) -> list[str]:
    """Prefix-score statistics of the TTFT training rows (only when there are any)."""
    if len(ttft) == 0:
        return []
    score, ttft_ms = ttft.column("prefix_cache_score"), ttft.column("actual_ttft_ms")
    lines = [f"prefix_score_{stat}{{}} {_num(fn(score))}"
             for stat, fn in (("mean", np.mean), ("std", np.std), ("min", np.min), ("max", np.max))]
    bucket = ttft.bucket % N_PREFIX
    for p, label in enumerate(PREFIX_RANGES):
        values = ttft_ms[bucket == p]
        if len(values):
            lines.append(f'avg_ttft_by_prefix{{prefix_bucket="{p}",range="{label}"}} {_num(np.mean(values))}')
            lines.append(f'median_ttft_by_prefix{{prefix_bucket="{p}",range="{label}"}} {_num(np.median(values))}')
    return lines


def score_lines(objective: str, quantile: float, history: Mapping[str, Sequence[Scores]]) -> list[str]:
    lines: list[str] = []
    for name in MODEL_NAMES:
        for idx, s in enumerate(history.get(name, ())):
            if objective == "quantile":
                lines += [f'{name}_quantile_loss{{idx="{idx}"}} {_num(s.pinball)}',
                          f'{name}_coverage_percent{{idx="{idx}"}} {_num(100 * s.coverage)}',
                          f'{name}_violation_rate_percent{{idx="{idx}"}} {_num(100 * (1 - s.coverage))}']
            else:
                lines += [f'{name}_mae{{idx="{idx}"}} {_num(s.mae)}', f'{name}_rmse{{idx="{idx}"}} {_num(s.rmse)}']
    if objective == "quantile":
        lines += [f"target_coverage_percent{{}} {_num(100 * quantile)}",
                  f"target_violation_rate_percent{{}} {_num(100 * (1 - quantile))}"]
    return lines
