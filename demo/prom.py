"""Read values out of Prometheus text exposition (the router's ``/metrics``): tiny, no dependency."""

from __future__ import annotations


def metric_value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels`` (0.0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        rest = line[len(name):]
        if rest[:1] not in ("{", " "):
            continue
        if all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def label_values(text: str, name: str, label: str) -> dict[str, float]:
    """``{label value: summed sample}`` over the samples of ``name``."""
    out: dict[str, float] = {}
    key = f'{label}="'
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        start = line.find(key)
        if start < 0:
            continue
        start += len(key)
        value = line[start:line.index('"', start)]
        out[value] = out.get(value, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def histogram_mean(text: str, name: str, **labels: str) -> float | None:
    count = metric_value(text, name + "_count", **labels)
    return metric_value(text, name + "_sum", **labels) / count if count else None
