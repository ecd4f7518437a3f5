"""A worker's process that the survivors replaced leaves by itself.

A process stopped (SIGSTOP, a debugger) or cut off past the survivors' timeouts is given up on:
they ask its launcher for the next process of that worker (`restart/<worker>` in the coordination
store). When the old one runs again it must not rejoin as what it was, nor hold up the quorum
the survivors want, nor write the record. It looks before each quorum, and a watch thread looks
every `WATCH_EVERY_S` wherever the main thread is (a collective may hold it for
`cluster.quorum_timeout_s`), so it is gone well before its launcher's grace would kill it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

from .network import connect_store

log = logging.getLogger(__name__)

#: how often the watch thread reads `restart/<worker>`: well inside the launcher's grace for a stale process
WATCH_EVERY_S = 0.5


def leave_if_replaced(store, worker: int, incarnation: int) -> None:
    """SIGKILL this process, as a planned death (`killed/<worker>/<incarnation>`), if the survivors
    want a newer process of `worker` than this one."""
    key = f"restart/{worker}"
    wanted = int(store.get(key).decode()) if store.check([key]) else incarnation
    if wanted <= incarnation:
        return
    store.set(f"killed/{worker}/{incarnation}", repr(time.time()))
    log.warning(
        "worker %d's process %d (incarnation %d) was replaced while it was out of the quorum (stopped "
        "or hung past the others' timeouts): it leaves, incarnation %d takes its place",
        worker,
        os.getpid(),
        incarnation,
        wanted,
    )
    for handler in logging.getLogger().handlers:
        handler.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class ReplacementWatch:
    """A thread, with a store connection of its own (the main thread's may be inside a call), that
    leaves as `leave_if_replaced` does. It ends quietly when the store is gone (the run has ended and
    machine 0 stopped the store), and `stop` ends it before the process exits: Python 3.11 ends a
    daemon thread that comes back from C++ while the interpreter finalizes with pthread_exit, and
    unwinding that through the store client's frames aborts the process ("terminate called without
    an active exception", exit code -6) after a run that finished (pytorch/pytorch#38228)."""

    def __init__(self, store_address: str, timeout_s: float, worker: int, incarnation: int):
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._watch,
            args=(store_address, timeout_s, worker, incarnation),
            name=f"replacement-watch-{worker}",
            daemon=True,  # a hung store call must not keep a process whose run ended
        )
        self._thread.start()

    def _watch(self, store_address: str, timeout_s: float, worker: int, incarnation: int) -> None:
        try:
            store = connect_store(store_address, timeout_s)
            while not self._stopped.wait(WATCH_EVERY_S):
                leave_if_replaced(store, worker, incarnation)
        except Exception:  # the store is gone with the run; the main thread reports anything else
            return

    def stop(self, timeout_s: float = 10.0) -> None:
        """End the thread and wait for it: at most one store call, which a live store answers at once."""
        self._stopped.set()
        self._thread.join(timeout_s)
