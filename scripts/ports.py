"""TCP ports for the local servers the tests stop and start again on the same port (S3Proxy, Kafka nodes).

``bind(("127.0.0.1", 0))`` returns a port from the kernel's ephemeral range, the range it also gives every outgoing
connection and every other ``bind(0)``. While a server is down, Spark, py4j or a client can take its port, and the
server then cannot come back on it (or a readiness probe reaches the other process). A port below that range is
only ever used by a process that asks for it by number. Standard library only.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["restartable_port", "port_is_free"]

_LOWEST = 10_000


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(part) for part in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32_768, 60_999  # Linux's default


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind: TIME_WAIT does not block
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def restartable_port() -> int:
    """A free port on 127.0.0.1 outside the ephemeral range, so it is still free when its server restarts."""
    low, _ = _ephemeral_range()
    if low - _LOWEST >= 1_000:
        for port in random.sample(range(_LOWEST, low), 200):
            if port_is_free(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # no room below the range: any free port
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
