"""Block hashes at a coarser block size (a real engine's 128-token blocks from the workload's 16-token ones).

The session model's hashes are prefix-determining: equal hash at block ``i`` means equal content in blocks
``0..i`` (a block of a stream is preceded by that stream's own blocks). A coarse block of ``factor`` fine
blocks therefore has the same content in two prompts exactly when the hash of its last fine block is equal,
so that hash names the coarse block. Only coarse blocks made wholly of hashed fine blocks get a hash; the
rest of the prompt (the unique tail) stays unhashed, as it matches nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.engine.errors import ConfigError


def coarse_block_hashes(hashes: Sequence[int], fine: int, coarse: int) -> tuple[int, ...]:
    """Hashes of the full ``coarse``-token blocks covered by ``hashes`` (one per ``fine``-token block)."""
    if coarse % fine:
        raise ConfigError(f"block size {coarse} is not a multiple of the workload's {fine}-token blocks")
    factor = coarse // fine
    return tuple(hashes[j * factor + factor - 1] for j in range(len(hashes) // factor))
