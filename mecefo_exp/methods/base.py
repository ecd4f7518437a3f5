"""The interface every fault-tolerance method implements, and the shared rollback path.

A method hears failures and recoveries from the trace, says each step which worker computes
which micro-batch in which mode (`plan`) and what the step costs (`step_cost`), and may work
after a step (`after_step`). Rolling back is real (`RunContext.restore`). Every method here keeps
the global batch, so the algorithm only changes where a method approximates.

A method's state must depend only on the trace, the config and the plan, never on what
this process happened to compute: under torchrun every rank runs the method and the
ranks must agree on every plan and every simulated second (a failed worker's rank
computes nothing but still keeps the same books).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from ..config import MethodConfig, at_least, choices
from ..failures.classes import STORAGE
from ..plan import NORMAL, FailureFreePlan, Mode, Plan, resplit_plan  # noqa: F401  (methods import it from here)
from ..timing.clock import StepCost
from .checkpointing import CheckpointStore, store_of_run
from .intervals import daly_interval
from .run_context import RunContext, run_context_members  # noqa: F401  (what a method may use of the run)


class Method:
    name = "base"
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
    #: the setting of a periodic disk checkpoint that only backs the method up against the faults its own
    #: mechanism cannot absorb (whole-job faults); a study of such faults sets it to Daly's interval
    #: (analysis/simulate.py). None: the method has none, or its periodic checkpoint is its mechanism
    fallback_key: Optional[str] = None
    #: the setting of the method's own frequent save (REFT's snapshot, BAFT's bubble checkpoint), in
    #: steps, which a study may set to a period of wall-clock time. None: the method has none
    frequent_save_key: Optional[str] = None
    #: in a hybrid layout, each GPU also holds the next pipeline stage's weights (Bamboo's shadow):
    #: the clock's memory per GPU counts them
    holds_next_stage = False

    def __init__(self, cfg, run: RunContext):
        self.cfg = cfg
        self.run = run
        self.n = run.n_workers
        self.down: set = set()  # workers down in the trace (hardware view)

    @classmethod
    def fits_layout(cls, parallel) -> bool:
        """Whether the method runs in this parallel layout (`parallel`: tp, pp, dp)."""
        return True

    @classmethod
    def check_config(cls, method_cfg, cfg) -> Optional[str]:
        """What is wrong with the method's settings (`method_cfg`) that its fields' own rules cannot
        say, given the whole config `cfg`, in one line; None: nothing. Checked before any compute."""
        return None

    # ---- what the cluster needs to know
    def modes(self) -> Dict[str, Mode]:
        return {"normal": NORMAL}

    def extra_kernels(self, bench) -> Dict[str, Callable[[], None]]:
        """Profile kernels beyond one micro-batch per mode, the optimizer and state copies."""
        return {}

    def extra_kernel_names(self) -> List[str]:
        """The names `extra_kernels` gives its kernels: what the cached FLOP counts are looked up by
        without building a model (the count checks that both agree)."""
        return []

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

    def on_failure(self, worker: int) -> None:
        self.down.add(worker)

    def on_failures(self, workers: List[int]) -> None:
        """Workers that fail at one instant (a machine): by default each on its own (a restart: once)."""
        for worker in workers:
            self.on_failure(worker)

    def on_job_fault(self, workers: List[int], source: str) -> None:
        """A fault stopped the whole job (`workers`: those up then); `source` is the first of
        `restores_from` that it kept. `job_fault_source` holds it while the failures are handled."""
        self.job_fault_source = source
        try:
            self.on_failures(workers)
        finally:
            del self.job_fault_source  # back to the class's None

    def on_recover(self, worker: int) -> None:
        self.down.discard(worker)

    def on_recoveries(self, workers: List[int]) -> None:
        """Workers back at one instant (a replaced machine): by default each on its own (a re-formation: once)."""
        for worker in workers:
            self.on_recover(worker)

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

    def timer_s(self) -> Optional[float]:
        """When the method's own next event falls (a restart that completes while training goes on),
        or None. The loop calls `on_timer` then, interrupting the step in flight."""
        return None

    def on_timer(self, plan: Plan, elapsed: float) -> None:
        """The method's timer fell `elapsed` seconds into the step of `plan`."""

    def before_optimizer(self, plan: Plan, result) -> None:
        """After the gradients of `plan` are aggregated, before the optimizer uses them."""

    def after_step(self, step: int) -> None:
        pass

    # ---- event-driven numerics-free runs: quiet steps are booked at once
    @property
    def names_its_events(self) -> bool:
        """Whether `quiet_steps` is this method's own (the base's None steps it one at a time)."""
        return type(self).quiet_steps is not Method.quiet_steps

    def quiet_steps(self, plan: Plan, step_s: float) -> Optional[int]:
        """How many steps from `plan.step` on (this one included) run with this plan and this
        cost (`step_s` seconds each) and end with nothing but counting: no checkpoint, snapshot,
        refresh, rebalance or anything else that changes a later step. The loop books them at once
        (`book_quiet`) and takes the next step as usual. 0: this very step is the method's next
        event. None: the method cannot tell; the loop then steps it one step at a time."""
        return None

    def book_quiet(self, plan: Plan, count: int) -> None:
        """What `before_optimizer(plan, None)` and `after_step` do over `count` quiet steps
        (a method's step counters), in closed form."""

    def charged_in_quiet_run(self, first: int, count: int) -> float:
        """Simulated seconds this method charges between the steps of a quiet run of `count` steps
        from `first` (REFT's snapshots, each after the step before it); the loop ends the run no
        later for them than a step-by-step run would. Default: none."""
        return 0.0

    def after_quiet_steps(self, first: int, last: int, step_s: float) -> None:
        """After steps `first`..`last` (`step_s` seconds each) were booked at once (their metrics row written), as
        `after_step` after each: a method whose periodic work falls inside a quiet run (REFT's
        snapshots, which change nothing a later step reads but the latest one) does that work
        here. Default: nothing."""

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


