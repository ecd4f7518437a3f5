"""What a method hands the cluster each step: which worker computes which micro-batch, how.

A micro-batch is named by its `Sample` (step, owner): the worker whose share of the global
batch it is. The cluster reads it from the sample stream whoever computes it.
A `Mode` says how a micro-batch is computed and which parameters its gradient reaches.
`NonFiniteLoss` and `StepNotCommitted` are the two ways a step's result does not count (here, a
leaf without tensors, so that the command line can name them without loading torch).
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Callable,
    ContextManager,
    Dict,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Union,
)

if TYPE_CHECKING:
    import torch


class Sample(NamedTuple):
    step: int
    owner: int


class WorkItem(NamedTuple):  # a tuple: cheap to make in numbers
    sample: Sample
    mode: str = "normal"


@dataclass
class Plan:
    step: int
    work: Dict[int, List[WorkItem]]  # computing worker -> its micro-batches
    degraded: bool = False  # some worker does more (or other) work than failure-free
    #: the failed workers covered in this step, each by the worker doing its work (MeCeFO's
    #: neighbour, Bamboo's shadow); None: nobody covers anybody
    cover: Optional[Mapping[int, int]] = None
    #: the failed slots' micro-batches dealt over the workers left (a fall-back with no spares): the
    #: clock prices the global batch spread over them
    on_survivors: bool = False

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
    def computing_workers(self) -> Sequence[int]:
        return sorted(w for w, items in self.work.items() if items)

    @property
    def n_computing(self) -> int:
        return sum(1 for items in self.work.values() if items)

    def special_modes(self) -> Dict[int, Tuple[str, ...]]:
        """The computing workers whose work is not one normal micro-batch: worker -> its modes."""
        return {
            w: modes
            for w, modes in ((w, tuple(i.mode for i in items)) for w, items in self.work.items() if items)
            if modes != ("normal",)
        }

    def first_normal_worker(self) -> Optional[int]:
        """The lowest worker that computes exactly one normal micro-batch, if any."""
        return min((w for w, items in self.work.items() if len(items) == 1 and items[0].mode == "normal"), default=None)


Changes = Dict[int, List[WorkItem]]


class SparsePlan(Plan):
    """Every one of `n` workers computes its own micro-batch in the normal mode, except the workers
    in `changes` (worker -> its micro-batches; an empty list: it computes nothing).

    Built for cost proportional to events: `n_computing` is given by the method (it keeps the
    count), `changes` may be a function called only when something reads the changed workers
    (the numerics, a clock that looks at them), and the per-worker `work` is built only for the
    numerics. A numerics-free run of 65,536 workers plans at every event and reads none of them.
    A plan may read its method's state when asked, so it is used before the method's next event.
    """

    def __init__(
        self,
        step: int,
        n: int,
        changes: Union[Changes, Callable[[], Changes], None] = None,
        degraded: bool = False,
        cover: Optional[Mapping[int, int]] = None,
        n_computing: Optional[int] = None,
    ):
        self.step, self.n, self.degraded = step, n, degraded
        self.cover, self.on_survivors = cover, False
        self._changes = changes if changes is not None else {}
        self._n_computing = n_computing
        self._work: Optional[Dict[int, List[WorkItem]]] = None

    @property
    def changes(self) -> Changes:
        if callable(self._changes):
            self._changes = self._changes()
        return self._changes

    @property
    def work(self) -> Dict[int, List[WorkItem]]:
        if self._work is None:
            step, changes = self.step, self.changes
            work = {}
            for w in range(self.n):
                items = changes.get(w)
                if items is None:
                    work[w] = [WorkItem(Sample(step, w))]
                elif items:
                    work[w] = items
            self._work = work
        return self._work

    @work.setter
    def work(self, work: Dict[int, List[WorkItem]]) -> None:
        self._work = work

    @property
    def computing_workers(self) -> Sequence[int]:
        if not self.changes:
            return range(self.n)
        return [w for w in range(self.n) if self.changes.get(w) != []]

    @property
    def n_computing(self) -> int:
        if self._n_computing is None:
            self._n_computing = self.n - sum(1 for items in self.changes.values() if not items)
        return self._n_computing

    def special_modes(self) -> Dict[int, Tuple[str, ...]]:
        return {
            w: modes
            for w, modes in ((w, tuple(i.mode for i in items)) for w, items in sorted(self.changes.items()) if items)
            if modes != ("normal",)
        }

    def first_normal_worker(self) -> Optional[int]:
        changes = self.changes
        for w in range(self.n):  # stops within len(changes) + 1 workers
            items = changes.get(w)
            if items is None or (len(items) == 1 and items[0].mode == "normal"):
                return w
        return None


class FailureFreePlan(SparsePlan):
    """Every one of `n` workers computes its own micro-batch in the normal mode."""

    def __init__(self, step: int, n: int):
        super().__init__(step, n)


def resplit_plan(step: int, n: int, down: set) -> SparsePlan:
    """Elastic data parallelism that keeps the global batch: every alive worker computes its own
    micro-batch and the down workers' micro-batches, in owner order, are dealt round-robin over
    the alive workers. Samples are named by their owner and run in canonical order whoever
    computes them, so the loss curve is the failure-free one, bit for bit. The deal is made only
    when read (the numerics); the clock needs only the number of workers left."""

    def deal() -> Dict[int, List[WorkItem]]:
        orphans = sorted(down)
        changes: Dict[int, List[WorkItem]] = {w: [] for w in orphans}
        receivers = list(itertools.islice((w for w in range(n) if w not in down), len(orphans)))
        for i, orphan in enumerate(orphans if receivers else ()):  # len(receivers) = min(len(down), alive)
            w = receivers[i % len(receivers)]
            changes.setdefault(w, [WorkItem(Sample(step, w))]).append(WorkItem(Sample(step, orphan)))
        return changes

    return SparsePlan(step, n, deal, degraded=True, n_computing=n - len(down))


class NonFiniteLoss(RuntimeError):
    """The loss is NaN or infinite: the run ends `failed` at this step instead of training on garbage."""


class StepNotCommitted(RuntimeError):
    """torchft voted the step down (a collective failed): nothing of the plan's step is applied."""


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
#: a forward-only micro-batch: every profile has it (the backward is the rest of a step); planned
#: by no method, charged by Bamboo's redundant forward
FORWARD = Mode("forward", backward=False)
