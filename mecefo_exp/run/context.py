"""The run as methods, checkpoint stores and the torchft membership see it.

`Context` declares every attribute of a run up front, with its type (a part `setup()` has not
built yet is absent: `built(name)` says whether it is there), and implements `RunContext`
(methods/run_context.py): the clock and costs, the event log, the
saved state and the rollback, the trace's expectations, the record's writer. The trainer's
`Experiment` (experiment.py) builds the parts and runs the loop on top of it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple, Union

if TYPE_CHECKING:
    import torch
    from omegaconf import DictConfig

    from ..numerics.executor import LocalCluster
    from .shape_only import ShapeOnlyState
    from .training import TrainingState

from ..config import is_hybrid, plain, sequences_per_step
from ..config.plain import AttrDict
from ..console import EventPrinter, Progress, speak_for_the_run
from ..failures import Trace
from ..methods.base import Method
from ..methods.checkpointing import CheckpointStore
from ..metrics import RunRecords, git_sha
from ..tiers import Tier, build_tier
from ..timing import CostModel, SimClock, Timing, layout_shape
from ..timing.layout import LayoutShape
from .books import Books
from .invariants import NodePresence

log = logging.getLogger("mecefo_exp.trainer")  # one voice on the console, under the name log filters have always used


class Context:
    """Everything a run holds, declared; the services methods may call."""

    # ---- what the run is (fixed at construction)
    cfg: DictConfig
    run_dir: Path
    n_workers: int
    max_steps: int
    tokens_per_step: int
    resume_every: int  # trainer.resume_every, read every step: a plain int, not a config lookup
    numerics: bool  # trainer.numerics
    cluster_cfg: AttrDict  # plain cluster settings (detection_s, restart_s, reconfigure_s, ...)
    model_cfg: DictConfig
    placement: Optional[LayoutShape]  # where each GPU sits in a hybrid layout; None: pure data parallelism
    tier: Tier
    # ---- the parts, built by setup() in this order; absent until then (`built`)
    records: RunRecords
    training: Union[TrainingState, ShapeOnlyState]  # ShapeOnlyState without numerics
    device: Optional[torch.device]  # None without numerics
    method: Method
    timing: Timing
    costs: CostModel
    trace: Trace
    books: Books
    presence: NodePresence  # no step computed on more nodes than a node trace has present
    resume_store: Optional[CheckpointStore]  # the harness's own crash-safety checkpoints (None without numerics)
    progress: Optional[Progress]  # the console's progress line, once the loop starts
    # ---- where the run is
    step: int
    resumed: bool
    resumes: List[Dict]  # one record per resume of this folder, oldest first (summary.json)
    config_sha256: Optional[str]  # config.yaml's hash at the run's start (summary.json): a resume refuses an edit
    event_driven: bool  # numerics-free: steps between events are booked at once (trainer.event_driven)
    eval_every: int  # trainer.eval_every, read every step
    wall_start: float
    folder_locked: bool  # this process holds the folder's lock (runlock.py): released at the end

    def __init__(self, cfg: DictConfig, run_dir: Path):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.n_workers = cfg.cluster.n_workers
        self.max_steps = cfg.trainer.max_steps
        # pure DP: every worker's micro-batch; a hybrid layout: dp x parallel.microbatches micro-batches
        sequences = sequences_per_step(cfg) if is_hybrid(cfg) else self.n_workers * cfg.data.micro_batch
        self.tokens_per_step = sequences * cfg.data.seq_len
        self.resume_every = cfg.trainer.resume_every
        self.cluster_cfg = plain(cfg.cluster)
        self.model_cfg = cfg.model
        self.placement = layout_shape(cfg)
        self.tier = build_tier(cfg, self.run_dir)
        self.device = self.resume_store = self.progress = None
        self.books = Books(clock=SimClock())
        self.step = 0
        self.resumed = False
        self.resumes = []
        self.config_sha256 = None
        self.numerics = cfg.trainer.numerics  # a plain bool: methods read it at every event
        self.event_driven = False
        self.eval_every = cfg.trainer.eval_every
        self.wall_start = time.perf_counter()
        self._git_sha = git_sha()  # once: summary.json is rewritten during the run
        self.folder_locked = False  # this process holds the folder's lock (runlock.py)
        self.print_event = EventPrinter(log, cfg.trainer.log_events)  # failures, rollbacks ... on the console

    def built(self, part: str) -> bool:
        """Whether `setup()` has built this part (records, training, method, timing, costs,
        trace) yet: a summary or a failure record can come before the end of setup."""
        return part in self.__dict__

    # ------------------------------------------------------- what methods may use (RunContext)
    @property
    def clock(self) -> SimClock:
        return self.books.clock

    @property
    def model(self) -> Optional[torch.nn.Module]:
        return self.training.model

    @property
    def cluster(self) -> Optional[LocalCluster]:
        return self.training.cluster

    @property
    def is_main(self) -> bool:
        return self.tier.is_main

    @property
    def leader(self) -> int:
        return self.tier.leader

    @leader.setter
    def leader(self, worker: int) -> None:
        self.tier.leader = worker

    @property
    def alive(self) -> int:
        return self.n_workers - len(self.method.down)

    @property
    def failure_units(self) -> int:
        """How many independent failure units the workers form (failure.unit_gpus workers each)."""
        return self.n_workers // self.cfg.failure.unit_gpus

    def expected_down_fraction(self) -> float:
        """Expected share of workers down at a time (the trace's expectation; 0 without failures)."""
        return self.trace.expected_down_fraction()

    def cluster_mtbf_s(self) -> float:
        """Mean time between failures of the whole cluster over the failure-free run."""
        return self.trace.expected_mtbf_s(self.costs.failure_free_step(self.n_workers).total * self.max_steps)

    def barrier(self) -> None:
        self.tier.barrier()

    def training_starts_at(self, at_s: float) -> None:
        """The job's first configuration that trains completed at `at_s` (a method whose start-up
        formed none): the span of training starts there."""
        self.books.span.first_step_s = at_s

    def state_dict(self, harness: bool = False) -> Dict:
        """References to the live state; torch.save copies it, in-memory snapshots must clone.

        With `harness`, also the books a resumed run needs (clock, counters, trace position,
        the method's state); a rollback restores only the training state. Without numerics
        there is no training state: only the step (and no resume: such a run takes seconds).
        """
        state = {**self.training.state_dict(), "step": self.step}
        if harness and self.training.numerics:
            state["harness"] = {
                **self.books.state_dict(),
                # how long each jsonl stream was: a resume cuts back to this
                "records": self.records.sizes(),
                "wall_time_s": time.perf_counter() - self.wall_start,
            }
        return state

    def restore(self, state: Dict, to_step: int, reason: str, worker: Optional[int] = None) -> None:
        """Roll back for real: load the saved state, discard the steps after it."""
        if state["step"] != to_step:
            raise RuntimeError(f"saved state is of step {state['step']}, asked to restore step {to_step}")
        self.training.load_state_dict(state)
        lost = self.step - to_step
        lost_s = self.clock.discard_steps_from(to_step)
        self.books.counters.rollbacks += 1
        self.books.counters.lost_steps += lost
        self.event(
            "rollback",
            worker,
            {"reason": reason, "from_step": self.step, "to_step": to_step, "lost_steps": lost, "lost_s": lost_s},
        )
        self.step = to_step

    def event(
        self,
        kind: str,
        worker: Optional[int] = None,
        detail: Optional[dict] = None,
        at: Optional[Tuple[int, float]] = None,
    ) -> None:
        step, now = at if at is not None else (self.step, self.clock.now)
        row = {"sim_time_s": now, "step": step, "kind": kind, "worker": worker, "detail": detail or {}}
        self.records.event(row)
        if self.is_main:
            self.print_event(row)

    def membership_event(self, kind: str, worker: int, detail: Dict) -> None:
        """A failure or recovery the method is about to hear of: the event row and counters."""
        self.event(kind, worker, detail)
        self.books.counters.count_event(kind)
        if detail.get("unplanned"):
            self.books.counters.count_unplanned(kind, worker, self.clock.now)

    def load_peer_state(self, training: Dict, books: Dict) -> None:
        """torchft heals this restarted worker with a live peer's state (no disk)."""
        self.training.load_state_dict(training)
        self.step = training["step"]
        self.books.load_state_dict(books)

    def set_leader(self, worker: int) -> None:
        """torchft: the record's writer died; the lowest live worker takes the record over."""
        was = self.is_main
        self.leader = worker
        if self.is_main and not was:
            self.records.take_over()
            speak_for_the_run(self.progress)
            log.info("worker %d now writes the run record", worker)
