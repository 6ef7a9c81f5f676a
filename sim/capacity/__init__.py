"""Capacity search: the fewest GPUs (pods × TP) whose replay of a trace meets a TTFT SLO, for one
configuration or the single/dual-pool comparison table (``python -m sim.capacity``)."""
