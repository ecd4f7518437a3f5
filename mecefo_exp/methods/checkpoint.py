"""Checkpoint-restart: the baseline every other method is measured against.

Every `interval` steps (or Young/Daly's sqrt(2 * C * MTBF) with interval=auto) the full
training state is written to disk for real. On any failure the whole job stops:
detection + restart (relaunch, rendezvous, rebuild) + loading the checkpoint, all as
stall, then the steps since the checkpoint are redone (lost work).

Where the job restarts (`method.restart_on`):

- `spares` (default): a spare replaces the failed worker, so training goes on with n workers
  and the loss curve is the failure-free one, bit for bit; only time is lost.
- `survivors` (Varuna's job morphing): the job restarts on the workers still up, the global
  batch re-split over them (the same samples: still bit for bit); a recovered worker waits
  for the next restart to join. `checkpoint_after_failure` also saves after the first step
  of each restart, as Varuna does.

`artifact_quirks` (with restart_on=survivors) reproduces how the Oobleck artifact's Varuna
simulator books a failure (docs/ARTIFACT.md): the steps since the last checkpoint are lost at
once, but training goes on with the old configuration, the removed node included, while the
job restarts (`restart_s`); when the restart completes the step in flight is lost and the new
configuration runs. The every-`interval` cadence counts completed steps, rolled back or not; a
checkpoint whose write began less than twice its write time before a failure counts as failed.
Physically a failed node cannot keep computing: the default charges the restart as a stall.
"""

from typing import List, Optional

from ..plan import Plan
from ..timing.clock import StepCost
from .base import Method, RollbackMethod, resplit_cost, resplit_plan, steps_before_multiple


class CheckpointRestart(RollbackMethod):
    name = "checkpoint"
    interval_key = "interval"

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.on_survivors = cfg.get("restart_on", "spares") == "survivors"
        self.quirks = self.on_survivors and cfg.get("artifact_quirks", False)
        self.running_without: List[int] = []  # restart_on=survivors: the workers the job restarted without
        self.waiting: List[int] = []  # recovered since, joining at the next restart
        self.restart_at: Optional[float] = None  # quirks: when the restart in progress completes
        self.carry: Optional[float] = None  # quirks: seconds left of the step a failure did not stop
        self.completed = 0  # quirks: completed steps, the artifact's checkpoint cadence

    def on_failures(self, workers: List[int]) -> None:
        if not self.on_survivors:
            return super().on_failures(workers)
        for worker in workers:
            Method.on_failure(self, worker)
        self.down -= set(self.waiting)  # the workers that came back join this restart
        self.waiting = []
        if self.quirks:
            self._rollback_and_keep_training(workers[0])
            return
        self.running_without = sorted(self.down)
        self.restart_from_checkpoint(workers[0], reason="failure")

    def on_failure(self, worker: int) -> None:
        self.on_failures([worker])

    def on_recover(self, worker: int) -> None:
        if self.on_survivors and worker in self.running_without:
            self.waiting.append(worker)
            self.run.event("waiting", worker, {"down": self.running_without})
            return
        super().on_recover(worker)

    def plan(self, step: int) -> Plan:
        if self.running_without:
            return resplit_plan(step, self.n, set(self.running_without))
        return super().plan(step)

    def step_cost(self, plan: Plan) -> StepCost:
        if self.carry is not None:  # quirks: the step a failure did not stop goes on
            return StepCost(compute=self.carry)
        return resplit_cost(self.run.costs, self.n, plan) if plan.degraded else super().step_cost(plan)

    # ------------------------------------------------------------ the artifact's booking
    def interrupted(self, plan: Plan, elapsed: float) -> None:
        if not self.quirks:
            return super().interrupted(plan, elapsed)
        self.run.clock.charge("compute", elapsed)  # the artifact lets the step finish and credits it
        self.carry = self.step_cost(plan).total - elapsed

    def _rollback_and_keep_training(self, worker: int) -> None:
        step, began, write_s = self.last_write
        # the artifact counts a checkpoint as failed when a removal falls within twice its write
        # time of its start (its completion event is pushed a second write time later), and then
        # sets its step counter back by 10
        if step in self.store.saved and len(self.store.saved) > 1 and self.run.clock.now < began + 2 * write_s:
            self.store.saved.remove(step)
            self.completed = max(0, self.completed - 10)
            self.run.event("checkpoint_failed", worker, {"step": step})
        saved = self.store.latest_step()
        if saved < self.run.step:
            self.run.restore(self.store.load(saved), to_step=saved, reason="failure", worker=worker)
        self.checkpoint_due = bool(self.cfg.get("checkpoint_after_failure", False))
        if self.restart_at is None:  # a failure during a restart: the pending restart completes as planned
            self.restart_at = self.run.clock.now + self.restart_s()

    def timer_s(self) -> Optional[float]:
        return self.restart_at

    def on_timer(self, plan: Plan, elapsed: float) -> None:
        """The restart completes: the step in flight is lost, the job runs on the survivors."""
        self.run.clock.charge("lost_work", elapsed)
        self.carry = None
        self.restart_at = None
        self.running_without = sorted(self.down)
        self.run.event("restart", None, {"from_step": self.run.step, "running_without": self.running_without})

    def steady_steps(self, plan: Plan, step_s: float) -> Optional[int]:
        """Quiet until the next checkpoint (quirks: by completed steps); a carried step is an event."""
        if self.carry is not None:
            return 0
        if not self.quirks:
            return super().steady_steps(plan, step_s)
        return 0 if self.checkpoint_due else steps_before_multiple(self.completed, self.interval)

    def book_steady(self, plan: Plan, count: int) -> None:
        if self.quirks:
            self.completed += count

    def after_step(self, step: int) -> None:
        self.carry = None
        if not self.quirks:
            return super().after_step(step)
        self.completed += 1
        if self.completed % self.interval == 0 or self.checkpoint_due:
            self.checkpoint_due = False
            self.save_checkpoint(step + 1)