@dataclass
class CheckpointedConfig(MethodConfig):
    """What every method that keeps disk checkpoints reads (each adds its `checkpoint_interval`,
    named by `interval_key`: steps or "auto" for Daly's optimum)."""

    backend: str = field(default="torch", metadata=choices("torch", "dcp"))  # torch.save | torch.distributed.checkpoint
    keep: int = field(default=2, metadata=at_least(1, "checkpoints kept"))
    # seconds of a job restart from the checkpoint (None: cluster.detection_s + cluster.restart_s)
    restart_s: Optional[float] = field(default=None, metadata=at_least(0, "seconds (null: the cluster's)"))
    charge_initial_checkpoint: bool = True  # false: the step-0 state (the seeded initialisation) costs no write
    # sync: a failure during a checkpoint's write cuts it, the checkpoint does not stand (Daly's
    # model) | async: the state is copied to memory at once and persisted behind training, so a
    # failure during the persist leaves the checkpoint standing
    checkpoint_write: str = field(default="sync", metadata=choices("sync", "async"))


@dataclass
class RestartConfig(CheckpointedConfig):
    """Methods whose every failure restarts the job."""

    # where: on spares for the failed workers (the global batch on n workers) | on the survivors (the
    # global batch re-split over them; a recovered worker joins at the next restart)
    restart_on: str = field(default="spares", metadata=choices("spares", "survivors"))


