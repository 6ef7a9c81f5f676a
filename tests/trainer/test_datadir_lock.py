"""A second trainer on the same data directory must refuse to start (single writer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.errors import StorageError
from trainer.store.lock import DataDirLock


def test_second_lock_on_same_dir_is_refused_and_released_on_close(tmp_path: Path) -> None:
    first, second = DataDirLock(tmp_path), DataDirLock(tmp_path)
    first.acquire()
    with pytest.raises(StorageError, match="in use by another trainer"):
        second.acquire()
    first.release()
    second.acquire()
    second.release()
