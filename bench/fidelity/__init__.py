"""Simulator fidelity on a real engine: the engine's profile, one request stream on the engine and in the sim."""
