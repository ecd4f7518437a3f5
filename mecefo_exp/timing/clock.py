"""The simulated cluster clock and the cost model that feeds it.

`CostModel` turns kernel seconds (a `Profile`: measured, or from FLOPs) and the hardware's
links and disks (comm.py, conf/hardware/) into the simulated seconds of a synchronous
data-parallel step: the slowest worker's compute + the all-reduce that is not hidden behind
backward + the method's own overheads. Recovery stalls (detection, restart,
reconfiguration) are named constants of conf/cluster/.

Paper time. Failure presets (paper hours) and published stalls (paper seconds) are either
real (`hardware.paper_time=real`: a clock of the paper's cluster, 3600 s an hour) or
scaled (a miniature's clock: one paper hour = this run's failure-free duration /
cluster.paper_run_h, so a 300-step run sees as many failures per worker and as large a
share of degraded time as the paper's run, and a restart costs the same share of the
time between failures).
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Dict, Iterable, List, Optional

from ..config import plain
from ..plan import Mode
from .clocks import clock_for
from .comm import allreduce_s, exposed_comm_s
from .layout import LayoutShape
from .profile import Profile
from .steps import Help, Helpers, RedundantForward, StepCost

# The categories of summary.json's time_breakdown.
CATEGORIES = ("compute", "comm", "ft_overhead", "lost_work", "stall", "degraded_extra")


class CostModel:
    """Kernel seconds + links + stalls -> simulated seconds."""

    def __init__(
        self,
        profile: Profile,
        cluster_cfg,
        hardware_cfg,
        n_params: int,
        state_bytes: int,
        modes: Dict[str, Mode],
        max_steps: int,
        method: str = "",
        shape: Optional[LayoutShape] = None,
    ):
        self.profile = profile
        self.max_steps = max_steps
        self.modes = modes  # mode name -> Mode (its profile kernel)
        self.cfg = plain(cluster_cfg)
        self.hw = plain(hardware_cfg)
        # memos: a 60,000-step numerics-free run asks the same few questions over and over
        self._comm: Dict[tuple, float] = {}  # (workers, backward seconds) -> exposed seconds
        self._worker: Dict[tuple, float] = {}  # modes of one worker -> seconds
        self._steps: Dict[tuple, StepCost] = {}
        self.n_params = n_params
        self.state_bytes = state_bytes  # what a checkpoint holds (fp32 weights + Adam moments), bytes
        self.shape = shape  # a hybrid layout's: where each GPU sits (which stage a failure takes out)
        # the formulas of a step, chosen once (timing/clocks/): methods describe a step, never which
        # clock prices it; `method` keys what the clock reads per method (a throughput table's)
        self.steps = clock_for(self, method)

    # ---------------------------------------------------------------- communication
    @property
    def grad_bytes(self) -> int:
        return self.n_params * (2 if self.hw.grad_dtype == "bf16" else 4)

    def allreduce_s(self, n_workers: int) -> float:
        """The whole gradient exchange of one step among `n_workers` (comm.py's formula)."""
        return allreduce_s(self.grad_bytes, n_workers, self.hw)

    def comm_s(self, n_workers: int, backward_s: float) -> float:
        """The part of the exchange that the slowest worker's backward does not hide."""
        key = (n_workers, backward_s)
        if key not in self._comm:
            self._comm[key] = exposed_comm_s(self.grad_bytes, n_workers, self.hw, backward_s)
        return self._comm[key]

    # ---------------------------------------------------------------------- compute
    def worker_s(self, modes: Iterable[str]) -> float:
        """Compute seconds of one worker that processes one micro-batch per entry of `modes`."""
        key = tuple(modes)
        if key not in self._worker:
            self._worker[key] = sum(self.profile[self.modes[m].kernel] for m in key)
        return self._worker[key]

    @property
    def forward_s(self) -> float:
        """One micro-batch's forward; every mode runs the forward exactly (backward = rest)."""
        return self.profile.kernels.get("mb:forward", 0.0)

    def synchronous_step(
        self, slowest_s: float, slowest_microbatches: float, n_allreduce: int, ft_overhead: float = 0.0
    ) -> StepCost:
        """Synchronous DP: the slowest worker's compute, the exposed all-reduce, the method's overhead.

        What the slowest worker spends beyond one normal micro-batch is `degraded_extra`; its
        backward (its compute less its forwards) is what the all-reduce can hide behind.
        """
        key = (slowest_s, slowest_microbatches, n_allreduce, ft_overhead)
        if key not in self._steps:
            normal = self.profile["mb:normal"]
            backward = max(0.0, slowest_s - slowest_microbatches * self.forward_s)
            self._steps[key] = StepCost(
                compute=min(slowest_s, normal) + self.profile["optimizer"],
                comm=self.comm_s(n_allreduce, backward),
                ft_overhead=ft_overhead,
                degraded_extra=max(0.0, slowest_s - normal),
            )
        return self._steps[key]  # shared: a StepCost is never changed in place (bamboo._minus copies)

    # ------------------------------------------------------- a step, by the clock chosen once
    def failure_free_step(self, n_workers: int) -> StepCost:
        return self.steps.failure_free(n_workers)

    def step(
        self,
        plan,
        helpers: Optional[Helpers] = None,
        slots: Optional[int] = None,
        model_work_s: float = 0.0,
        redundant: Optional[RedundantForward] = None,
    ) -> StepCost:
        """The step of `plan`: the workers that differ from one normal micro-batch run their modes
        (read in O(changes), for 65,536-worker plans). `helpers`: each kind of help (steps.Help)
        and the workers covering a failed one with it; `slots`: the job's size, the workers whose places the configuration keeps
        (default: the computing ones); `model_work_s`: whole-model work added to the step (an SVD
        refresh); `redundant`: Bamboo's redundant forwards. steps.py has the formulas."""
        if not helpers and redundant is None and not model_work_s and slots is None:
            return self.steps.workers(plan.special_modes(), plan.first_normal_worker(), plan.n_computing, 0.0)
        return self.steps.helped(
            plan, helpers or {}, plan.n_computing if slots is None else slots, model_work_s, redundant
        )

    def spread_step(self, n_workers: int, n_computing: int) -> StepCost:
        """Elastic data parallelism: the global batch of `n_workers` spread evenly over `n_computing`."""
        return self.steps.spread(n_workers, n_computing)

    def rest_of_step(self, full: StepCost, done_s: float, slowed_in_flight: Optional[Help] = None) -> StepCost:
        """What is left of a step after `done_s` seconds of it (a failure it survives interrupted
        it); `slowed_in_flight`: the help that slowed it in flight, if it began unslowed."""
        return self.steps.rest(full, done_s, slowed_in_flight)

    def redundant_s(self, redundant: RedundantForward) -> float:
        """Seconds Bamboo's redundant forwards add to a step."""
        return self.steps.redundant_s(redundant)

    def bubble_s(self, stages: int, microbatches: int) -> float:
        """Idle pipeline seconds per step (a layout's own; else a modelled stages x microbatches 1F1B)."""
        return self.steps.bubble_s(stages, microbatches)

    # ------------------------------------------------------------------ paper time
    @property
    def real_time(self) -> bool:
        return self.hw.paper_time == "real"

    def stall_s(self, paper_seconds: float) -> float:
        """A stall quoted in the papers' seconds, in this run's seconds (see module doc)."""
        if self.real_time or not self.cfg.scale_stalls:
            return paper_seconds
        return paper_seconds * self.paper_second_s

    @property
    def paper_second_s(self) -> float:
        """Simulated seconds of this run that stand for one second of the paper's run."""
        if self.real_time:
            return 1.0
        run_s = self.failure_free_step(self.cfg.n_workers).total * self.max_steps
        return run_s / (self.cfg.paper_run_h * 3600.0)

    # ---------------------------------------------------------------------- storage
    def storage_write_s(self, nbytes: Optional[int] = None) -> float:
        """Writing the training state to shared storage: the slower of the kernel and the bandwidth."""
        if self.hw.get("checkpoint_s") is not None and nbytes is None:
            return self.hw["checkpoint_s"]
        nbytes = self.state_bytes if nbytes is None else nbytes
        return max(self.profile.kernels.get("checkpoint_save", 0.0), nbytes / (self.hw.storage_GBps * 1e9))

    def storage_read_s(self, nbytes: Optional[int] = None) -> float:
        if self.hw.get("checkpoint_s") is not None and nbytes is None:
            return 0.0  # a preset that states a checkpoint's seconds states the restart's whole (load included)
        nbytes = self.state_bytes if nbytes is None else nbytes
        return max(self.profile.kernels.get("checkpoint_load", 0.0), nbytes / (self.hw.storage_GBps * 1e9))


def steps_ending_by(now: float, step_s: float, t: Optional[float]) -> float:
    """How many whole steps of `step_s` seconds, from `now` on, end by `t` (None: no limit).

    Where `t` falls within a millionth of a step of a step's end, one step fewer: that step is
    then taken alone and the loop compares the clock with `t` as a step-by-step run does (k
    steps booked as k x step_s differ from k additions by float rounding, ~k x 1e-16 relative).
    """
    if t is None:
        return math.inf
    q = (t - now) / step_s
    k = math.floor(q)
    if q - k < 1e-6:
        k -= 1
    return max(0, k)


def steps_starting_before(now: float, step_s: float, t: Optional[float]) -> float:
    """How many whole steps of `step_s` seconds, from `now` on, start before `t` (None: no limit):
    the steps up to and including the one `t` falls in. Where `t` falls within a millionth of a
    step of a step boundary, the step starting there is left out (taken alone, as above)."""
    if t is None:
        return math.inf
    q = (t - now) / step_s
    k = math.floor(q)
    near = min(q - k, k + 1 - q) < 1e-6
    return max(0, round(q) if near else k + 1)


class ClockOverflow(ArithmeticError):
    """The simulated clock left the floats: some time setting is far too large for any run to say
    how long it took (an end the record explains: one line, the run failed)."""


class SimClock:
    """The simulated cluster clock with a per-category breakdown.

    Committed steps remember their cost so that a rollback can move the time of the
    steps it discards from their categories into `lost_work`.
    """

    def __init__(self):
        self.now = 0.0
        self.breakdown = {c: 0.0 for c in CATEGORIES}
        self._committed: Dict[int, Dict[str, float]] = {}
        # runs of equal steps booked at once (commit_steps): [first step, count, parts of one step]
        self._runs: List[list] = []
        # steps enter `_committed` in increasing order (a rollback removes every later one): then a
        # rollback pops its steps off the end instead of looking at every step of the run
        self._ordered = True

    def charge(self, category: str, seconds: float) -> None:
        if category not in self.breakdown:
            raise KeyError(f"unknown time category {category!r}")
        if seconds < 0:
            raise ValueError(f"negative time {seconds} for {category}")
        if not math.isfinite(self.now + seconds):
            raise ClockOverflow(
                f"the simulated clock overflowed: {seconds:g} s of {category} at {self.now:.4g} s is "
                "not a time (a restart, detection, reconfiguration or other time setting is far too "
                "large)"
            )
        self.breakdown[category] += seconds
        self.now += seconds

    def _entry(self, step: int) -> Dict[str, float]:
        if step not in self._committed:
            if self._committed and step < next(reversed(self._committed)):
                self._ordered = False
            self._committed[step] = {}
        return self._committed[step]

    def commit_step(self, step: int, cost: StepCost) -> None:
        parts = cost.as_dict()
        for cat, sec in parts.items():
            self.charge(cat, sec)
        # add_to_step time booked before the commit (Bamboo: the part of a step done before a
        # failure it survived) stays with the step, so a later rollback discards it too
        entry = self._entry(step)
        for cat, sec in entry.items():
            parts[cat] = parts.get(cat, 0.0) + sec
        entry.clear()
        entry.update(parts)

    def commit_steps(self, first: int, count: int, cost: StepCost) -> None:
        """`count` steps of equal `cost` from step `first` on, booked at once (an event-driven
        numerics-free run). Each category grows by count x its share: against adding the steps
        one by one this differs by float rounding only (about count x 1e-16, relative)."""
        parts = cost.as_dict()
        for cat, sec in parts.items():
            self.charge(cat, count * sec)
        self._runs.append([first, count, parts])

    def add_to_step(self, step: int, category: str, seconds: float) -> None:
        """Charge time that belongs to a committed step (a checkpoint written after it)."""
        self.charge(category, seconds)
        entry = self._entry(step)
        entry[category] = entry.get(category, 0.0) + seconds

    def state_dict(self) -> Dict[str, object]:
        return {
            "now": self.now,
            "breakdown": dict(self.breakdown),
            "committed": {s: dict(parts) for s, parts in self._committed.items()},
            "runs": [[first, count, dict(parts)] for first, count, parts in self._runs],
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.now = state["now"]
        self.breakdown = dict(state["breakdown"])
        self._committed = {int(s): dict(parts) for s, parts in state["committed"].items()}
        self._runs = [[int(first), int(count), dict(parts)] for first, count, parts in state.get("runs", [])]
        self._ordered = list(self._committed) == sorted(self._committed)

    def discard_steps_from(self, step: int) -> float:
        """Steps >= `step` are rolled back: their time becomes lost work. Returns those seconds."""
        lost = 0.0
        if self._ordered:
            gone = list(itertools.takewhile(lambda s: s >= step, reversed(self._committed)))
        else:
            gone = [s for s in self._committed if s >= step]
        for s in gone:
            for cat, sec in self._committed.pop(s).items():
                self.breakdown[cat] -= sec
                lost += sec
        runs = (
            self._runs
        )  # booked in step order (a rollback trims the tail, rebooking appends): only the last reach `step`
        while runs and runs[-1][0] + runs[-1][1] > step:
            first, count, parts = runs[-1]
            gone = first + count - max(first, step)  # steps of this run at or after `step`
            for cat, sec in parts.items():
                self.breakdown[cat] -= gone * sec
                lost += gone * sec
            if count > gone:
                runs[-1][1] = count - gone
                break
            runs.pop()
        self.breakdown["lost_work"] += lost
        return lost
