"""Failure traces: lists of (time, worker, fail|recover), drawn before training starts.

A trace depends only on the failure config, the number of workers, the seed and the time unit
(the failure-free step time from the profile), never on the method: every method of a sweep with
the same seed and preset sees the same trace (common random numbers). The presets
`failure=low|medium|high` are the MeCeFO paper's Table 1, read through `failure.process`,
`unit_gpus` and `repair`; `failure=poisson` takes an MTBF and an MTTR; `failure=trace` replays a
CSV; `failure=nodes` an add/remove node trace (node_trace.py); `failure=field` draws field data
(field_failures.py). docs/CLOCK.md ("Failure traces: the readings, the time map and the
expectations") has every reading and formula.
"""

from __future__ import annotations

import csv
import heapq
import itertools
import math
import random
from pathlib import Path
from typing import Callable, Dict, List, Optional, Set, Tuple

from .failure_expectations import expected_failures
from .trace_events import FAIL, JOB, RECOVER, FailureEvent, TraceError  # noqa: F401 (the trace's vocabulary, re-exported)


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
    for _, group in itertools.groupby(ordered, key=lambda e: e.time):
        group = list(group)
        both = {e.worker for e in group if e.kind == FAIL} & {e.worker for e in group if e.kind == RECOVER}
        flip = {w for w in both if w not in down}  # up now: its failure comes first
        group.sort(key=lambda e: (e.worker in flip and e.kind == RECOVER, e.kind != RECOVER and e.worker not in flip))
        for e in group:
            (down.add if e.kind == FAIL else down.discard)(e.worker)
        out += group
    return out


class Trace:
    """A time-ordered list of events with a cursor; `pop_until(t)` hands out what is due."""

    def __init__(self, events: List[FailureEvent], n_workers: int, horizon_s: float, expected: Dict[str, float],
                 expected_how: str = ""):
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
        for e in self.events[self._down_at:self.position]:
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
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["time_s", "worker", "event"])
            for e in self.events:
                w.writerow([f"{e.time:.6f}", "job" if e.worker == JOB else e.worker, e.kind])

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


