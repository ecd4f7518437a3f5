"""What a failure trace is made of: events (time, worker, fail | recover) and the error a trace
that cannot be replayed raises. A leaf: faults.py draws traces of them, node_trace.py reads them."""

from dataclasses import dataclass

FAIL, RECOVER = "fail", "recover"
#: the worker of a job-wide event: every worker up at that instant stops (a software or NCCL fault)
#: and is back at once. A trace holds it as one fail and one recover at one instant, never one
#: event per worker, so its cost does not grow with the cluster; trace.csv names it `job`
JOB = -1


@dataclass(frozen=True, order=True)
class FailureEvent:
    time: float  # simulated seconds
    worker: int
    kind: str  # fail | recover
    fault: str = ""  # a job-wide fault's class (failures/classes.py); "" for a unit's or an unclassed one


class TraceError(ValueError):
    """A trace CSV that cannot be replayed; the message names the line."""
