"""Real name resolution for tests: names added to ``/etc/hosts`` for the duration of a test.

``HostsFile`` appends one block of lines after the file's original content and rewrites only that block
(``set``), so the original lines are never touched, even for an instant; ``restore`` truncates the file back
to its original bytes (or, if someone else changed the file meanwhile, removes just our lines). The file is
written in place, never replaced: in containers ``/etc/hosts`` is often a bind mount. Names are unique per
test (``latency-disc-<random>.test``), so other processes resolving other names are unaffected.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

HOSTS = Path("/etc/hosts")


class HostsFile:
    def __init__(self, path: Path = HOSTS) -> None:
        self.path = path
        self.original = path.read_bytes()
        self._ours: list[bytes] = []

    @staticmethod
    def unique_name() -> str:
        return f"latency-disc-{secrets.token_hex(4)}.test"

    def set(self, records: dict[str, Sequence[str]]) -> None:
        """Make ``name → addresses`` the only lines we have added (an empty list: the name does not resolve)."""
        lines = [f"{address} {name}\n".encode() for name, addresses in records.items() for address in addresses]
        with self.path.open("r+b") as f:
            current = f.read()
            if not current.startswith(self.original):
                raise AssertionError(f"{self.path} changed under the test; not touching it")
            separator = b"\n" if self.original and not self.original.endswith(b"\n") else b""
            f.seek(len(self.original))
            f.write(separator + b"".join(lines))
            f.truncate()
            f.flush()
            os.fsync(f.fileno())
        self._ours = lines

    def restore(self) -> None:
        with self.path.open("r+b") as f:
            current = f.read()
            if current.startswith(self.original):
                f.truncate(len(self.original))
            else:
                kept = [line for line in current.splitlines(keepends=True) if line not in self._ours]
                f.seek(0)
                f.write(b"".join(kept))
                f.truncate()
        self._ours = []


@contextlib.contextmanager
def hosts_file() -> Iterator[HostsFile]:
    """A :class:`HostsFile`, restored afterwards (also when the test fails); skips when /etc/hosts is not
    writable (not root), saying so."""
    if not os.access(HOSTS, os.W_OK):
        pytest.skip(f"{HOSTS} is not writable by uid {os.getuid()}: discovery tests need real name resolution "
                    "through /etc/hosts (run them as root)")
    hosts = HostsFile()
    try:
        yield hosts
    finally:
        hosts.restore()


def shared_port(addresses: Sequence[str], attempts: int = 50) -> int:
    """A TCP port free on every one of ``addresses`` (loopback aliases such as 127.0.0.2, 127.0.0.3), so pods
    bound there share one name and one port as pods behind a headless Service do."""
    for _ in range(attempts):
        with contextlib.ExitStack() as stack:
            first = stack.enter_context(socket.socket())
            first.bind((addresses[0], 0))
            port = int(first.getsockname()[1])
            try:
                for address in addresses[1:]:
                    stack.enter_context(socket.socket()).bind((address, port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no port free on all of {list(addresses)}")
