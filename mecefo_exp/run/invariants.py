"""What every run must satisfy, checked while it runs and before it is recorded `ok`.

- **No worker computes while absent.** Under a node trace (failure=nodes) there are no spares: a
  step may not be computed by more workers than the trace has nodes present at its start.
- **Credited work never exceeds the ideal.** Where the clock is a throughput table, the samples a
  run credits may not exceed those the table's throughput over the nodes present would give in
  the same window (`goodput_over_ideal` <= 1; the table's whole milliseconds allow a sliver).

A replay of another simulator (`method.variant`, mecefo_exp/replay/) keeps that simulator's books,
its documented quirks included (docs/ARTIFACT.md): it is not checked. A run that breaks one ends
`failed` with `InvariantBroken` naming the step and the numbers: a wrong number is never recorded
as a right one.
"""

from __future__ import annotations

from typing import Optional, Set

#: how far above 1 goodput over ideal may come from rounding alone (a table step of whole
#: milliseconds is up to 1 ms shorter than the ideal's exact seconds: 5e-6 of a 186 s step)
GOODPUT_SLACK = 1e-4


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


def check_goodput(window: Optional[dict]) -> None:
    """The credited samples may not exceed the ideal of the window (summary.json's `window`)."""
    if not window:
        return
    ratio, ideal, credited = (
        window.get("goodput_over_ideal"),
        window.get("ideal_samples"),
        window.get("credited_samples"),
    )
    if ratio is not None and ratio > 1 + GOODPUT_SLACK:
        raise InvariantBroken(
            f"goodput over ideal is {ratio:.4g} (credited {credited:g} samples, ideal {ideal:.6g}): "
            "a run cannot credit more work than the nodes present could do"
        )
    if ratio is None and credited and ideal is not None and ideal <= 0:
        raise InvariantBroken(
            f"{credited:g} samples credited in a window where the ideal is {ideal:g} "
            "(no node could train): a run cannot credit work no node did"
        )
