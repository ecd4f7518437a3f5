"""The harness's books: everything a later step reads besides the training state, in one object.

The clock, the trace's cursor, the counters, the tokens processed, the last evaluation, the
method's own state and the method's list of checkpoints on disk. One `state_dict` feeds the
checkpoint's harness part (so a killed run resumes), and torchft's heal of a restarted worker
from a live peer: resume and heal read the same books, so they cannot disagree.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Optional

from ..failures import FAIL, Trace
from ..timing import SimClock

if TYPE_CHECKING:
    from ..methods.base import Method
    from ..methods.checkpointing import CheckpointStore


@dataclass
class Counters:
    """What happened to the run so far; summary.json reports each by name."""

    failures: int = 0
    recoveries: int = 0
    rollbacks: int = 0
    lost_steps: int = 0
    interrupted_steps: int = 0
    # failures no trace planned (torchft: a process killed from outside, a machine lost): the
    # worker-seconds down of those that ended, and since when (simulated s) those still down are
    unplanned_down_s: float = 0.0
    unplanned_down_since: Dict[int, float] = dataclasses.field(default_factory=dict)

    def count_event(self, kind: str, workers: int = 1) -> None:
        """A failure or recovery (of `workers` workers at once) the method is about to hear of."""
        if kind == FAIL:
            self.failures += workers
        else:
            self.recoveries += workers

    def count_unplanned(self, kind: str, worker: int, now_s: float) -> None:
        """An unplanned failure or its worker's return, at simulated time `now_s`."""
        if kind == FAIL:
            self.unplanned_down_since.setdefault(worker, now_s)
        elif worker in self.unplanned_down_since:
            self.unplanned_down_s += now_s - self.unplanned_down_since.pop(worker)

    def unplanned_down_until(self, now_s: float) -> float:
        """Worker-seconds down after unplanned failures, up to `now_s`."""
        return self.unplanned_down_s + sum(now_s - since for since in self.unplanned_down_since.values())

    def as_dict(self) -> Dict[str, int]:
        return dataclasses.asdict(self)


@dataclass
class Span:
    """The span of training: from the start of the first step to the end of the last committed one
    (a clock may report over it: the throughput-table clock's window metric)."""

    first_step_s: Optional[float] = None
    last_step_end_s: Optional[float] = None

    def commit(self, start_s: float, cost_s: float) -> None:
        if self.first_step_s is None:
            self.first_step_s = start_s
        self.last_step_end_s = start_s + cost_s

    def open(self, now_s: float) -> None:
        """Training begins (the first step's earliest start, even if a failure interrupts it)."""
        if self.first_step_s is None:
            self.first_step_s = now_s


class Books:
    """Stateful-like: `state_dict()` / `load_state_dict()` with the checkpoint's historical keys."""

    # the parts whose positions the books save: `keep` names them once the run has built them
    trace: Trace
    method: Method
    store: Optional[CheckpointStore]  # the method's disk checkpoints (None for a method that writes none)

    def __init__(self, clock: SimClock):
        self.clock = clock
        self.store = None
        self.counters = Counters()
        self.tokens_processed = 0
        self.final_val_loss = float("nan")
        self.span = Span()

    def keep(self, trace: Trace, method: Method, store: Optional[CheckpointStore]) -> None:
        """Once the run has built them: the trace, the method and its store, whose positions and
        state the books save and restore with their own (built once, these books live as long as the run)."""
        self.trace, self.method, self.store = trace, method, store

    def state_dict(self) -> Dict:
        return {
            "clock": self.clock.state_dict(),
            "counters": self.counters.as_dict(),
            "tokens_processed": self.tokens_processed,
            "trace_next": self.trace.position,
            "method": self.method.state_dict(),
            "final_val_loss": self.final_val_loss,
            # the method's checkpoints on disk it may roll back to (a resume reads the folder instead)
            "checkpoints_saved": list(self.store.saved) if self.store is not None else [],
            "window": dataclasses.asdict(self.span),  # its checkpoint key since it was first saved
        }

    def load_state_dict(self, state: Dict) -> None:
        self.clock.load_state_dict(state["clock"])
        for name, value in state["counters"].items():  # in place: the loop holds the counters
            setattr(self.counters, name, value)
        self.tokens_processed = state["tokens_processed"]
        self.trace.position = state["trace_next"]
        self.final_val_loss = state["final_val_loss"]
        self.method.load_state_dict(state["method"])
        self.span = Span(**state.get("window", {}))  # absent from checkpoints written before it existed
        if self.store is not None and "checkpoints_saved" in state:
            self.store.saved = list(state["checkpoints_saved"])

    # ---- what summary.json says of them
    def summary(self) -> Dict:
        c = self.counters
        loss = self.final_val_loss
        return {
            "tokens_processed": self.tokens_processed,
            "final_val_loss": loss,
            "final_val_ppl": math.exp(loss) if math.isfinite(loss) else None,
            "failures": c.failures,
            "rollbacks": c.rollbacks,
            "lost_steps": c.lost_steps,
            "interrupted_steps": c.interrupted_steps,
            "time_breakdown": dict(self.clock.breakdown),
        }

    def trace_summary(self) -> Dict:
        sim = self.clock.now
        actual = self.trace.stats_until(sim) if sim > 0 else {"failures": 0, "mean_workers_down": 0.0}
        unplanned = self.counters.unplanned_down_until(sim) / sim if sim > 0 else 0.0
        return {
            "failures_expected": self.trace.expected["failures"],
            "mean_workers_down_expected": self.trace.expected["mean_workers_down"],
            # the trace's failures, and those no trace planned (torchft)
            "mean_workers_down": actual["mean_workers_down"] + unplanned,
        }
