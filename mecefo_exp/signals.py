"""How a run is stopped from outside: SIGTERM/SIGHUP become `Terminated`, held while a file is written.

A timeout, SLURM's preemption or torchrun's teardown sends SIGTERM or SIGHUP; the run must end
as `failed` with the record saying why, and never in the middle of a checkpoint write.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Dict


class Terminated(BaseException):
    """SIGTERM/SIGHUP (timeout, SLURM, torchrun): end the run as failed, with the record saying why.

    A BaseException, like KeyboardInterrupt, so that no `except Exception` on the way swallows it.
    """

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"{signal.Signals(signum).name} received: the run was stopped from outside")


_held_signal: Dict[str, Any] = {"depth": 0, "signum": None}  # a signal that arrived inside signals_held()


@contextlib.contextmanager
def signals_held():
    """Let a checkpoint write finish before a SIGTERM ends the run.

    Raised inside torch.save's zip writer, the exception makes its cleanup fail with a
    RuntimeError that hides why the run stopped; the write takes milliseconds, so wait.
    """
    _held_signal["depth"] += 1
    try:
        yield
    finally:
        _held_signal["depth"] -= 1
    if _held_signal["depth"] == 0 and _held_signal["signum"] is not None:
        raise Terminated(_held_signal["signum"])


@contextlib.contextmanager
def signals_end_the_run():
    """Turn SIGTERM/SIGHUP into `Terminated` while the run is on (main thread only: Python's rule)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _held_signal["signum"] = None

    def stop(signum, frame):
        for s in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)  # a second signal must not interrupt writing the record
        if _held_signal["depth"]:
            _held_signal["signum"] = signum
            return
        raise Terminated(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
