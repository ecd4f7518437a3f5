"""Oobleck: elastic training that keeps the global batch (Jang et al., SOSP 2023).

On a failure the in-flight step is lost, training stalls to re-form the pipelines over the
survivors, and goes on with the global batch spread over them (the same samples: exact). A
recovery is a membership change too. Nobody alive: roll back through the checkpoint path.
docs/METHODS.md ("Oobleck in the harness: the rules") has the data-parallel emulation and each
reading where the papers are silent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ..config import at_least, choices
from ..plan import Plan, resplit_plan
from ..timing.clock import StepCost
from .checkpointed import CheckpointedConfig
from .in_place import InPlaceMethod
from .setting_roles import FALLBACK, role


@dataclass
class OobleckConfig(CheckpointedConfig):
    # paper seconds of a re-formation (None: cluster.reconfigure_s)
    reconfigure_s: Optional[float] = field(default=None, metadata=at_least(0, "paper seconds (null: the cluster's)"))
    checkpoint_interval: Any = field(default="auto", metadata=role(FALLBACK))  # when too few nodes are left
    # a recovered (or added) worker joins: at once, with a reconfiguration (on_recover) | at the
    # next failure's reconfiguration (new nodes wait)
    admit_nodes: str = field(default="on_recover", metadata=choices("on_recover", "next_reconfiguration"))


class Oobleck(InPlaceMethod):
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
    def on_failures(self, workers: List[int]) -> None:
        """One re-formation of the pipelines for the failures of one instant (a whole machine)."""
        super().on_failures(workers)  # marked down
        self.admit_held_back(workers)  # nodes that waited for a reconfiguration join this one
        if len(self.down) >= self.n:
            self.fall_back(workers[0], {"reason": "no worker alive"})
        else:
            self._reconfigure("failure", workers[0], workers)

    def on_recoveries(self, workers: List[int]) -> None:
        """Nodes back at one instant (a replaced machine) join in one re-formation."""
        joined = []
        for worker in workers:
            waits = self.cfg.admit_nodes == "next_reconfiguration" and worker in self.down
            if self.hold_back(worker, waits, {"n_down": len(self.down)}):
                continue  # out of the plan until a failure reconfigures anyway
            if self.rejoins(worker):
                joined.append(worker)
        if joined:
            self._reconfigure("recover", joined[0], joined)

    def reconfigure_stall_s(self) -> float:
        return self.run.costs.stall_s(self.reconfigure_paper_s)

    def _reconfigure(self, reason: str, worker: int, workers: List[int]) -> None:
        stall = self.reconfigure_stall_s()
        self.run.clock.charge("stall", stall)
        self.counts["reconfigurations"] += 1
        # the workers of this event and the count: a list of every worker down would make each event's
        # record (and its cost) grow with the cluster; the fail and recover events already name them
        self.run.event(
            "reconfigure",
            worker,
            {
                "reason": reason,
                "workers": workers,
                "alive": self.n - len(self.down),
                "n_down": len(self.down),
                "stall_s": stall,
            },
        )

    # ------------------------------------------------------------ the step
    def plan(self, step: int) -> Plan:
        return resplit_plan(step, self.n, self.down) if self.down else super().plan(step)

    def step_cost(self, plan: Plan) -> StepCost:
        return self.run.costs.spread_step(self.n, plan.n_computing) if plan.degraded else super().step_cost(plan)

    def after_quiet_steps(self, plan: Plan, first: int, last: int, step_s: float) -> None:
        if plan.degraded:
            self.degraded_steps += last + 1 - first

    def before_optimizer(self, plan: Plan, result) -> None:
        if plan.degraded:
            self.degraded_steps += 1

    def summary(self) -> Dict[str, object]:
        out = super().summary()
        out.update(self.counts)
        out["degraded_steps"] = self.degraded_steps
        return out
