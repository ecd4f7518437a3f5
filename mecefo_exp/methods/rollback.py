"""The family of methods whose every failure restarts the job (checkpoint-restart, REFT, BAFT),
and where the job restarts (`method.restart_on`): on spares or on the survivors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from ..config import choices
from ..plan import Plan, resplit_plan
from ..timing.clock import StepCost
from .base import on_a_node_trace
from .checkpointed import CheckpointedConfig, CheckpointedMethod


@dataclass
class RestartConfig(CheckpointedConfig):
    """Methods whose every failure restarts the job."""

    # where: on spares for the failed workers (the global batch on n workers) | on the survivors (the
    # global batch re-split over them; a recovered worker joins at the next restart)
    restart_on: str = field(default="spares", metadata=choices("spares", "survivors"))


class RollbackMethod(CheckpointedMethod):
    """A method whose every failure restarts the job (checkpoint-restart, REFT, BAFT).

    Where the job restarts is `method.restart_on`, written here once:

    - `spares` (default): a spare replaces each failed worker, so the plan stays failure-free and
      the loss curve is the failure-free one, bit for bit; a recovery changes nothing.
    - `survivors` (Varuna's job morphing; REFT on a node trace): the job restarts on the workers
      still up, the global batch re-split over them (the same samples: still bit for bit); a
      recovered worker waits for the next restart to join.
    """

    Config = RestartConfig

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.running_without: List[int] = []  # restart_on=survivors: the workers the job restarted without
        self.job_empty = False  # on the survivors, every worker is gone: nothing runs until one is back

    @property
    def on_survivors(self) -> bool:
        """restart_on=survivors, or a node trace, which has no spares: the job restarts on the nodes there."""
        return self.cfg.restart_on == "survivors" or on_a_node_trace(self.run)

    def begin_without(self, workers: List[int]) -> None:
        super().begin_without(workers)
        if self.on_survivors:
            self.running_without = sorted(self.down)

    def on_failures(self, workers: List[int]) -> None:
        """One restart for failures at the same instant (charging one restart per worker would
        bill a machine failure 8 times). Marked down at once: a job-wide fault is every worker.
        On the survivors with no worker left (a node trace that removed every node) nothing
        restarts: the job waits for a node (`job_empty`) and restarts on it."""
        self.down.update(workers)
        self.admit_held_back(workers)  # the workers that came back join this restart
        if self.on_survivors and len(self.down) >= self.n:
            self.job_empty = True
            self.running_without = sorted(self.down)
            self.run.event("fatal", workers[0], {"reason": "no node is left: the job waits for one to be added"})
            return
        self.restart_after(workers)
        if self.on_survivors:
            self.running_without = sorted(self.down)

    def restart_after(self, workers: List[int]) -> None:
        """The job restarts after the failures of `workers`: from the latest checkpoint."""
        self.restart_from_checkpoint(workers[0], reason="failure")

    def on_recoveries(self, workers: List[int]) -> None:
        if self.job_empty:  # no job runs: the nodes back now (and any that waited) start it, from disk
            self.job_empty = False
            self.down.difference_update(workers)
            self.admit_held_back([])
            self.running_without = sorted(self.down)
            self.restart_from_checkpoint(workers[0], reason="fatal")
            return
        for worker in workers:  # on the survivors each may wait for the next restart
            waits = self.on_survivors and worker in self.running_without
            if not self.hold_back(worker, waits, {"down": self.running_without}):
                self.down.discard(worker)  # on spares: the job already runs on a replacement

    def plan(self, step: int) -> Plan:
        if self.running_without:
            return resplit_plan(step, self.n, set(self.running_without))
        return super().plan(step)

    def step_cost(self, plan: Plan) -> StepCost:
        if self.running_without:
            return self.run.costs.spread_step(self.n, plan.n_computing)
        return super().step_cost(plan)
