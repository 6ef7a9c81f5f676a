"""Status page benchmarks: the trainer's /ui with a full window, the router page, SVG charts against matplotlib."""
