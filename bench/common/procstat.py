"""What the benchmarks read of processes and the machine: a free loopback port, a process's CPU seconds and
memory (``/proc``), the load average. One copy for every benchmark that starts servers."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_s(pid: int) -> float:
    """utime + stime of every thread of ``pid`` so far (exited threads included), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MiB (NaN for a field the kernel does not report)."""
    status = Path(f"/proc/{pid}/status").read_text()

    def get(key: str) -> float:
        found = re.search(rf"{key}:\s+(\d+) kB", status)
        return int(found[1]) / 1024 if found else float("nan")
    return get("VmRSS"), get("VmHWM")


def loadavg() -> str:
    """The 1-, 5- and 15-minute load averages as /proc/loadavg prints them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])
