"""Synchronous data parallelism: a step is the slowest worker's compute, the part of the gradient
all-reduce its backward does not hide, and the method's overhead (CostModel.synchronous_step)."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

from ..steps import Help, Helpers, RedundantForward, StepCost, bubble_fraction, minus


class DataParallelSteps:
    """Synchronous data parallelism, from kernel seconds: every run that no other clock prices."""

    #: what summary.json's `clock` says of where a step's seconds come from (a clock that does not
    #: price steps from the kernels says so here)
    INFO: Dict[str, object] = {}
    #: whether the memory the kernels need bounds what runs (the run warns where it does not fit);
    #: a clock whose data says itself where a system does not fit says False
    kernels_bound_memory = True

    def __init__(self, costs):
        self.costs = costs

    @classmethod
    def of(cls, costs, tables_key: str) -> Optional["DataParallelSteps"]:
        return cls(costs)

    @classmethod
    def check_config(cls, cfg) -> Optional[str]:
        """What is wrong with the config for this clock, in one line (None: nothing); checked
        with the others, before any compute. Asked of a clock the config names (`hardware.clock`)."""
        return None

    def summary(self, span, trace, steps: int, n_workers: int) -> Dict[str, Any]:
        """What summary.json says of the run beyond its books, in this clock's terms (`span`: from the
        first step's start to the last committed step's end, run/books.py's `Span`)."""
        return {}

    def check_summary(self, summary: Dict[str, Any]) -> None:
        """Raise InvariantBroken (run/invariants.py) where the summary breaks what this clock promises."""

    def failure_free(self, n: int) -> StepCost:
        return self.costs.synchronous_step(self.costs.profile["mb:normal"], 1, n)

    def workers(
        self, special: Mapping[int, Tuple[str, ...]], first_normal: Optional[int], n_computing: int, ft_overhead: float
    ) -> StepCost:
        """The slowest of the workers in `special` (their modes) and one normal worker, if any."""
        costs = self.costs
        candidates = sorted(special.items())  # in worker order: the lowest of equally slow workers counts
        if first_normal is not None:
            candidates.insert(sum(1 for w, _ in candidates if w < first_normal), (first_normal, ("normal",)))
        slowest = max((tuple(m) for _, m in candidates), key=costs.worker_s, default=())
        return costs.synchronous_step(costs.worker_s(slowest), len(slowest), n_computing, ft_overhead)

    def spread(self, n: int, n_computing: int) -> StepCost:
        """Each computing worker holds n / n_computing micro-batches' worth (beyond one: degraded_extra)."""
        share = n / n_computing
        return self.costs.synchronous_step(share * self.costs.profile["mb:normal"], share, n_computing)

    def helped(
        self, plan, helpers: Helpers, slots: int, model_work_s: float, redundant: Optional[RedundantForward]
    ) -> StepCost:
        costs = self.costs
        slowest, helping = None, 0
        for h, workers in helpers.items():  # the slowest: a helper's kernel or, if any computing
            if h.kernel is not None:  # worker helps nobody, a normal micro-batch
                slowest = max(slowest or (0.0, 0), (costs.profile[h.kernel], h.microbatches))
                helping += len(workers)
        if slowest is not None:
            if plan.n_computing > helping:
                slowest = max(slowest, (costs.worker_s(("normal",)), 1))
            return costs.synchronous_step(slowest[0], slowest[1], plan.n_computing, ft_overhead=model_work_s)
        base = self.workers(plan.special_modes(), plan.first_normal_worker(), plan.n_computing, 0.0)
        extra = self.redundant_s(redundant) if redundant is not None else 0.0
        return StepCost(
            compute=base.compute, comm=base.comm, ft_overhead=extra + model_work_s, degraded_extra=base.degraded_extra
        )

    def redundant_s(self, redundant: RedundantForward) -> float:
        """How much the redundant forwards lengthen the step beyond the slowest planned worker: a
        worker holding `own` micro-batches after one holding `pred` runs pred forwards more."""
        costs = self.costs
        forward = costs.forward_s

        def worker_s(owners: int) -> float:
            return costs.worker_s(("normal",) * owners)

        slowest = worker_s(redundant.heaviest)
        extra = 0.0
        for pred, own in sorted(redundant.pairs):
            extra = max(extra, pred * forward - (slowest - worker_s(own)))
        return extra

    def rest(self, full: StepCost, done_s: float, slowed_in_flight: Optional[Help]) -> StepCost:
        """What is left of a step a failure interrupted and that goes on: the degraded step's whole
        cost (the kernels price all of it) less what was done."""
        return minus(full, done_s)

    def bubble_s(self, stages: int, microbatches: int) -> float:
        """No pipeline here: the bubble of a modelled 1F1B schedule of `stages` x `microbatches`,
        its idle share (p - 1) / (m + p - 1) of the failure-free step."""
        return bubble_fraction(stages, microbatches) * self.failure_free(self.costs.cfg.n_workers).total
