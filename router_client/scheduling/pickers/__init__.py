"""Scheduling pickers."""
