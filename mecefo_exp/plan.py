"""What a method hands the cluster each step: which worker computes which micro-batch, how.

A micro-batch is named by its `Sample` (step, owner): the worker whose share of the global
batch it is. The cluster reads it from the sample stream whoever computes it.
A `Mode` says how a micro-batch is computed and which parameters its gradient reaches.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Dict, List, NamedTuple, Optional, Sequence

import torch


class Sample(NamedTuple):
    step: int
    owner: int


class WorkItem(NamedTuple):  # a tuple: plans of 16,384 workers are built at every event
    sample: Sample
    mode: str = "normal"


@dataclass
class Plan:
    step: int
    work: Dict[int, List[WorkItem]]  # computing worker -> its micro-batches
    degraded: bool = False  # some worker does more (or other) work than failure-free
    notes: Dict[str, object] = field(default_factory=dict)

    def by_mode(self) -> Dict[str, List[Sample]]:
        """Micro-batches grouped by mode, each group in canonical (step, owner) order.

        The order is what makes execution independent of *who* computes a micro-batch:
        the same set of samples always runs in the same order, bit for bit.
        """
        groups: Dict[str, List[Sample]] = {}
        for items in self.work.values():
            for item in items:
                groups.setdefault(item.mode, []).append(item.sample)
        return {mode: sorted(samples) for mode, samples in sorted(groups.items())}

    def worker_modes(self) -> Dict[int, List[str]]:
        return {w: [i.mode for i in items] for w, items in self.work.items() if items}

    @property
    def computing_workers(self) -> List[int]:
        return sorted(w for w, items in self.work.items() if items)


class FailureFreePlan(Plan):
    """Every one of `n` workers computes its own micro-batch in the normal mode. The same plan as
    `Plan(step, {w: [WorkItem(Sample(step, w))] for w in range(n)})`, but its work is built only
    when asked for: a numerics-free run of 16,384 workers plans at every event and never reads it."""

    def __init__(self, step: int, n: int):
        self.step, self.n, self.degraded, self.notes = step, n, False, {}
        self._work: Optional[Dict[int, List[WorkItem]]] = None

    @property
    def work(self) -> Dict[int, List[WorkItem]]:
        if self._work is None:
            self._work = {w: [WorkItem(Sample(self.step, w))] for w in range(self.n)}
        return self._work

    @property
    def computing_workers(self) -> Sequence[int]:
        return range(self.n)  # not a list: the loop asks at every event


def _all_parameters(name: str) -> bool:
    return True


@dataclass
class Mode:
    """How a micro-batch is computed.

    `context(model)` switches the model into this mode for a forward+backward (MeCeFO's
    approximations are such a context); `contributes(param_name)` says whether this
    mode's micro-batches count towards that parameter's gradient average; with
    `backward=False` the micro-batch is only run forward (a redundant forward) and
    contributes no gradient at all.
    """
    name: str
    contributes: Callable[[str], bool] = _all_parameters
    context: Optional[Callable[[torch.nn.Module], ContextManager]] = None
    backward: bool = True
    kernel: str = ""  # profile kernel of one micro-batch in this mode (default "mb:<name>")

    def __post_init__(self):
        if not self.kernel:
            self.kernel = f"mb:{self.name}"

    def activate(self, model: torch.nn.Module) -> ContextManager:
        return self.context(model) if self.context is not None else contextlib.nullcontext()


NORMAL = Mode("normal")
