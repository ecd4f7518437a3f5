"""A clock of a study's own, which a test names as `hardware.clock=helpers.clocks:TwiceAsSlow`."""

from mecefo_exp.timing.clocks import DataParallelSteps
from mecefo_exp.timing.steps import StepCost


class TwiceAsSlow(DataParallelSteps):
    """Data parallelism whose every step takes twice the seconds, with a check and a summary of its own."""

    INFO = {"compute": "twice"}

    @classmethod
    def check_config(cls, cfg):
        return None if cfg.cluster.n_workers % 2 == 0 else "TwiceAsSlow: cluster.n_workers must be even"

    def failure_free(self, n: int) -> StepCost:
        step = super().failure_free(n)
        return StepCost(compute=2 * step.compute, comm=2 * step.comm)

    def summary(self, span, trace, steps, n_workers):
        return {"twice": {"steps": steps, "first_step_s": span.first_step_s}}
