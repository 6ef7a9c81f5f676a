"""Replay integration: the router pipeline as ``sim.replay`` policies, with in-process models."""
