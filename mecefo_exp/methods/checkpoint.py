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
  of each restart, as Varuna does; `restart_s_by_nodes` times a restart by the nodes the job
  restarted on last.
"""

from typing import List, Optional

from ..plan import Plan
from ..throughput import entry_at
from ..timing.clock import StepCost
from .base import Method, RollbackMethod, admit_waiting, resplit_plan


class CheckpointRestart(RollbackMethod):
    name = "checkpoint"
    interval_key = "interval"

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.on_survivors = cfg.get("restart_on", "spares") == "survivors"
        self.running_without: List[int] = []  # restart_on=survivors: the workers the job restarted without
        self.waiting: List[int] = []  # recovered since, joining at the next restart
        self.nodes_at_restart: Optional[int] = None  # ready nodes at the last restart (restart_s_by_nodes)
        by_nodes = cfg.get("restart_s_by_nodes")
        self.restart_by_nodes = {int(k): float(v) for k, v in by_nodes.items()} if by_nodes else None

    def begin_without(self, workers: List[int]) -> None:
        super().begin_without(workers)
        if self.on_survivors:
            self.running_without = sorted(self.down)

    def start(self) -> None:
        super().start()
        self.nodes_at_restart = self.n - len(self.down)  # the job's start is its first rendezvous

    def on_failures(self, workers: List[int]) -> None:
        if not self.on_survivors:
            return super().on_failures(workers)
        for worker in workers:
            Method.on_failure(self, worker)
        admit_waiting(self.down, self.waiting, workers)  # the workers that came back join this restart
        self.restart_on_survivors(workers[0])

    def restart_on_survivors(self, worker: int) -> None:
        self.running_without = sorted(self.down)
        self.restart_from_checkpoint(worker, reason="failure")
        self.nodes_at_restart = self.n - len(self.down)

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
        return self.run.costs.spread_step(self.n, plan.n_computing) if plan.degraded else super().step_cost(plan)

    def restart_s(self) -> float:
        if self.restart_by_nodes and self.nodes_at_restart is not None:
            return self.run.costs.stall_s(entry_at(self.restart_by_nodes, self.nodes_at_restart))
        return super().restart_s()
