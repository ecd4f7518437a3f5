"""Failure traces: lists of (time, worker, fail|recover), drawn before training starts.

A trace depends only on the failure config, the number of workers, the seed and the time
unit (the failure-free step time from the profile), never on the method: every method of
a sweep with the same seed and preset sees the same trace (common random numbers).

Presets `failure=low|medium|high` are the MeCeFO paper's Table 1: one failure every
`every_h` hours somewhere in its 32-GPU cluster, each failed GPU back after `recover_h`
hours. The paper does not say whether failures are per worker or cluster-wide, fixed or
exponential; we read them as independent per-worker Poisson arrivals at rate
1 / (paper_workers * every_h) while the worker is up, and a fixed repair time. A worker
is then down recover_h / (32 * every_h + recover_h) of the time: 1.9 / 2.7 / 3.6 of 32
workers on average (low / medium / high), the same share of 8 miniature workers. (METHODS.md's
2 / 3 / 4 reads the rate as cluster-wide arrivals that also hit workers already down.)

Time scaling of a miniature run: one paper hour maps to D / paper_run_h simulated
seconds, where D is this run's failure-free duration (max_steps times the failure-free
step from the profile). Each worker then fails as often per run, and stays down for the
same share of it, as in the paper's LLaMA-1B run (cluster.paper_run_h = 12.4 h, derived).
"""

from __future__ import annotations

import csv
import heapq
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

FAIL, RECOVER = "fail", "recover"


@dataclass(frozen=True, order=True)
class FailureEvent:
    time: float  # simulated seconds
    worker: int
    kind: str  # fail | recover


class TraceError(ValueError):
    """A trace CSV that cannot be replayed; the message names the line."""


class Trace:
    """A time-ordered list of events with a cursor; `pop_until(t)` hands out what is due."""

    def __init__(self, events: List[FailureEvent], n_workers: int, horizon_s: float, expected: Dict[str, float]):
        self.events = sorted(events, key=lambda e: (e.time, e.kind != RECOVER, e.worker))
        self.n_workers = n_workers
        self.horizon_s = horizon_s
        self.expected = expected  # expected failures and mean workers down over the failure-free run
        self._next = 0

    def pop_until(self, t: float) -> List[FailureEvent]:
        out = []
        while self._next < len(self.events) and self.events[self._next].time <= t:
            out.append(self.events[self._next])
            self._next += 1
        return out

    def next_failure_time(self) -> Optional[float]:
        """Time of the first pending `fail` event, if any (pending = not yet popped)."""
        for e in self.events[self._next:]:
            if e.kind == FAIL:
                return e.time
        return None

    def next_event_time(self) -> Optional[float]:
        return self.events[self._next].time if self._next < len(self.events) else None

    def write_csv(self, path: Path) -> None:
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["time_s", "worker", "event"])
            for e in self.events:
                w.writerow([f"{e.time:.6f}", e.worker, e.kind])

    def stats_until(self, t_end: float) -> Dict[str, float]:
        """Failures that happened before t_end and the time-averaged number of workers down."""
        failures = sum(1 for e in self.events if e.kind == FAIL and e.time < t_end)
        down, last, area = 0, 0.0, 0.0
        for e in self.events:
            if e.time >= t_end:
                break
            area += down * (e.time - last)
            down += 1 if e.kind == FAIL else -1
            last = e.time
        area += down * max(0.0, t_end - last)
        return {"failures": failures, "mean_workers_down": area / t_end if t_end > 0 else 0.0}


def _poisson_events(n_workers: int, workers: List[int], rate_per_s: float, repair_s: float,
                    horizon_s: float, seed: int) -> List[FailureEvent]:
    """Per-worker alternating up (exponential) / down (fixed) periods, one RNG per worker.

    One RNG stream per worker keeps a worker's failures independent of how many others exist.
    """
    events = []
    for w in workers:
        rng = random.Random(f"mecefo-trace:{seed}:{w}")
        t = 0.0
        while True:
            t += rng.expovariate(rate_per_s)
            if t >= horizon_s:
                break
            events.append(FailureEvent(t, w, FAIL))
            t += repair_s
            if t < horizon_s:
                events.append(FailureEvent(t, w, RECOVER))
    return events


def read_trace_csv(path: str, n_workers: int, unit_s: float) -> List[FailureEvent]:
    """Parse and validate a CSV of time,worker,event; errors name the line."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"failure.path={path}: no such file")
    events, alive, last_t = [], [True] * n_workers, -math.inf
    with open(p, newline="") as f:
        rows = list(csv.reader(f))
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
            t, w = float(row[0]), int(row[1])
        except ValueError:
            raise TraceError(f"{path} line {lineno}: time must be a number and worker an integer (got {row[0]!r}, {row[1]!r})")
        kind = row[2].strip().lower()
        if kind not in (FAIL, RECOVER):
            raise TraceError(f"{path} line {lineno}: event {row[2]!r} unknown; allowed: fail, recover")
        if not 0 <= w < n_workers:
            raise TraceError(f"{path} line {lineno}: worker {w} does not exist (0..{n_workers - 1})")
        if t < 0 or t < last_t:
            raise TraceError(f"{path} line {lineno}: time {t} goes backwards (previous {last_t})")
        if kind == FAIL and not alive[w]:
            raise TraceError(f"{path} line {lineno}: worker {w} fails while already down")
        if kind == RECOVER and alive[w]:
            raise TraceError(f"{path} line {lineno}: worker {w} recovers while alive")
        alive[w] = kind == RECOVER
        last_t = t
        events.append(FailureEvent(t * unit_s, w, kind))
    return events


def make_trace(failure_cfg, n_workers: int, step_s: float, max_steps: int, seed: int,
               paper_run_h: float = 12.4) -> Trace:
    """Draw (or read) the trace for a run whose failure-free step takes `step_s` seconds."""
    run_s = step_s * max_steps
    horizon = run_s * failure_cfg.horizon_factor
    workers = list(failure_cfg.workers) if failure_cfg.workers is not None else list(range(n_workers))
    kind = failure_cfg.kind
    # seconds per unit of the config's times
    if kind == "paper" or failure_cfg.unit == "hours":
        unit_s = run_s / paper_run_h
    elif failure_cfg.unit == "steps":
        unit_s = step_s
    else:
        unit_s = 1.0

    if kind == "none":
        return Trace([], n_workers, horizon, {"failures": 0.0, "mean_workers_down": 0.0})
    if kind == "trace":
        events = read_trace_csv(failure_cfg.path, n_workers, unit_s)
        return Trace(events, n_workers, horizon, {"failures": float("nan"), "mean_workers_down": float("nan")})
    if kind == "paper":
        rate = 1.0 / (failure_cfg.paper_workers * failure_cfg.every_h * unit_s)
        repair = failure_cfg.recover_h * unit_s
    elif kind == "poisson":
        rate = 1.0 / (failure_cfg.mtbf * unit_s)
        repair = failure_cfg.repair * unit_s
    else:
        raise ValueError(f"failure.kind={kind!r}: allowed: none, paper, poisson, trace")
    events = _poisson_events(n_workers, workers, rate, repair, horizon, seed)
    # Alternating renewal process: a worker is down a share repair / (mtbf + repair) of the
    # time and fails run_s / (mtbf + repair) times per run (ignoring the first cycle).
    cycle = 1.0 / rate + repair
    expected = {"failures": len(workers) * run_s / cycle, "mean_workers_down": len(workers) * repair / cycle}
    return Trace(events, n_workers, horizon, expected)
