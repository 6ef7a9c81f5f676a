"""Accuracy suite for the latency models: workload families with known truth, metrics, model adapters.

Offline only (pandas, scikit-learn): nothing under ``shared/``, ``trainer/``, ``predictor/``,
``router_client/`` or ``sim/`` imports this package. Entry point: ``python -m bench.quality.suite``.
"""
