"""A failure trace: the time-ordered events one run replays, with a cursor (`Trace`), and the
memory budget a drawn trace is held to before anything is drawn. Every failure model
(mecefo_exp/failures/<kind>.py) returns one.
"""

from __future__ import annotations

import csv
import itertools
import math
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

from .events import FAIL, JOB, RECOVER, FailureEvent, TraceError

#: the peak memory a drawn trace takes per event (one worker's fail or recover): drawing, ordering,
#: trace.csv and the index of its failures. Measured, not estimated: 214-215 bytes at 0.35M and
#: 1.04M events (CPython 3.11, llama3 at unit_gpus=8), rounded up
TRACE_BYTES_PER_EVENT = 220
#: the memory a drawn trace may take (~4.5M events): beyond, a setting (mtbf=1e-7, a frontier
#: cluster's rate x100) would exhaust the machine's memory before the first step, and the
#: budget is checked before anything is drawn
MAX_TRACE_BYTES = 1_000_000_000


def _in_order(events: List[FailureEvent]) -> List[FailureEvent]:
    """Time order; at one instant recoveries before failures (capacity comes back first), except
    a worker's own zero-length outage (replace_s=0, mttr=0, a trace): a worker that is up at that
    instant fails and then recovers, never recovers while up and then stays down."""
    ordered = sorted(events, key=lambda e: (e.time, e.kind != RECOVER, e.worker))
    down: set = set()
    out: List[FailureEvent] = []
    for _, same_time in itertools.groupby(ordered, key=lambda e: e.time):
        group = list(same_time)
        both = {e.worker for e in group if e.kind == FAIL} & {e.worker for e in group if e.kind == RECOVER}
        flip = {w for w in both if w not in down}  # up now: its failure comes first
        group.sort(key=lambda e: (e.worker in flip and e.kind == RECOVER, e.kind != RECOVER and e.worker not in flip))
        for e in group:
            (down.add if e.kind == FAIL else down.discard)(e.worker)
        out += group
    return out


class Trace:
    """A time-ordered list of events with a cursor; `pop_until(t)` hands out what is due."""

    def __init__(
        self,
        events: List[FailureEvent],
        n_workers: int,
        horizon_s: float,
        expected: Dict[str, float],
        expected_how: str = "",
    ):
        self.events = _in_order(events)
        self.n_workers = n_workers
        self.horizon_s = horizon_s
        # expected failures (worker fail events), unit_failures and mean workers down over the
        # failure-free run; expected_how names the formula (module docstring)
        self.expected = expected
        self.expected_how = expected_how
        self.stop_s: Optional[float] = None  # the run ends here (a node trace's hard stop); None: at max_steps
        self.start_s: Optional[float] = None  # a node trace: when the first nodes are usable (then the job starts)
        # a node trace's rows as read, (seconds, add | remove), the hard stop's included
        self.node_rows: List[Tuple[float, str]] = []
        self.initial_down: Set[int] = set()  # a node trace: slots with no usable node when the job starts
        self.node_ready_s = 0.0  # a node trace: an added node is usable this long after its row
        self.node_slot_of: Dict[str, int] = {}  # a node trace: each added node's worker slot
        self.path: Optional[str] = None  # a node trace: its file
        self.position = 0  # index of the first event not yet handed out: the cursor a resume restores
        self._next_fail: Optional[List[int]] = None  # next_failure_time's index, built at its first call
        self._down: Set[int] = set()  # workers down after the first _down_at events (up_workers)
        self._down_at = 0

    def state_dict(self) -> Dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: Dict[str, int]) -> None:
        self.position = state["position"]

    def pop_until(self, t: float) -> List[FailureEvent]:
        out = []
        while self.position < len(self.events) and self.events[self.position].time <= t:
            out.append(self.events[self.position])
            self.position += 1
        return out

    def pop_instant(self, t: float) -> List[FailureEvent]:
        """The events of the first pending instant, if it is at or before `t`. Handed out one
        instant at a time, a method that dates an event by `last_time()` gets its own instant,
        not that of a later event that fell in the same stall."""
        first = self.next_event_time()
        return self.pop_until(first) if first is not None and first <= t else []

    def next_failure_time(self) -> Optional[float]:
        """Time of the first pending `fail` event, if any (pending = not yet popped)."""
        if self._next_fail is None:  # once: the index of the first fail at or after each position
            nxt = len(self.events)
            index = [nxt] * (nxt + 1)
            for i in range(nxt - 1, -1, -1):
                if self.events[i].kind == FAIL:
                    nxt = i
                index[i] = nxt
            self._next_fail = index
        i = self._next_fail[self.position]
        return self.events[i].time if i < len(self.events) else None

    def up_workers(self) -> List[int]:
        """The workers up after the events handed out so far, in order: those a job-wide event
        (worker `JOB`) stops. Kept up to date from the cursor, rebuilt when it moved back (a resume)."""
        if self._down_at > self.position:
            self._down, self._down_at = set(), 0
        for e in self.events[self._down_at : self.position]:
            if e.worker != JOB:
                (self._down.add if e.kind == FAIL else self._down.discard)(e.worker)
        self._down_at = self.position
        return [w for w in range(self.n_workers) if w not in self._down]

    def next_event_time(self) -> Optional[float]:
        return self.events[self.position].time if self.position < len(self.events) else None

    def last_time(self) -> Optional[float]:
        """Time of the last event handed out (a method hearing of a failure late, after a stall,
        can still date it)."""
        return self.events[self.position - 1].time if self.position else None

    def write_csv(self, path: Path) -> None:
        """time_s,worker,event; a fourth column `fault` where a whole-job fault names its class."""
        classed = any(e.fault for e in self.events)
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["time_s", "worker", "event"] + (["fault"] if classed else []))
            for e in self.events:
                row = [f"{e.time:.6f}", "job" if e.worker == JOB else e.worker, e.kind]
                w.writerow(row + ([e.fault] if classed else []))

    def expected_down_fraction(self) -> float:
        """Expected share of workers down at a time (0 without failures)."""
        down = self.expected["mean_workers_down"]
        return down / self.n_workers if down and math.isfinite(down) else 0.0

    def expected_mtbf_s(self, run_s: float) -> float:
        """Mean time between failure instants over a run of run_s seconds (a whole 8-GPU unit
        failing is one event for the job, not eight)."""
        expected = self.expected.get("unit_failures", self.expected["failures"])
        if not expected or not math.isfinite(expected):
            return math.inf
        return run_s / expected

    def stats_until(self, t_end: float) -> Dict[str, float]:
        """Worker failures that happened before t_end (a job-wide one: each worker up then) and the
        time-averaged number of workers down."""
        failures, down, last, area = 0, 0, 0.0, 0.0
        for e in self.events:
            if e.time >= t_end:
                break
            area += down * (e.time - last)
            last = e.time
            if e.worker == JOB:  # back at the same instant: no area
                failures += (self.n_workers - down) if e.kind == FAIL else 0
                continue
            failures += e.kind == FAIL
            down += 1 if e.kind == FAIL else -1
        area += down * max(0.0, t_end - last)
        return {"failures": failures, "mean_workers_down": area / t_end if t_end > 0 else 0.0}


