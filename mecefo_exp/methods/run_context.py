"""What a method, a checkpoint store or the torchft membership may use of the run: `RunContext`.

The trainer's `Experiment` (mecefo_exp/context.py) implements it; a test runs every method
against a strict proxy of this list, so a new dependency on the trainer shows up here first.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Protocol

if TYPE_CHECKING:
    from ..timing.clock import CostModel, SimClock


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
    cluster_cfg: Any  # plain cluster settings: detection_s, restart_s, reconfigure_s, ...
    model_cfg: Any
    placement: Any  # where each GPU sits in a hybrid layout (timing.layout.LayoutShape); None: pure DP
    device: Any  # torch.device
    failure_units: int  # independent failure units (failure.unit_gpus workers each)
    # the live run
    step: int
    model: Any  # the torch module being trained (the meta-device shape without numerics)
    cluster: Any  # the executor of a plan (MeCeFO runs the exact gradient for its measurement)
    clock: SimClock
    costs: CostModel
    records: Any  # RunRecords: extra jsonl streams, cut back on resume like the others
    method: Any  # the run's method (methods/base.Method)
    books: Any  # Books: what torchft's heal hands a restarted worker
    trace: Any  # the failure trace (faults.Trace): a method reads it (last_time, events, node rows), never pops it
    is_main: bool  # this process writes the run folder
    leader: int  # the worker whose process writes it (torchft moves it when that one dies)

    def event(self, kind: str, worker: Optional[int] = None, detail: Optional[dict] = None) -> None: ...

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
