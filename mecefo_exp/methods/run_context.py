"""What a method, a checkpoint store or the torchft membership may use of the run: `RunContext`.

The trainer's `Experiment` (mecefo_exp/run/context.py) implements it; a test runs every method
against a strict proxy of this list, so a new dependency on the trainer shows up here first.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Dict, Optional, Protocol, Sequence, Tuple

if TYPE_CHECKING:
    import torch
    from omegaconf import DictConfig

    from ..config.plain import AttrDict
    from ..failures.events import FailureEvent
    from ..metrics import RunRecords
    from ..numerics.executor import LocalCluster
    from ..run.books import Books
    from ..timing.clock import CostModel, SimClock
    from ..timing.layout import LayoutShape
    from .base import Method


class TraceView(Protocol):
    """What a method reads of the failure trace: only the trainer's loop moves its cursor."""

    @property
    def events(self) -> Sequence[FailureEvent]: ...

    @property
    def node_rows(self) -> Sequence[Tuple[float, str]]:
        """A node trace's rows as read, (seconds, add | remove); empty for any other trace."""

    def next_failure_time(self) -> Optional[float]: ...

    def last_time(self) -> Optional[float]: ...


class RunContext(Protocol):
    """Exactly what a method, a checkpoint store or the torchft membership may use of the run.

    The trainer's `Experiment` is one; a test runs every method against a strict proxy of
    this list, so a new dependency on the trainer shows up here first.
    """

    # what the run is
    n_workers: int
    max_steps: int
    run_dir: Path
    numerics: bool
    cluster_cfg: AttrDict  # plain cluster settings: detection_s, restart_s, reconfigure_s, ...
    model_cfg: DictConfig
    placement: Optional[LayoutShape]  # where each GPU sits in a hybrid layout; None: pure data parallelism
    device: Optional[torch.device]  # None without numerics

    @property
    def failure_units(self) -> int:
        """Independent failure units (failure.unit_gpus workers each)."""

    # the live run
    step: int

    @property
    def model(self) -> Optional[torch.nn.Module]:
        """The torch module being trained; None without numerics (the model is only a shape)."""

    @property
    def cluster(self) -> Optional[LocalCluster]:
        """The executor of a plan (MeCeFO runs the exact gradient for its measurement); None
        without numerics."""

    @property
    def clock(self) -> SimClock: ...

    costs: CostModel
    records: RunRecords  # extra jsonl streams, cut back on resume like the others
    method: Method  # the run's method
    books: Books  # what torchft's heal hands a restarted worker

    @property
    def trace(self) -> TraceView:
        """The failure trace: a method reads it (last_time, events, node rows), never pops it."""

    @property
    def is_main(self) -> bool:
        """This process writes the run folder."""

    leader: int  # the worker whose process writes it (torchft moves it when that one dies)

    def event(
        self,
        kind: str,
        worker: Optional[int] = None,
        detail: Optional[dict] = None,
        at: Optional[Tuple[int, float]] = None,
    ) -> None:
        """A row of events.jsonl, stamped with the step and simulated time now, or `at` (step,
        seconds) for work booked after the fact (a quiet run's snapshots)."""

    def membership_event(self, kind: str, worker: int, detail: Dict) -> None: ...

    def state_dict(self, harness: bool = False) -> Dict: ...

    def restore(self, state: Dict, to_step: int, reason: str, worker: Optional[int] = None) -> None: ...

    def load_peer_state(self, training: Dict, books: Dict) -> None: ...

    def set_leader(self, worker: int) -> None: ...

    def barrier(self) -> None: ...

    def training_starts_at(self, at_s: float) -> None: ...

    def expected_down_fraction(self) -> float: ...

    def cluster_mtbf_s(self) -> float: ...


def run_context_members() -> set:
    """The names RunContext declares (attributes and methods)."""
    return set(RunContext.__annotations__) | {k for k in vars(RunContext) if not k.startswith("_")}
