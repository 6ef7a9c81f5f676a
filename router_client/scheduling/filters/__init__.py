"""Scheduling filters."""