class CheckpointedMethod(Method):
    """A method that keeps disk checkpoints (a real `CheckpointStore`) and can roll back to one:
    every method here, for its own recovery or as the fall-back when its mechanism cannot help.

    `interval` is in steps or "auto" (Young/Daly). A rollback stops the whole job: detection +
    restart + load, then replay from the saved step.
    """

    Config = CheckpointedConfig
    #: the setting that holds the checkpoint interval (None: the method keeps no periodic checkpoint)
    interval_key: Optional[str] = "checkpoint_interval"
    store: CheckpointStore

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.store = store_of_run(run, keep=cfg.keep, backend=cfg.backend)
        self.waiting: List[int] = []  # recovered workers that join at the next restart or re-formation
        self.interval = 0
        self.checkpoint_due = False  # a checkpoint after the first step of a restart (checkpoint_after_restart)
        self.last_write = (0, 0.0, 0.0)
        self.writes_cut = 0  # checkpoint writes a failure cut (checkpoint_write=sync)

    def setup(self) -> None:
        assert self.interval_key is not None, (
            f"{type(self).__name__} keeps no periodic checkpoint: it sets its own interval"
        )
        self.interval = self.resolve_interval(self.cfg[self.interval_key])

    def resolve_interval(self, value) -> int:
        """Daly's higher-order optimum (intervals.py), C = checkpoint write time, M = the mean time
        between the failures that need this checkpoint (cluster MTBF / rollback_share)."""
        if value != "auto":
            return int(value)
        write_s = self.run.costs.storage_write_s()
        share = self.rollback_share(self.run.expected_down_fraction())
        mtbf_s = self.run.cluster_mtbf_s() / share if share > 0 else math.inf
        step_s = self.run.costs.failure_free_step(self.n).total
        if not math.isfinite(mtbf_s):
            return self.run.max_steps  # no rollback expected: only the initial checkpoint
        return max(1, min(self.run.max_steps, round(daly_interval(write_s, mtbf_s) / step_s)))

    def rollback_share(self, p_down: float) -> float:
        """Share of failures that roll back to the disk checkpoint, given the probability
        p_down that some other worker is down at the time. Checkpoint-restart: all of them;
        methods that survive failures in place override this with their fatal share."""
        return 1.0

    def start(self) -> None:
        # the initial state is the seeded initialisation: a preset may say it costs no write
        self.save_checkpoint(step=0, charge_s=None if self.cfg.charge_initial_checkpoint else 0.0)

    def restart_s(self) -> float:
        """A job restart: method.restart_s where the method states it, else detection + restart."""
        own = self.cfg.restart_s
        cc = self.run.cluster_cfg
        return self.run.costs.stall_s(cc.detection_s + cc.restart_s if own is None else own)

    def job_start_s(self) -> float:
        own = self.cfg.restart_s
        return super().job_start_s() if own is None else self.run.costs.stall_s(own)

    def save_checkpoint(self, step: int, charge_s: Optional[float] = None, booked_late_s: float = 0.0) -> None:
        """Write a real checkpoint of the state before step `step`; charge its time.

        The time is charged first, so that the clock saved in the checkpoint (for resuming
        a killed run) already holds it. `booked_late_s`: booked that many simulated seconds after
        it was taken (the checkpoints inside a numerics-free quiet run, booked after its last step):
        it began, and its event is stamped, that much earlier, and it keeps the state of its step.
        """
        cost = self.run.costs.storage_write_s() if charge_s is None else charge_s
        began = self.run.clock.now - booked_late_s
        self.last_write = (step, began, cost)  # which checkpoint, when its write began, how long
        if step > 0 and self.write_cut_by_failure(step, cost, began):
            return
        if step > 0:
            self.run.clock.add_to_step(step - 1, "ft_overhead", cost)
        else:
            self.run.clock.charge("ft_overhead", cost)
        late = booked_late_s > 0
        self.store.save(step, state={**self.run.state_dict(), "step": step} if late else None)
        at = (step, began + cost) if late else None
        self.run.event("checkpoint", detail={"step": step, "cost_s": cost}, at=at)

    def write_cut_by_failure(self, step: int, cost: float, now: float) -> bool:
        """A synchronous write (begun at `now`) that a failure falls inside is cut: the time up to
        the failure is spent (on the step it follows, so a rollback past it makes it lost work),
        nothing is saved, and the failure is handled at its own time. A replay of another simulator
        (method.variant) keeps that simulator's checkpoint rules."""
        t_fail = self.run.trace.next_failure_time()
        if (
            self.cfg.checkpoint_write != "sync"
            or self.cfg.get("variant")
            or t_fail is None
            or not now <= t_fail < now + cost
        ):
            return False
        self.run.clock.add_to_step(step - 1, "ft_overhead", t_fail - now)
        self.writes_cut += 1
        self.run.event("checkpoint", detail={"step": step, "cost_s": t_fail - now, "cut": True})
        return True

    def after_step(self, step: int) -> None:
        if (step + 1) % self.interval == 0 or self.checkpoint_due:
            self.checkpoint_due = False
            self.save_checkpoint(step + 1)

    def quiet_steps(self, plan: Plan, step_s: float) -> int:
        """Quiet until the next step that ends on a multiple of the interval (its checkpoint)."""
        return 0 if self.checkpoint_due else steps_before_multiple(plan.step, self.interval)

    def summary(self) -> Dict[str, object]:
        return {"checkpoint_interval": self.interval, "checkpoint_writes_cut": self.writes_cut}

    # ---- when a recovered worker rejoins: at once, or at the next restart or re-formation
    def joins_later(self, worker: int) -> bool:
        """Whether `worker`, back now, waits for the next restart or re-formation to join
        (restart_on=survivors, Oobleck's admit_nodes=next_reconfiguration). Default: it joins now."""
        return False

    def hold_back(self, worker: int, detail: Dict[str, object]) -> bool:
        """Keep a recovered worker out until the next restart or re-formation (`joins_later`)."""
        if not self.joins_later(worker):
            return False
        self.waiting.append(worker)
        self.run.event("waiting", worker, detail)
        return True

    def admit_held_back(self, failed: List[int]) -> None:
        """At a restart or re-formation caused by `failed`: the workers held back join it."""
        admit_waiting(self.down, self.waiting, failed)

    def checkpoint_after_restart(self) -> bool:
        """Whether to checkpoint again after the first step of a restart (Varuna does)."""
        return False

    def restart_from_checkpoint(self, worker: int, reason: str) -> None:
        self.run.clock.charge("stall", self.restart_s() + self.run.costs.storage_read_s())
        self.checkpoint_due = self.checkpoint_after_restart()
        saved = self.store.latest_step()
        self.run.restore(self.store.load(saved), to_step=saved, reason=reason, worker=worker)
        self.run.event("restart", worker, {"from_step": saved})


