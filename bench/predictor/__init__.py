"""Predictor benchmarks: the service vs a naive baseline, open loop, keep-alive, against another revision."""
