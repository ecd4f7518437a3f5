"""Oobleck and Bamboo as the Oobleck artifact's simulators book a removal (docs/ARTIFACT.md,
quirks 1 and 6), as subclasses of our methods."""

from typing import Optional, Tuple

from ..methods.bamboo import Bamboo
from ..methods.oobleck import Oobleck
from ..plan import Plan
from ..timing.clock import StepCost


class OobleckArtifact(Oobleck):
    """A step that would end inside the re-formation a removal starts still counts: the step's
    event keeps its version until the re-formation completes (O:1177-1179)."""

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.finishing: Optional[Tuple[int, float]] = None  # (step, seconds left) of a step finishing in the stall

    def interrupted(self, plan: Plan, elapsed: float) -> None:
        left = self.step_cost(plan).total - elapsed
        if left <= super().reconfigure_stall_s():
            self.run.clock.add_to_step(plan.step, "compute", elapsed)
            self.finishing = (plan.step, left)
            return
        super().interrupted(plan, elapsed)

    def reconfigure_stall_s(self) -> float:
        """The stall began at the failure; the clock is past it by the finishing step's remainder."""
        stall = super().reconfigure_stall_s()
        return stall - self.finishing[1] if self.finishing is not None else stall

    def step_cost(self, plan: Plan) -> StepCost:
        if self.finishing is not None and self.finishing[0] == plan.step:
            return StepCost(compute=self.finishing[1])
        return super().step_cost(plan)

    def steady_steps(self, plan: Plan, step_s: float) -> Optional[int]:
        """A step finishing inside a re-formation is an event of its own."""
        return 0 if self.finishing is not None else super().steady_steps(plan, step_s)

    def before_optimizer(self, plan: Plan, result) -> None:
        self.finishing = None
        super().before_optimizer(plan, result)


class BambooArtifact(Bamboo):
    """Losing an idle spare slows the pipelines 1.5x until the next re-formation, as any removal
    while running does in the artifact (B:1100-1104)."""

    spare_loss_slows = True