class RollbackMethod(CheckpointedMethod):
    """A method whose every failure restarts the job (checkpoint-restart, REFT, BAFT).

    Where the job restarts is `method.restart_on`, written here once:

    - `spares` (default): a spare replaces each failed worker, so the plan stays failure-free and
      the loss curve is the failure-free one, bit for bit; a recovery changes nothing.
    - `survivors` (Varuna's job morphing; REFT on a node trace): the job restarts on the workers
      still up, the global batch re-split over them (the same samples: still bit for bit); a
      recovered worker waits for the next restart to join.
    """

    Config = RestartConfig

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.running_without: List[int] = []  # restart_on=survivors: the workers the job restarted without
        self.job_empty = False  # on the survivors, every worker is gone: nothing runs until one is back

    @property
    def on_survivors(self) -> bool:
        """restart_on=survivors, or a node trace, which has no spares: the job restarts on the nodes there."""
        return self.cfg.restart_on == "survivors" or on_a_node_trace(self.run)

    def begin_without(self, workers: List[int]) -> None:
        super().begin_without(workers)
        if self.on_survivors:
            self.running_without = sorted(self.down)

    def on_failure(self, worker: int) -> None:
        self.on_failures([worker])

    def on_failures(self, workers: List[int]) -> None:
        """One restart for failures at the same instant (charging one restart per worker would
        bill a machine failure 8 times). Marked down at once: a job-wide fault is every worker.
        On the survivors with no worker left (a node trace that removed every node) nothing
        restarts: the job waits for a node (`job_empty`) and restarts on it."""
        self.down.update(workers)
        self.admit_held_back(workers)  # the workers that came back join this restart
        if self.on_survivors and len(self.down) >= self.n:
            self.job_empty = True
            self.running_without = sorted(self.down)
            self.run.event("fatal", workers[0], {"reason": "no node is left: the job waits for one to be added"})
            self.no_node_left()
            return
        self.restart_after(workers)
        if self.on_survivors:
            self.running_without = sorted(self.down)

    def no_node_left(self) -> None:
        """Every worker is gone (on the survivors): what lived in their memory is lost."""

    def restart_after(self, workers: List[int]) -> None:
        """The job restarts after the failures of `workers`: from the latest checkpoint."""
        self.restart_from_checkpoint(workers[0], reason="failure")

    def joins_later(self, worker: int) -> bool:
        return self.on_survivors and worker in self.running_without

    def on_recover(self, worker: int) -> None:
        self.on_recoveries([worker]) if self.job_empty else self._on_recover(worker)

    def _on_recover(self, worker: int) -> None:
        if not self.hold_back(worker, {"down": self.running_without}):
            super().on_recover(worker)  # on spares: the job already runs on a replacement

    def on_recoveries(self, workers: List[int]) -> None:
        if self.job_empty:  # no job runs: the nodes back now (and any that waited) start it, from disk
            self.job_empty = False
            self.down.difference_update(workers)
            self.admit_held_back([])
            self.running_without = sorted(self.down)
            self.restart_from_checkpoint(workers[0], reason="fatal")
            return
        if self.on_survivors or type(self).on_recover is not RollbackMethod.on_recover:
            return super().on_recoveries(workers)  # each may wait for the next restart
        self.down.difference_update(workers)  # on spares: at once (a job-wide fault is every worker)

    def plan(self, step: int) -> Plan:
        if self.running_without:
            return resplit_plan(step, self.n, set(self.running_without))
        return super().plan(step)

    def step_cost(self, plan: Plan) -> StepCost:
        if self.running_without:
            return self.run.costs.spread_step(self.n, plan.n_computing)
        return super().step_cost(plan)


