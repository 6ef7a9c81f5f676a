"""Cluster replay in virtual time (``python -m sim.replay``)."""

from sim.replay.items import build_items
from sim.replay.runner import run_policy
from sim.replay.summary import format_table, summarize

__all__ = ["build_items", "format_table", "run_policy", "summarize"]
