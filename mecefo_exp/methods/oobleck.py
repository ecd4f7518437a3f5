"""Oobleck: elastic training that keeps the global batch (Jang et al., SOSP 2023).

Oobleck precomputes pipeline templates so that, after a failure, the surviving nodes are
re-formed into pipelines at once; with f+1 replicas it tolerates f simultaneous failures.
On a failure the in-flight step is lost, training stalls to reconfigure (2 s for GPT-2
class to 10 s for GPT-3 6.7B in the authors' simulator), and then continues on every
survivor with the global batch redistributed: same samples, exact gradients. A recovery
is a membership change too and reconfigures again.

DP emulation (docs/METHODS.md): elastic data parallelism.

- Membership change (failure or recovery): the step in flight when a worker fails is
  lost (the default `interrupted`: its elapsed part is lost_work, the step is redone), and
  a reconfiguration stall of method.reconfigure_s paper seconds (null: cluster.reconfigure_s)
  goes through the paper-time map (CostModel.stall_s) and is logged as `reconfigure`.
- Re-split: every alive worker computes its own micro-batch; the down workers'
  micro-batches, in owner order, are dealt round-robin over the alive workers in worker
  order. Samples are named by their owner (Sample(step, owner)) and run in canonical
  order whoever computes them, so the loss curve is the failure-free one, bit for bit.
- Cost: Oobleck spreads the global batch evenly over the surviving pipelines, so each
  survivor computes n / alive micro-batches' worth of samples: compute = n / alive x a
  normal micro-batch (the part beyond one is `degraded_extra`), the all-reduce runs over
  the alive workers. The plan deals whole micro-batches (the simulated tier runs every
  normal micro-batch in one batch anyway, so the numerics do not depend on the deal);
  only the clock charges the even split.
- Nobody alive: the state survives nowhere, so roll back through the checkpoint path
  (a `fatal` event, detection + restart + load, spares replace the failed workers).

Readings where the papers are silent (ours):

- No detection stall beyond the reconfiguration constant (the authors' simulator charges
  the reconfiguration only; MeCeFO's neighbour in this harness pays no detection either).
- The failures (or recoveries) of one instant are one membership change and pay one stall:
  a whole machine (failure.unit_gpus = 8) is one node leaving, re-formed around once.
- Compute is linear in the samples a survivor holds (n / alive micro-batches' worth,
  docs/METHODS.md's "compute ~ n/(n-1)"); a real re-split into smaller micro-batches runs a
  little less efficiently than that.
- Oobleck still checkpoints to disk (method.checkpoint_interval) for the nobody-alive
  fallback; auto = Young/Daly with the mean time between such fatal failures (the cluster
  MTBF over `rollback_share`), so in practice only the initial checkpoint is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ..config import at_least, choices

from ..timing.clock import StepCost
from ..plan import Plan
from .base import CheckpointedConfig, InPlaceMethod, resplit_plan


@dataclass
class OobleckConfig(CheckpointedConfig):
    # paper seconds of a re-formation (None: cluster.reconfigure_s)
    reconfigure_s: Optional[float] = field(default=None, metadata=at_least(0, "paper seconds (null: the cluster's)"))
    checkpoint_interval: Any = "auto"
    # a recovered (or added) worker joins: at once, with a reconfiguration (on_recover) | at the
    # next failure's reconfiguration (new nodes wait)
    admit_nodes: str = field(default="on_recover", metadata=choices("on_recover", "next_reconfiguration"))


class Oobleck(InPlaceMethod):
    name = "oobleck"
    label = "Oobleck"
    Config = OobleckConfig

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.degraded_steps = 0
        self.counts.update(reconfigurations=0)

    def rollback_share(self, p_down: float) -> float:
        """Fatal only when every other worker is down: about p_down ** (n - 1) under
        independent failures, which sets the Young/Daly interval of the fallback checkpoints
        (in practice: only the initial one)."""
        return p_down ** (self.run.failure_units - 1)  # whole machines fail together with unit_gpus > 1

    @property
    def reconfigure_paper_s(self) -> float:
        own = self.cfg.reconfigure_s
        return self.run.cluster_cfg.reconfigure_s if own is None else own

    def job_start_s(self) -> float:
        return self.run.costs.stall_s(self.reconfigure_paper_s)  # the first re-formation of pipelines

    # ------------------------------------------------------------ membership
    def on_failure(self, worker: int) -> None:
        self.on_failures([worker])

    def on_failures(self, workers: List[int]) -> None:
        """One re-formation of the pipelines for the failures of one instant (a whole machine)."""
        for worker in workers:
            super().on_failure(worker)
        self.admit_held_back(workers)  # nodes that waited for a reconfiguration join this one
        if len(self.down) >= self.n:
            self.fall_back(workers[0], {"reason": "no worker alive"})
        else:
            self._reconfigure("failure", workers[0], workers)

    def on_recover(self, worker: int) -> None:
        self.on_recoveries([worker])

    def on_recoveries(self, workers: List[int]) -> None:
        """Nodes back at one instant (a replaced machine) join in one re-formation."""
        joined = []
        for worker in workers:
            if self.hold_back(worker, {"n_down": len(self.down)}):
                continue  # out of the plan until a failure reconfigures anyway
            if self.rejoins(worker):
                joined.append(worker)
        if joined:
            self._reconfigure("recover", joined[0], joined)

    def joins_later(self, worker: int) -> bool:
        return self.cfg.admit_nodes == "next_reconfiguration" and worker in self.down

    def reconfigure_stall_s(self) -> float:
        return self.run.costs.stall_s(self.reconfigure_paper_s)

    def _reconfigure(self, reason: str, worker: int, workers: List[int]) -> None:
        stall = self.reconfigure_stall_s()
        self.run.clock.charge("stall", stall)
        self.counts["reconfigurations"] += 1
        # the workers of this event and the count: a list of every worker down would make each event's
        # record (and its cost) grow with the cluster; the fail and recover events already name them
        self.run.event("reconfigure", worker, {"reason": reason, "workers": workers, "alive": self.n - len(self.down),
                                               "n_down": len(self.down), "stall_s": stall})

    # ------------------------------------------------------------ the step
    def plan(self, step: int) -> Plan:
        return resplit_plan(step, self.n, self.down) if self.down else super().plan(step)

    def step_cost(self, plan: Plan) -> StepCost:
        return self.run.costs.spread_step(self.n, plan.n_computing) if plan.degraded else super().step_cost(plan)

    def book_steady(self, plan: Plan, count: int) -> None:
        if plan.degraded:
            self.degraded_steps += count

    def before_optimizer(self, plan: Plan, result) -> None:
        if plan.degraded:
            self.degraded_steps += 1

    def summary(self) -> Dict[str, object]:
        out = super().summary()
        out.update(self.counts)
        out["degraded_steps"] = self.degraded_steps
        return out
