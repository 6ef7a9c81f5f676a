"""Prompt accounting without a tokenizer: a deterministic token estimate and prefix block hashes.

- Text: ``ceil(utf8_bytes / 4)`` tokens; block ``i`` covers bytes ``[64 i, 64 (i+1))`` (16
  tokens x 4 bytes), hashed with a chain so a block's hash depends on everything before it.
  Repeated system prompts and resent multi-turn histories therefore share leading blocks.
- Token ids: the list length; block ``i`` hashes ids ``[16 i, 16 (i+1))``, chained.
- An explicit ``prompt_token_count`` overrides the count; hashes stay those of the content, limited
  to the declared length.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

BYTES_PER_TOKEN = 4


def _chain(chunks: Sequence[bytes]) -> tuple[int, ...]:
    out = []
    prev = b"\x00" * 8
    for chunk in chunks:
        prev = hashlib.blake2b(prev + chunk, digest_size=8).digest()
        out.append(int.from_bytes(prev, "big") >> 1)
    return tuple(out)


def text_tokens(text: str) -> int:
    return max(1, -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN))


def text_block_hashes(text: str, block_size: int = 16) -> tuple[int, ...]:
    data = text.encode("utf-8")
    step = block_size * BYTES_PER_TOKEN
    full = len(data) // step
    return _chain([data[i * step : (i + 1) * step] for i in range(full)])


def token_block_hashes(ids: Sequence[int], block_size: int = 16) -> tuple[int, ...]:
    full = len(ids) // block_size
    chunks = [
        b",".join(str(t).encode() for t in ids[i * block_size : (i + 1) * block_size]) for i in range(full)
    ]
    return _chain(chunks)


def account(
    text: str | None, ids: Sequence[int] | None, declared: int | None, block_size: int = 16
) -> tuple[int, tuple[int, ...]]:
    """Return ``(prompt_tokens, block_hashes)`` for a prompt given as text or ids (+ optional count)."""
    if ids is not None:
        count, hashes = len(ids), token_block_hashes(ids, block_size)
    else:
        count, hashes = text_tokens(text or ""), text_block_hashes(text or "", block_size)
    if declared is not None:
        count = declared
        hashes = hashes[: count // block_size]
    return max(1, count), hashes
