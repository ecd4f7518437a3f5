"""What every run must satisfy, checked while it runs and before it is recorded `ok`.

- **No worker computes while absent.** Under a node trace (failure=nodes) there are no spares: a
  step may not be computed by more workers than the trace has nodes present at its start.
- **What the clock promises.** A clock may check the summary it helped write (`check_summary`):
  the throughput-table clock's credited work never exceeds the ideal of its window
  (mecefo_exp/replay/window_metric.py).

A replay of another simulator (`method.variant`, mecefo_exp/replay/) keeps that simulator's books,
its documented quirks included (docs/ARTIFACT.md): it is not checked. A run that breaks one ends
`failed` with `InvariantBroken` naming the step and the numbers: a wrong number is never recorded
as a right one.
"""

from __future__ import annotations

from typing import Optional, Set


class InvariantBroken(RuntimeError):
    """The run's books contradict the trace: recording it would record a wrong number."""


class NodePresence:
    """The worker slots without a node under a node trace, kept up to date from the trace's cursor
    (rebuilt when the cursor moved back: a resume). Not a node trace: nobody is ever absent
    (a failed worker's work runs on a spare)."""

    def __init__(self, trace) -> None:
        self.trace = trace
        self.active = bool(getattr(trace, "node_rows", None))
        self._absent: Set[int] = set()
        self._at: Optional[int] = None

    def present(self) -> Optional[int]:
        """Slots with a node now; None when not a node trace."""
        if not self.active:
            return None
        trace = self.trace
        if self._at is None or self._at > trace.position:
            self._absent, self._at = set(trace.initial_down), 0
        for ev in trace.events[self._at : trace.position]:
            (self._absent.add if ev.kind == "fail" else self._absent.discard)(ev.worker)
        self._at = trace.position
        return trace.n_workers - len(self._absent)

    def check_step(self, step: int, computing: int, count: int = 1) -> None:
        present = self.present()
        if present is not None and computing > present:
            steps = f"steps {step}..{step + count - 1}" if count > 1 else f"step {step}"
            raise InvariantBroken(
                f"{steps}: {computing} workers compute but the node trace has {present} nodes "
                "present (a node trace has no spares): the method trains on nodes that do not exist"
            )
