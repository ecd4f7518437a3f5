"""The interface every fault-tolerance method implements.

A method hears failures and recoveries from the trace, says each step which worker computes
which micro-batch in which mode (`plan`) and what the step costs (`step_cost`), and may work
after a step (`after_step`). Rolling back is real (`RunContext.restore`). Every method here keeps
the global batch, so the algorithm only changes where a method approximates.

A method's state must depend only on the trace, the config and the plan, never on what
this process happened to compute: under torchrun every rank runs the method and the
ranks must agree on every plan and every simulated second (a failed worker's rank
computes nothing but still keeps the same books).

The families a method starts from (each its own file): `CheckpointedMethod` (checkpointed.py: disk
checkpoints and the restart from one), `RollbackMethod` (rollback.py: every failure restarts the
job) and `InPlaceMethod` (in_place.py: failures are survived in place).
"""

from __future__ import annotations

import copy
from typing import Callable, Dict, List, Optional, Tuple

from ..config import MethodConfig
from ..failures.classes import STORAGE
from ..plan import NORMAL, FailureFreePlan, Mode, Plan
from ..timing.clock import StepCost
from .checkpointing import CheckpointStore
from .run_context import RunContext


class Method:
    label = "base"  # how tables and figures name the method
    #: the dataclass of the method's settings (conf/method/<name>.yaml is composed onto it)
    Config = MethodConfig
    #: plain methods never change the math; approximate ones (MeCeFO) do while degraded
    exact = True
    #: the method's disk checkpoints, for a method that keeps them (CheckpointedMethod)
    store: Optional[CheckpointStore] = None
    #: where the method restores the state from after a fault that stops the whole job, in order of
    #: preference (failures/classes.py: a healthy replica's GPU memory, host-memory snapshots,
    #: storage); the loop hands `on_job_fault` the first one the fault kept
    restores_from: Tuple[str, ...] = (STORAGE,)
    #: while a whole-job fault is handled: the source it restores from (not part of the saved books)
    job_fault_source: Optional[str] = None
    #: in a hybrid layout, each GPU also holds the next pipeline stage's weights (Bamboo's shadow):
    #: the clock's memory per GPU counts them
    holds_next_stage = False

    def __init__(self, cfg, run: RunContext):
        self.cfg = cfg
        self.run = run
        self.n = run.n_workers
        self.down: set = set()  # workers down in the trace (hardware view)

    @classmethod
    def check_config(cls, method_cfg, cfg) -> Optional[str]:
        """What is wrong with the method's settings (`method_cfg`) that its fields' own rules cannot
        say, given the whole config `cfg` (the layout a method cannot run in, too), in one line; None:
        nothing. Checked before any compute; `advise` leaves out a method its check refuses."""
        return None

    # ---- what the cluster needs to know
    def modes(self) -> Dict[str, Mode]:
        return {"normal": NORMAL}

    def extra_kernels(self) -> Dict[str, Callable[[object], Callable[[], None]]]:
        """Profile kernels beyond one micro-batch per mode, the optimizer and state copies: each
        kernel's name and how to build it on a kernel bench. The names alone (no bench, no model)
        are what the cached FLOP counts are looked up by."""
        return {}

    # ---- lifecycle
    def setup(self) -> None:
        """Called once the profile, cost model and trace exist (before `start`)."""

    def start(self) -> None:
        """Called before the first step (an initial checkpoint, for instance)."""

    def job_start_s(self) -> float:
        """Seconds from the nodes being ready to the first step (a node trace charges it): the
        job's launch, cluster.restart_s; methods with their own start (a rendezvous) override it."""
        return self.run.costs.stall_s(self.run.cluster_cfg.restart_s)

    def begin_without(self, workers: List[int]) -> None:
        """Before `start`: these worker slots hold no usable node when the job starts (a node
        trace's empty slots); they join later as recoveries."""
        self.down.update(workers)

    def on_failures(self, workers: List[int]) -> None:
        """Workers that fail at one instant (one worker, a machine, a whole job): every failure of
        the trace arrives here, as the group of its instant (a restart: once for the group)."""
        self.down.update(workers)

    def on_job_fault(self, workers: List[int], source: str) -> None:
        """A fault stopped the whole job (`workers`: those up then); `source` is the first of
        `restores_from` that it kept. `job_fault_source` holds it while the failures are handled."""
        self.job_fault_source = source
        try:
            self.on_failures(workers)
        finally:
            del self.job_fault_source  # back to the class's None

    def on_recoveries(self, workers: List[int]) -> None:
        """Workers back at one instant (one worker, a replaced machine): every recovery of the trace
        arrives here, as the group of its instant (a re-formation: once for the group)."""
        self.down.difference_update(workers)

    def needs_workers(self) -> set:
        """Workers the next plan may give work to. Here all of them: a failed worker's work
        runs on its replacement (the torchft tier starts a spare process for it)."""
        return set(range(self.n))

    def plan(self, step: int) -> Plan:
        """Failure-free data parallelism: every worker computes its own micro-batch."""
        return FailureFreePlan(step, self.n)

    def step_cost(self, plan: Plan) -> StepCost:
        if isinstance(plan, FailureFreePlan):
            return self.run.costs.failure_free_step(self.n)
        return self.run.costs.step(plan)

    def interrupted(self, plan: Plan, elapsed: float) -> None:
        """A worker of `plan` failed `elapsed` seconds into the step: by default that work is lost."""
        self.run.clock.charge("lost_work", elapsed)

    def before_optimizer(self, plan: Plan, result) -> None:
        """After the gradients of `plan` are aggregated, before the optimizer uses them."""

    def after_step(self, step: int) -> None:
        pass

    # ---- event-driven numerics-free runs: quiet steps are booked at once
    def quiet_steps(self, plan: Plan, step_s: float) -> Optional[int]:
        """How many steps from `plan.step` on (this one included) run with this plan and this
        cost (`step_s` seconds each) and end with nothing but counting: no checkpoint, snapshot,
        refresh, rebalance or anything else that changes a later step. The loop books them at once
        (`after_quiet_steps`) and takes the next step as usual. 0: this very step is the method's next
        event. None: the method cannot tell; the loop then steps it one step at a time."""
        return None

    def charged_in_quiet_run(self, first: int, count: int) -> float:
        """Simulated seconds this method charges between the steps of a quiet run of `count` steps
        from `first` (REFT's snapshots, each after the step before it); the loop ends the run no
        later for them than a step-by-step run would. Default: none."""
        return 0.0

    def after_quiet_steps(self, plan: Plan, first: int, last: int, step_s: float) -> None:
        """After steps `first`..`last` of `plan`'s shape (`step_s` seconds each) were booked at once
        (their metrics row written): what `before_optimizer(plan, None)` and `after_step` do over
        them, in closed form: a method's step counters, and the periodic work that falls inside a
        quiet run (REFT's snapshots, which change nothing a later step reads but the latest one).
        Default: nothing."""

    def summary(self) -> Dict[str, object]:
        return {}

    # ---- resuming a killed run: the method's own books travel in the checkpoint
    def state_dict(self) -> Dict[str, object]:
        """Plain attributes (sets, counters, assignments). State that is not plain (MeCeFO's
        projections, REFT's in-memory snapshot) is added by the method's own override: a
        resumed run must be the uninterrupted one, so everything a later step reads is here."""
        return {k: copy.deepcopy(v) for k, v in vars(self).items() if k not in ("cfg", "run", "n") and _is_plain(v)}

    def load_state_dict(self, state: Dict[str, object]) -> None:
        for k, v in state.items():
            setattr(self, k, copy.deepcopy(v))


def _is_plain(value) -> bool:
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(_is_plain(k) and _is_plain(v) for k, v in value.items())
    return value is None or isinstance(value, (bool, int, float, str))


def on_a_node_trace(run) -> bool:
    """Whether the run replays a node trace (failure=nodes): no spare exists, a slot with no node
    computes nothing."""
    return bool(getattr(getattr(run, "trace", None), "node_rows", None))
