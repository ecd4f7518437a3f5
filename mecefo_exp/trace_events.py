"""What a failure trace is made of: events (time, worker, fail | recover) and the error a trace
that cannot be replayed raises. A leaf: faults.py draws traces of them, node_trace.py reads them."""

from dataclasses import dataclass

FAIL, RECOVER = "fail", "recover"


@dataclass(frozen=True, order=True)
class FailureEvent:
    time: float  # simulated seconds
    worker: int
    kind: str  # fail | recover


class TraceError(ValueError):
    """A trace CSV that cannot be replayed; the message names the line."""
