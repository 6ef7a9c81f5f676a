"""Shared by the benchmark areas: paths, /proc readings, the prod-like venv, git worktrees, result files, tiers."""