def _units(n_workers: int, unit_gpus: int, workers) -> List[Tuple[int, List[int]]]:
    """The failable units: (u, its workers u*g .. u*g+g-1) where all of them may fail."""
    allowed = set(range(n_workers)) if workers is None else {int(w) for w in workers}
    units = []
    for u in range(n_workers // unit_gpus):
        members = list(range(u * unit_gpus, (u + 1) * unit_gpus))
        if all(w in allowed for w in members):
            units.append((u, members))
    return units


def _next_tick(t: float, tick_s: float) -> float:
    """The first multiple of tick_s strictly after t."""
    k = math.floor(t / tick_s) + 1
    while k * tick_s <= t:  # float rounding at a tick
        k += 1
    return k * tick_s


def _per_unit_events(units: List[Tuple[int, List[int]]], unit_gpus: int, rate_per_s: float,
                     recover_at: Callable[[float], float], horizon_s: float, seed: int) -> List[FailureEvent]:
    """Per-unit alternating up (exponential) / down (recover_at) periods, one RNG per unit.

    One RNG stream per unit keeps a unit's failures independent of how many others exist;
    with unit_gpus=1 the stream is the worker's own (mecefo-trace:{seed}:{w}), as it always was.
    """
    events = []
    for u, members in units:
        rng = random.Random(f"mecefo-trace:{seed}:{members[0]}" if unit_gpus == 1 else f"mecefo-trace:{seed}:unit{u}")
        t = 0.0
        while True:
            t += rng.expovariate(rate_per_s)
            if t >= horizon_s:
                break
            events.extend(FailureEvent(t, w, FAIL) for w in members)
            t = recover_at(t)
            if t < horizon_s:
                events.extend(FailureEvent(t, w, RECOVER) for w in members)
    return events


def _cluster_events(units: List[Tuple[int, List[int]]], rate_per_s: float, recover_at: Callable[[float], float],
                    horizon_s: float, seed: int) -> List[FailureEvent]:
    """Cluster-wide Poisson arrivals; each takes down a uniformly chosen unit that is up.

    An arrival that finds every failable unit down is dropped. A unit recovering at the
    arrival's instant counts as up (the trace replays recoveries before failures).
    """
    events: List[FailureEvent] = []
    if not units:
        return events
    members = dict(units)
    up = set(members)
    repairs: List[Tuple[float, int]] = []  # heap of (recovery time, unit)
    rng = random.Random(f"mecefo-trace:{seed}:cluster")
    t = 0.0
    while True:
        t += rng.expovariate(rate_per_s)
        if t >= horizon_s:
            break
        while repairs and repairs[0][0] <= t:
            up.add(heapq.heappop(repairs)[1])
        if not up:
            continue
        u = rng.choice(sorted(up))
        up.remove(u)
        events.extend(FailureEvent(t, w, FAIL) for w in members[u])
        r = recover_at(t)
        if r < horizon_s:  # else down for the rest of the horizon
            events.extend(FailureEvent(r, w, RECOVER) for w in members[u])
            heapq.heappush(repairs, (r, u))
    return events


def read_trace_csv(path: str, n_workers: int, unit_s: float) -> List[FailureEvent]:
    """Parse and validate a CSV of time,worker,event; errors name the line."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"failure.path={path}: no such file")
    if not p.is_file():  # a FIFO or a device would block the read before anything runs
        raise TraceError(f"failure.path={path}: not a regular file")
    events, alive, last_t, job_open = [], [True] * n_workers, 0.0, None
    try:
        with open(p, newline="", encoding="utf-8-sig") as f:  # -sig: a BOM some editors write is not data
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise TraceError(f"failure.path={path}: cannot be read as a CSV text file of time,worker,event ({e})") from None
    if not rows:
        raise TraceError(f"{path}: empty file, expected a header time,worker,event")
    header = [c.strip().lower() for c in rows[0]]
    if len(header) != 3 or not header[0].startswith("time") or header[1] != "worker" or header[2] != "event":
        raise TraceError(f"{path} line 1: header must be time,worker,event (got {','.join(rows[0])})")
    for lineno, row in enumerate(rows[1:], start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != 3:
            raise TraceError(f"{path} line {lineno}: expected 3 fields time,worker,event, got {len(row)}")
        try:
            t, w = float(row[0]), JOB if row[1].strip().lower() == "job" else int(row[1])
        except ValueError:
            raise TraceError(f"{path} line {lineno}: time must be a number and worker an integer (got {row[0]!r}, {row[1]!r})")
        if not math.isfinite(t) or t < 0:
            raise TraceError(f"{path} line {lineno}: time must be a finite number >= 0 (got {row[0]!r})")
        kind = row[2].strip().lower()
        if kind not in (FAIL, RECOVER):
            raise TraceError(f"{path} line {lineno}: event {row[2]!r} unknown; allowed: fail, recover")
        if job_open is not None and not (w == JOB and kind == RECOVER and t == last_t):
            raise TraceError(f"{path} line {lineno}: the `job` fail of line {job_open} (every worker up stops) must be "
                             "followed by a `job` recover row at its time")
        if w == JOB and kind == RECOVER and job_open is None:
            raise TraceError(f"{path} line {lineno}: a `job` recover row must follow a `job` fail row at its time")
        job_open = lineno if w == JOB and kind == FAIL else None
        if w != JOB and not 0 <= w < n_workers:
            raise TraceError(f"{path} line {lineno}: worker {w} does not exist (0..{n_workers - 1})")
        if t < last_t:
            raise TraceError(f"{path} line {lineno}: time {t} is before the previous row's time {last_t} "
                             "(rows must be in time order)")
        if w != JOB:
            if kind == FAIL and not alive[w]:
                raise TraceError(f"{path} line {lineno}: worker {w} fails while already down")
            if kind == RECOVER and alive[w]:
                raise TraceError(f"{path} line {lineno}: worker {w} recovers while alive")
            alive[w] = kind == RECOVER
        last_t = t
        if not math.isfinite(t * unit_s):
            raise TraceError(f"{path} line {lineno}: time {row[0]} is too large: {t:g} x {unit_s:g} s per unit overflows")
        events.append(FailureEvent(t * unit_s, w, kind))
    if job_open is not None:
        raise TraceError(f"{path} line {job_open}: the `job` fail (every worker up stops) must be followed by a `job` "
                         "recover row at its time")
    return events


def make_trace(failure_cfg, n_workers: int, step_s: float, max_steps: int, seed: int,
               paper_run_h: float = 12.4, real_time: bool = False, job_start_s: float = 0.0) -> Trace:
    """Draw (or read) the trace for a run whose failure-free step takes `step_s` seconds.

    Hours (kind=paper, unit=hours) are run_s / paper_run_h simulated seconds (run_s =
    step_s * max_steps) or, with real_time, 3600 s; readings, time map and `expected`: the
    module docstring.
    """
    run_s = step_s * max_steps
    horizon = run_s * failure_cfg.horizon_factor
    kind = failure_cfg.kind
    hour_s = 3600.0 if real_time else run_s / paper_run_h
    # seconds per unit of the config's times
    if kind == "paper" or failure_cfg.unit == "hours":
        unit_s = hour_s
    elif failure_cfg.unit == "steps":
        unit_s = step_s
    else:
        unit_s = 1.0

    if kind == "none":
        return Trace([], n_workers, horizon, {"failures": 0.0, "unit_failures": 0.0, "mean_workers_down": 0.0},
                     "no failures")
    if kind in ("trace", "nodes"):
        nan = float("nan")
        no_expectation = {"failures": nan, "unit_failures": nan, "mean_workers_down": nan}
        if kind == "trace":
            events = read_trace_csv(failure_cfg.path, n_workers, unit_s)
            return Trace(events, n_workers, horizon, no_expectation, "a replayed trace: no expectation")
        from .node_trace import read_node_trace

        nodes = read_node_trace(failure_cfg.path, n_workers, float(_get(failure_cfg, "node_ready_s", 45.0)),
                                job_start_s=job_start_s,
                                unready_removals_fail=bool(_get(failure_cfg, "unready_removals_fail", False)))
        trace = Trace(nodes.events, n_workers, nodes.stop_s, no_expectation, "a replayed node trace: no expectation")
        trace.stop_s, trace.start_s, trace.node_rows = nodes.stop_s, nodes.start_s, nodes.rows
        trace.initial_down, trace.node_ready_s = nodes.initial_down, float(_get(failure_cfg, "node_ready_s", 45.0))
        trace.node_slot_of, trace.path = nodes.slot_of, failure_cfg.path
        return trace

    if kind == "field":  # field data by cause, each with its blast radius (field_failures.py)
        from .field_failures import draw, expected_events

        check_trace_budget(failure_cfg, expected_events(failure_cfg, n_workers, horizon, hour_s), 1, n_workers)
        events, expected, how = draw(failure_cfg, n_workers, horizon, run_s, hour_s, real_time, seed)
        return Trace(events, n_workers, horizon, expected, how)
    process = _get(failure_cfg, "process", "per_worker")
    unit_gpus = int(_get(failure_cfg, "unit_gpus", 1))
    repair = _get(failure_cfg, "repair", "fixed")
    if process not in ("per_worker", "cluster"):
        raise ValueError(f"failure.process={process!r}: allowed: per_worker, cluster")
    if repair not in ("fixed", "tick", "replace"):
        raise ValueError(f"failure.repair={repair!r}: allowed: fixed, tick, replace")
    if unit_gpus < 1 or n_workers % unit_gpus:
        raise ValueError(f"failure.unit_gpus={unit_gpus}: must be >= 1 and divide n_workers={n_workers}")
    if kind == "paper":
        # per_worker: the paper's cluster of paper_workers / unit_gpus units sees one failure every every_h
        unit_rate = 1.0 / (failure_cfg.paper_workers / unit_gpus * failure_cfg.every_h * unit_s)
        cluster_rate = 1.0 / (failure_cfg.every_h * unit_s)
        recover_s = failure_cfg.recover_h * unit_s
    elif kind == "poisson":
        unit_rate = cluster_rate = 1.0 / (failure_cfg.mtbf * unit_s)
        recover_s = failure_cfg.mttr * unit_s
    else:
        raise ValueError(f"failure.kind={kind!r}: allowed: none, paper, poisson, field, trace, nodes")
    rate = unit_rate if process == "per_worker" else cluster_rate

    if repair == "replace":
        down_s = float(failure_cfg.replace_s) if real_time else failure_cfg.replace_s / 3600.0 * hour_s
        recover_at = (lambda t: t + down_s)
    elif repair == "tick":
        down_s = recover_s  # the tick period
        if not down_s > 0:
            raise ValueError(f"failure.repair=tick needs a recovery period > 0 (got {down_s} s)")
        recover_at = (lambda t: _next_tick(t, down_s))
    else:
        down_s = recover_s
        recover_at = (lambda t: t + down_s)

    units = _units(n_workers, unit_gpus, failure_cfg.workers)
    check_trace_budget(failure_cfg, 2 * rate * horizon * (len(units) if process == "per_worker" else 1), unit_gpus,
                       len(units))
    if process == "per_worker":
        events = _per_unit_events(units, unit_gpus, rate, recover_at, horizon, seed)
    else:
        events = _cluster_events(units, rate, recover_at, horizon, seed)
    unit_fail, units_down, how = expected_failures(process, repair, rate, down_s, len(units), run_s)
    expected = {"failures": unit_gpus * unit_fail, "unit_failures": unit_fail,
                "mean_workers_down": unit_gpus * units_down}
    return Trace(events, n_workers, horizon, expected, how)


def check_trace_budget(failure_cfg, unit_events: float, unit_gpus: int, units: int) -> None:
    """Refuse a trace whose expected events (a unit's failure is one event per worker of it) would
    take more than MAX_TRACE_BYTES, before any is drawn."""
    events = unit_events * unit_gpus
    need = events * TRACE_BYTES_PER_EVENT
    if need <= MAX_TRACE_BYTES:  # not NaN, not inf: the generator would allocate without end
        return
    what = f"{units} units of {unit_gpus} workers" if unit_gpus > 1 else f"{units} units"
    raise TraceError(f"failure={failure_cfg.name}: the trace would hold ~{events:.3g} events, ~{need / 1e9:.3g} GB at "
                     f"{TRACE_BYTES_PER_EVENT} bytes each (failure rate x failure.horizon_factor="
                     f"{failure_cfg.horizon_factor:g} times the run x {what}); at most {MAX_TRACE_BYTES / 1e9:g} GB "
                     f"(~{MAX_TRACE_BYTES / TRACE_BYTES_PER_EVENT / 1e6:.1f}M events): lower failure.horizon_factor "
                     "or the rate")


def _get(cfg, key: str, default):
    """cfg.key, or default for a config saved before the key existed."""
    try:
        value = getattr(cfg, key)
    except (AttributeError, KeyError):
        return default
    return default if value is None else value


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
            raise TraceError(f"the trace's {kind} at {t:g} s takes workers {sorted(workers)}: with parallel.tp={tp} "
                             f"a failure takes out whole tensor-parallel groups (workers g*{tp} .. g*{tp}+{tp - 1})")