def check_trace_budget(failure_cfg, unit_events: float, unit_gpus: int, units: int) -> None:
    """Refuse a trace whose expected events (a unit's failure is one event per worker of it) would
    take more than MAX_TRACE_BYTES, before any is drawn."""
    events = unit_events * unit_gpus
    need = events * TRACE_BYTES_PER_EVENT
    if need <= MAX_TRACE_BYTES:  # not NaN, not inf: the generator would allocate without end
        return
    what = f"{units} units of {unit_gpus} workers" if unit_gpus > 1 else f"{units} units"
    raise TraceError(
        f"failure={failure_cfg.name}: the trace would hold ~{events:.3g} events, ~{need / 1e9:.3g} GB at "
        f"{TRACE_BYTES_PER_EVENT} bytes each (failure rate x failure.horizon_factor="
        f"{failure_cfg.horizon_factor:g} times the run x {what}); at most {MAX_TRACE_BYTES / 1e9:g} GB "
        f"(~{MAX_TRACE_BYTES / TRACE_BYTES_PER_EVENT / 1e6:.1f}M events): lower failure.horizon_factor "
        "or the rate"
    )


def check_whole_groups(trace: "Trace", tp: int) -> None:
    """In a hybrid layout a failure takes out whole tensor-parallel groups (GPUs g .. g + tp - 1,
    g a multiple of tp): the workers of each instant's failures and recoveries must be such groups."""
    if tp <= 1:
        return
    by_instant: Dict[tuple, set] = {}
    for e in trace.events:
        if e.worker != JOB:  # every worker up: whole groups
            by_instant.setdefault((e.time, e.kind), set()).add(e.worker)
    for (t, kind), workers in sorted(by_instant.items()):
        groups = {w // tp for w in workers}
        if workers != {w for g in groups for w in range(g * tp, (g + 1) * tp)}:
            raise TraceError(
                f"the trace's {kind} at {t:g} s takes workers {sorted(workers)}: with parallel.tp={tp} "
                f"a failure takes out whole tensor-parallel groups (workers g*{tp} .. g*{tp}+{tp - 1})"
            )
