"""Trainer benchmarks: the service (ingest, retrain, cadence, RSS), extrapolation, the offline learning replay."""
