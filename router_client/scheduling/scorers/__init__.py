"""Scheduling scorers."""
