"""Simulator benchmarks: calibration and replay speed, the pod server, scenarios, dual pool vs one pool."""
