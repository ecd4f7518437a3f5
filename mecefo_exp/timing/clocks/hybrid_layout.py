"""A hybrid TP x PP x DP layout (parallel.tp or pp > 1): a slot doing more slows its stage's
pipeline slots; a batch spread over fewer GPUs lengthens the pipeline part (timing/layout.py)."""

from __future__ import annotations

from typing import Dict, Optional

from ...config import is_hybrid
from .. import layout as pipeline
from ..layout import LayoutShape
from ..steps import RedundantForward, StepCost
from .data_parallel import DataParallelSteps


class LayoutSteps(DataParallelSteps):
    """A hybrid layout's step: its failure-free step from the profile (`layout:compute`,
    `layout:comm`), and where each GPU sits in it (`shape`: which stage a failure takes out)."""

    def __init__(self, costs, layout: StepCost, shape: LayoutShape):
        super().__init__(costs)
        self.layout, self.shape = layout, shape
        self._steps: Dict[tuple, StepCost] = {}

    @classmethod
    def of(cls, costs, tables_key: str) -> Optional["LayoutSteps"]:
        kernels = costs.profile.kernels
        if "layout:compute" not in kernels:
            return None
        if costs.shape is None:
            raise ValueError("a profile with a hybrid layout's step needs the layout's shape (parallel.tp/pp/dp)")
        return cls(costs, StepCost(compute=kernels["layout:compute"], comm=kernels["layout:comm"]), costs.shape)

    @classmethod
    def check_config(cls, cfg) -> Optional[str]:
        """Named as `hardware.clock`, it still prices only a hybrid layout (which chooses it by itself)."""
        if is_hybrid(cfg):
            return None
        return (
            f"hardware.clock={cfg.hardware.clock}: the hybrid-layout clock prices a layout with parallel.tp or "
            "parallel.pp > 1 (where it is chosen without being named); here parallel.tp=pp=1"
        )

    def failure_free(self, n: int) -> StepCost:
        return self.layout

    def layout_step(self, stage_factor: Dict[int, float], share: float = 1.0, ft_overhead: float = 0.0) -> StepCost:
        """A step of the layout with some (stage, replica) slots doing `stage_factor` times their
        micro-batch work, and the global batch on n / `share` of the GPUs (timing/layout.py)."""
        key = (tuple(sorted(stage_factor.items())), share, ft_overhead)
        if key not in self._steps:
            extra = pipeline.degraded_pipeline_s(self.costs.profile.kernels, stage_factor, share)
            self._steps[key] = StepCost(
                compute=self.layout.compute, comm=self.layout.comm, ft_overhead=ft_overhead, degraded_extra=extra
            )
        return self._steps[key]

    def workers(self, special, first_normal, n_computing, ft_overhead) -> StepCost:
        """Each GPU at its place in the layout; one doing more slows its stage."""
        costs = self.costs
        normal = costs.worker_s(("normal",))
        factors: Dict[int, float] = {}
        for w, m in special.items():
            stage = self.shape.stage(w)
            factors[stage] = max(factors.get(stage, 1.0), costs.worker_s(m) / normal)
        return self.layout_step(factors, ft_overhead=ft_overhead)

    def spread(self, n: int, n_computing: int) -> StepCost:
        """The pipelines re-formed over the GPUs left: the pipeline part n / n_computing times longer."""
        return self.layout_step({}, share=n / n_computing)

    def helped(self, plan, helpers, slots, model_work_s, redundant) -> StepCost:
        """A helper's slot runs its stage's micro-batches `factor` times longer: a kernel's time over a
        normal micro-batch's, or both stages' work (Bamboo's shadow); whole-model work is split over
        the tensor- and pipeline-parallel GPUs of a replica (assumption: 1 / (pp x tp) each)."""
        costs = self.costs
        kernels, shape = costs.profile.kernels, self.shape
        factors: Dict[int, float] = {}
        for h, workers in helpers.items():
            for w in workers:
                stage = shape.stage(w)
                factor = (
                    costs.profile[h.kernel] / costs.profile["mb:normal"]
                    if h.kernel is not None
                    else pipeline.shadow_factor(kernels, stage)
                )
                factors[stage] = max(factors.get(stage, 0.0), factor)
        overhead = model_work_s / (shape.pp * shape.tp)
        if redundant is not None:
            overhead += self.redundant_s(redundant)
        return self.layout_step(factors, share=costs.cfg.n_workers / slots, ft_overhead=overhead)

    def redundant_s(self, redundant: RedundantForward) -> float:
        """Every stage runs the next stage's forwards in the idle slots of its 1F1B schedule: only
        what does not fit is charged (layout.py)."""
        return pipeline.redundant_forward_s(self.costs.profile.kernels)

    def bubble_s(self, stages: int, microbatches: int) -> float:
        """The layout's own bubble (each GPU idles in its stage's slots); `stages` and `microbatches`
        are not read."""
        return self.costs.profile["layout:bubble"]
