"""A TCP port a test can give a process to listen on, without a race.

A port the kernel hands out (bind to port 0, read it, close) is free only until the next process
asks for an ephemeral port: a connection opened by any process in between may take it, and the
process the test starts then cannot listen there. The ports here lie below the kernel's ephemeral
range (/proc/sys/net/ipv4/ip_local_port_range), which the kernel never hands out by itself, so only
an explicit bind can take one; each pytest-xdist worker draws from its own block, so two tests
running side by side never draw the same port.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from pathlib import Path

BLOCK = 1000  # ports per pytest process
BLOCKS = 8  # pytest-xdist workers with a block of their own (gw0..gw7); more share them round-robin


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _block() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    top = _ephemeral_low() - (index % BLOCKS) * BLOCK
    return range(top - BLOCK, top)


_ports = _block()
_order = itertools.cycle(random.Random(os.getpid()).sample(list(_ports), len(_ports)))


def reserved_port(host: str = "127.0.0.1") -> int:
    """A port of this process's block that `host` can listen on now (one still in TIME_WAIT from an
    earlier test is passed over)."""
    for _ in range(len(_ports)):
        port = next(_order)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no port of {_ports.start}..{_ports.stop - 1} is free on {host}")