class InPlaceMethod(CheckpointedMethod):
    """A method that survives failures in place (MeCeFO, Bamboo, Oobleck).

    A failure does not stop the job; only when the method's own mechanism cannot cover it
    (`fall_back`: a `fatal` event) does it roll back through the checkpoint path, and then
    spares replace every failed worker, so the trace's later recoveries of those workers
    change nothing (`rejoins` is False for them).

    A node trace has no spares: there the fall-back restarts the job on the nodes there (`without`:
    the slots left empty, re-split over them by `plan` unless `after_fall_back` says otherwise).
    """

    fallback_key = "checkpoint_interval"

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.replaced: set = set()  # failed workers a fatal restart replaced by spares
        self.without: set = set()  # node traces: slots a fatal restart left empty (no spare exists)
        self.job_empty = False  # node traces: a fall-back found no node; the job restarts when one is back
        self.counts: Dict[str, int] = {"fatal": 0}

    def needs_workers(self) -> set:
        return set(range(self.n)) - self.down  # the survivors cover the failed workers' work

    def on_failure(self, worker: int) -> None:
        super().on_failure(worker)  # mark down
        self.replaced.discard(worker)

    def rejoins(self, worker: int) -> bool:
        """Mark a recovery; False when a spare already took this worker's place."""
        if worker in self.replaced:
            self.replaced.discard(worker)
            return False
        self.without.discard(worker)
        super().on_recover(worker)
        if self.job_empty:  # the first node back after every node was gone: the job restarts on it
            self.job_empty = False
            self.restart_from_checkpoint(worker, reason="fatal")
        return True

    def fall_back(self, worker: int, detail: Dict[str, object]) -> None:
        """System-level recovery: log `fatal`, restart from the checkpoint with spares (or on the
        nodes there; with no node there, when the first one is back: `job_empty`)."""
        self.counts["fatal"] += 1
        self.run.event("fatal", worker, {"down": sorted(self.down), **detail})
        if on_a_node_trace(self.run):  # no spares: the slots left empty stay out of the plan
            self.without = set(self.down)
        else:
            self.replaced |= self.down
            self.down.clear()
            self.without.clear()
        self.after_fall_back()
        if len(self.down) >= self.n:
            self.job_empty = True
            return
        self.restart_from_checkpoint(worker, reason="fatal")

    def after_fall_back(self) -> None:
        """Forget the method's own assignments: every worker is up again (or `without` empty slots)."""

    def plan(self, step: int) -> Plan:
        """After a fall-back that left slots empty (`without`): their micro-batches dealt over the others."""
        if not self.without:
            return super().plan(step)
        plan = resplit_plan(step, self.n, self.down)
        plan.on_survivors = True
        return plan

    def step_cost(self, plan: Plan) -> StepCost:
        if plan.on_survivors:
            return self.run.costs.spread_step(self.n, plan.n_computing)
        return super().step_cost(plan)


def on_a_node_trace(run) -> bool:
    """Whether the run replays a node trace (failure=nodes): no spare exists, a slot with no node
    computes nothing."""
    return bool(getattr(getattr(run, "trace", None), "node_rows", None))


def admit_waiting(down: set, waiting: List[int], failed: List[int]) -> None:
    """At a restart or re-formation caused by `failed`, the recovered workers that waited for one
    (Varuna's job morphing, REFT on the survivors, Oobleck's admit_nodes=next_reconfiguration) are
    up again: removed from `down` and `waiting`, in place. A worker removed again while it
    waited never joins."""
    down -= set(waiting) - set(failed)
    waiting.clear()


def multiples_between(low: int, high: int, every: int) -> range:
    """The steps low..high (both included) that are multiples of `every`: the periodic saves
    (a snapshot, a checkpoint of the state before that step) that fall inside a run of steps."""
    return range(every * math.ceil(low / every), high + 1, every)


def steps_before_multiple(step: int, every: int) -> int:
    """Steps from `step` on before the first step t with (t + 1) % every == 0, whose end is an
    every-`every`-steps action (a checkpoint after step t is the state before step t + 1)."""
    return (every - 1 - step) % every


def neighbors_on_ring(worker: int, n: int, shape=None) -> Iterable[int]:
    """The other workers in ring order after `worker`: worker+1, worker+2, ... (mod n). In a hybrid
    layout (`shape`), the GPUs that hold the same weights: the same slot in the next replicas."""
    if shape is not None:
        return shape.same_slot_in_next_replicas(worker)
    return ((worker + k) % n for k in range(1, n))  # lazy: a neighbour is usually found within a few
