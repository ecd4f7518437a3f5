"""Oobleck and Bamboo as the Oobleck artifact's simulators book a removal (docs/ARTIFACT.md), as
subclasses of our methods."""

from typing import List, Optional

from ..methods.bamboo import Bamboo
from ..methods.base import resplit_plan
from ..methods.oobleck import Oobleck
from ..plan import Plan
from ..timing.clock import StepCost
from .restarts import ArtifactRestarts


class OobleckArtifact(ArtifactRestarts, Oobleck):
    """Oobleck restarting as the artifact does (restarts.py), with its re-formation time as the
    rendezvous: a step that ends inside the re-formation a removal starts still counts (its event
    keeps its version until the re-formation completes, O:1177-1179), and the nodes that become
    usable while it trains wait for the next removal."""

    OPTIONS = {"min_nodes": 1}

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        options = {**self.OPTIONS, **(cfg.get("variant_options") or {})}
        self._init_restarts(int(options["min_nodes"]))
        self.running_without: List[int] = []

    def start(self) -> None:
        super().start()
        self.begin_configuration()

    def rendezvous_delay_s(self, at: float) -> float:
        return self.reconfigure_stall_s()

    def on_failures(self, workers: List[int]) -> None:
        self.removal(workers, self.run.books.trace.last_time())

    def on_recoveries(self, workers: List[int]) -> None:
        self.nodes_ready(workers, self.run.books.trace.last_time())

    def configured(self, due: float) -> None:
        self.counts["reconfigurations"] += 1

    def plan(self, step: int) -> Plan:
        if self.stopped:
            return Plan(step, {})  # the loop waits for an event
        return resplit_plan(step, self.n, set(self.running_without)) if self.running_without else Oobleck.plan(self, step)

    def step_cost(self, plan: Plan) -> StepCost:
        carried = self.carried_cost()
        return carried if carried is not None else super().step_cost(plan)

    def steady_steps(self, plan: Plan, step_s: float) -> Optional[int]:
        """A step that a removal did not stop is an event of its own."""
        return 0 if self.carry is not None else super().steady_steps(plan, step_s)

    def after_step(self, step: int) -> None:
        self.carry = None
        super().after_step(step)


class BambooArtifact(Bamboo):
    """Losing an idle spare slows the pipelines 1.5x until the next re-formation, as any removal
    while running does in the artifact (B:1100-1104)."""

    spare_loss_slows = True
