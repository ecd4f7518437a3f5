"""How long a step takes, by the clock a run chose once: the method says what happened, the clock
says how long.

A method describes its step in the clock's small vocabulary (the plan; the workers that help a
failed one, grouped by the `Help` they give; whole-model work it adds; Bamboo's redundant forwards) and calls
`CostModel.step`, `spread_step` or `bubble_s`. Which formula answers is fixed when the run
starts, by the kind of clock:

- `DataParallelSteps`: synchronous data parallelism; the slowest worker's compute, the exposed
  all-reduce, the method's overhead (clock.py).
- `LayoutSteps`: a hybrid TP x PP x DP layout; a slot doing more slows its stage's pipeline slots,
  a batch spread over fewer GPUs lengthens the pipeline part (layout.py).
- `TableSteps`: a failure-free throughput per node count (the Oobleck authors' simulators); a
  helper slows the whole step by its factor, and the table's step is the whole step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Dict, FrozenSet, Mapping, Optional, Tuple

from . import layout as pipeline


@dataclass
class StepCost:
    """Simulated seconds of one optimizer step, by category (a subset of CATEGORIES)."""

    compute: float = 0.0  # the failure-free worker's forward+backward and the optimizer
    comm: float = 0.0  # the gradient all-reduce, as far as backward does not hide it
    ft_overhead: float = 0.0  # what the method pays every step to be fault tolerant
    degraded_extra: float = 0.0  # the slowest worker's extra work while degraded

    @property
    def total(self) -> float:
        return self.compute + self.comm + self.ft_overhead + self.degraded_extra

    def as_dict(self) -> Dict[str, float]:
        return {
            "compute": self.compute,
            "comm": self.comm,
            "ft_overhead": self.ft_overhead,
            "degraded_extra": self.degraded_extra,
        }


@dataclass(frozen=True)
class Help:
    """What a worker that covers a failed one runs in a step.

    `kernel`: the profile kernel of its whole step's work (MeCeFO's neighbour pair: two approximate
    micro-batches in one pass) holding `microbatches` forwards. None: it takes over its ward's part
    of the model as well as its own (Bamboo's shadow): the ward's stage in a pipeline, the ward's
    micro-batches in data parallelism (as the plan deals them)."""

    kernel: Optional[str] = None
    microbatches: int = 2
    #: how many times longer a whole step runs while it helps, for a clock without kernels (a
    #: throughput table); None: two micro-batches' time. Kernel clocks derive it from the kernels.
    slowdown: Optional[float] = None


@dataclass(frozen=True)
class RedundantForward:
    """Bamboo's eager redundancy: every computing worker also runs the forward of its ring
    predecessor's micro-batches. `pairs`: the (predecessor's, own) micro-batch counts that occur
    between neighbouring computing workers; `heaviest`: the most micro-batches a worker holds."""

    pairs: FrozenSet[Tuple[int, int]]
    heaviest: int


def minus(cost: StepCost, seconds: float) -> StepCost:
    """`cost` less the part of it already spent (taken from compute first): what is left of a step
    that a failure interrupted and that goes on."""
    parts = cost.as_dict()
    for cat in ("compute", "degraded_extra", "comm", "ft_overhead"):
        take = min(parts[cat], seconds)
        parts[cat] -= take
        seconds -= take
    return StepCost(**parts)


#: each kind of help and the workers giving it (a view such as MeCeFO's cover.values(): a step
#: reads the count, not the workers, where the clock allows; 65,536-worker runs)
Helpers = Mapping[Help, Collection[int]]


class DataParallelSteps:
    def __init__(self, costs):
        self.costs = costs

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


class LayoutSteps(DataParallelSteps):
    def failure_free(self, n: int) -> StepCost:
        return self.costs.layout

    def workers(self, special, first_normal, n_computing, ft_overhead) -> StepCost:
        """Each GPU at its place in the layout; one doing more slows its stage."""
        costs = self.costs
        normal = costs.worker_s(("normal",))
        factors: Dict[int, float] = {}
        for w, m in special.items():
            stage = costs.shape.stage(w)
            factors[stage] = max(factors.get(stage, 1.0), costs.worker_s(m) / normal)
        return costs.layout_step(factors, ft_overhead=ft_overhead)

    def spread(self, n: int, n_computing: int) -> StepCost:
        """The pipelines re-formed over the GPUs left: the pipeline part n / n_computing times longer."""
        return self.costs.layout_step({}, share=n / n_computing)

    def helped(self, plan, helpers, slots, model_work_s, redundant) -> StepCost:
        """A helper's slot runs its stage's micro-batches `factor` times longer: a kernel's time over a
        normal micro-batch's, or both stages' work (Bamboo's shadow); whole-model work is split over
        the tensor- and pipeline-parallel GPUs of a replica (assumption: 1 / (pp x tp) each)."""
        costs = self.costs
        kernels, shape = costs.profile.kernels, costs.shape
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
        return costs.layout_step(factors, share=costs.cfg.n_workers / slots, ft_overhead=overhead)

    def redundant_s(self, redundant: RedundantForward) -> float:
        """Every stage runs the next stage's forwards in the idle slots of its 1F1B schedule: only
        what does not fit is charged (layout.py)."""
        return pipeline.redundant_forward_s(self.costs.profile.kernels)

    def bubble_s(self, stages: int, microbatches: int) -> float:
        """The layout's own bubble (each GPU idles in its stage's slots); `stages` and `microbatches`
        are not read."""
        return self.costs.profile["layout:bubble"]


class TableSteps(DataParallelSteps):
    """The table's step at a node count is the whole step: overheads and redundancy are in it."""

    def failure_free(self, n: int) -> StepCost:
        return self.costs.table_step(n)

    def workers(self, special, first_normal, n_computing, ft_overhead) -> StepCost:
        return self.costs.table_step(n_computing, ft_overhead=ft_overhead)

    def spread(self, n: int, n_computing: int) -> StepCost:
        return self.costs.table_step(n_computing)

    def redundant_s(self, redundant: RedundantForward) -> float:
        return 0.0

    def rest(self, full: StepCost, done_s: float, slowed_in_flight: Optional[Help]) -> StepCost:
        """A step begun at the failure-free speed and slowed in flight (`slowed_in_flight`): what
        was done ran at the speed it started at, the rest runs slowed. A step begun slowed keeps
        its cost, less what was done."""
        if slowed_in_flight is None:
            return minus(full, done_s)
        slowdown = slowed_in_flight.slowdown if slowed_in_flight.slowdown is not None else 2.0
        left = max(0.0, full.compute - done_s)  # a table step's compute is the failure-free step
        return StepCost(compute=left, degraded_extra=(slowdown - 1.0) * left)

    def helped(self, plan, helpers, slots, model_work_s, redundant) -> StepCost:
        """The step at the job's `slots` nodes, slowed by the largest helper's factor (a shadow doing
        its ward's work too: two micro-batches' time)."""
        profile = self.costs.profile
        slowdown = max(
            (
                profile[h.kernel] / profile["mb:normal"]
                if h.kernel is not None
                else h.slowdown
                if h.slowdown is not None
                else 2.0
                for h in helpers
            ),
            default=1.0,
        )
        return self.costs.table_step(slots, slowdown=slowdown)


def bubble_fraction(stages: int, microbatches: int) -> float:
    """Idle share of a 1F1B pipeline step: (p - 1) / (m + p - 1)."""
    return (stages - 1) / (microbatches + stages - 1)
