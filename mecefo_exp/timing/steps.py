"""The words a method describes its step in, and the cost of a step in categories.

A method describes its step in the clock's small vocabulary (the plan; the workers that help a
failed one, grouped by the `Help` they give; whole-model work it adds; Bamboo's redundant forwards)
and calls `CostModel.step`, `spread_step` or `bubble_s`. Which formulas answer is fixed when the
run starts, by the kind of clock (timing/clocks/, one file each).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Dict, FrozenSet, Mapping, Optional, Tuple


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


def bubble_fraction(stages: int, microbatches: int) -> float:
    """Idle share of a 1F1B pipeline step: (p - 1) / (m + p - 1)."""
    return (stages - 1) / (microbatches + stages - 1)
