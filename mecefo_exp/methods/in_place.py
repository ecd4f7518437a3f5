"""The family of methods that survive failures in place (MeCeFO, Bamboo, Oobleck), and their
fall-back to a restart from the checkpoint when their own mechanism cannot cover a failure."""

from __future__ import annotations

from typing import Dict, List

from ..plan import Plan, resplit_plan
from ..timing.clock import StepCost
from .base import on_a_node_trace
from .checkpointed import CheckpointedMethod


class InPlaceMethod(CheckpointedMethod):
    """A method that survives failures in place (MeCeFO, Bamboo, Oobleck).

    A failure does not stop the job; only when the method's own mechanism cannot cover it
    (`fall_back`: a `fatal` event) does it roll back through the checkpoint path, and then
    spares replace every failed worker, so the trace's later recoveries of those workers
    change nothing (`rejoins` is False for them).

    A node trace has no spares: there the fall-back restarts the job on the nodes there (`without`:
    the slots left empty, re-split over them by `plan` unless `after_fall_back` says otherwise).
    """

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.replaced: set = set()  # failed workers a fatal restart replaced by spares
        self.without: set = set()  # node traces: slots a fatal restart left empty (no spare exists)
        self.job_empty = False  # node traces: a fall-back found no node; the job restarts when one is back
        self.counts: Dict[str, int] = {"fatal": 0}

    def needs_workers(self) -> set:
        return set(range(self.n)) - self.down  # the survivors cover the failed workers' work

    def on_failures(self, workers: List[int]) -> None:
        for worker in workers:
            self.mark_down(worker)

    def mark_down(self, worker: int) -> None:
        """`worker` failed: down, and no longer one a spare replaced."""
        self.down.add(worker)
        self.replaced.discard(worker)

    def rejoins(self, worker: int) -> bool:
        """Mark a recovery; False when a spare already took this worker's place."""
        if worker in self.replaced:
            self.replaced.discard(worker)
            return False
        self.without.discard(worker)
        self.down.discard(worker)
        if self.job_empty:  # the first node back after every node was gone: the job restarts on it
            self.job_empty = False
            self.restart_from_checkpoint(worker, reason="fatal")
        return True

    def fall_back(self, worker: int, detail: Dict[str, object]) -> None:
        """System-level recovery: log `fatal`, restart from the checkpoint with spares (or on the
        nodes there; with no node there, when the first one is back: `job_empty`)."""
        self.counts["fatal"] += 1
        self.run.event("fatal", worker, {"down": sorted(self.down), **detail})
        if on_a_node_trace(self.run):  # no spares: the slots left empty stay out of the plan
            self.without = set(self.down)
        else:
            self.replaced |= self.down
            self.down.clear()
            self.without.clear()
        self.after_fall_back()
        if len(self.down) >= self.n:
            self.job_empty = True
            return
        self.restart_from_checkpoint(worker, reason="fatal")

    def after_fall_back(self) -> None:
        """Forget the method's own assignments: every worker is up again (or `without` empty slots)."""

    def plan(self, step: int) -> Plan:
        """After a fall-back that left slots empty (`without`): their micro-batches dealt over the others."""
        if not self.without:
            return super().plan(step)
        plan = resplit_plan(step, self.n, self.down)
        plan.on_survivors = True
        return plan

    def step_cost(self, plan: Plan) -> StepCost:
        if plan.on_survivors:
            return self.run.costs.spread_step(self.n, plan.n_computing)
        return super().step_cost(plan)
