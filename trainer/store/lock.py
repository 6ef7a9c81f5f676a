"""One trainer per data directory: an exclusive ``flock`` held for the process lifetime.

Two trainers appending to one log (or publishing into one bundle directory) would interleave
records and race on version numbers. The lock is released by the kernel on any exit, ``kill -9``
included, so a crashed trainer never blocks its own restart.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from shared.errors import StorageError


class DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / ".trainer.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StorageError(f"data dir {self.path.parent} is in use by another trainer process") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
