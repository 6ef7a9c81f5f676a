"""The one-command demo (``make demo`` = ``python -m demo``) and its loopback stack launcher.

Not an installed package: run from the repository root. ``demo.procs`` and ``demo.stack`` are
also used by ``tests/proxy`` and ``tests/compose`` to start real processes on 127.0.0.1.
"""
