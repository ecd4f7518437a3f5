"""What a fault destroys, and so what a method can restore the training state from afterwards.

Every fault of a trace belongs to one class of a small fixed vocabulary. A hardware fault (a GPU,
a server, the servers of a switch; every rate preset and node trace) is `unit`: the failed unit's
GPU and host memory are gone, every other worker keeps its own. A fault that stops the whole job
(worker `JOB` in a trace) says which of the other three it is. Each class also says how it is
detected: a dead process or GPU by the launcher's heartbeat (`cluster.detection_s`), a hang only by
a collective's timeout (`cluster.collective_timeout_s`).

A method declares where it restores from after a whole-job fault (`Method.restores_from`, in order
of preference); the loop gives it the first source the fault kept (`restore_source`).
docs/METHODS.md ("What a fault destroys") sources each assignment of Llama 3's causes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, FrozenSet, Optional, Sequence

#: where a method can restore the state from
REPLICA_GPU = "replica_gpu"  # a healthy data-parallel replica's GPU memory (JIT checkpointing)
HOST_SNAPSHOT = "host_snapshot"  # in-memory snapshots held in host memory by processes of their own (REFT)
STORAGE = "storage"  # a checkpoint on storage (every method's last resort)
SOURCES = (REPLICA_GPU, HOST_SNAPSHOT, STORAGE)

HEARTBEAT, COLLECTIVE_TIMEOUT = "heartbeat", "collective_timeout"


@dataclass(frozen=True)
class FaultClass:
    name: str
    destroys: str  # in words, for the record and `advise`
    keeps: FrozenSet[str]  # the restore sources that survive it
    detection: str  # heartbeat | collective_timeout


CLASSES: Dict[str, FaultClass] = {
    c.name: c
    for c in (
        FaultClass("unit", "the failed unit's GPU and host memory", frozenset(SOURCES), HEARTBEAT),
        FaultClass(
            "processes",
            "every training process's memory (GPU and its own host memory); host memory held by "
            "other processes survives (a crash)",
            frozenset({HOST_SNAPSHOT, STORAGE}),
            HEARTBEAT,
        ),
        FaultClass(
            "progress",
            "nothing but progress: every replica's state is intact, the job must be stopped and restarted (a hang)",
            frozenset(SOURCES),
            COLLECTIVE_TIMEOUT,
        ),
        FaultClass("all_but_storage", "everything but storage", frozenset({STORAGE}), HEARTBEAT),
    )
}
#: a whole-job fault that does not say which it is (a `job` row of a recorded trace without a class)
DEFAULT_JOB_CLASS = "all_but_storage"


def fault_class(name: Optional[str]) -> FaultClass:
    if not name:
        return CLASSES[DEFAULT_JOB_CLASS]
    if name not in CLASSES:
        raise ValueError(f"fault class {name!r}: allowed: {', '.join(CLASSES)}")
    return CLASSES[name]


def restore_source(fault: FaultClass, restores_from: Sequence[str]) -> str:
    """The first of a method's sources the fault kept (storage is always kept)."""
    return next((s for s in restores_from if s in fault.keeps), STORAGE)
