"""Failures as alternating up and down periods: the draw the rate presets share (paper.py,
poisson.py). Each failable unit (`failure.unit_gpus` consecutive workers) fails at an exponential
rate while up; how it comes back is `failure.repair` (fixed: after the down time; tick: at the next
multiple of it; replace: a spare after `replace_s`). `failure.process` says whether the rate is
each unit's own (per_worker) or the cluster's, each arrival taking a unit that is up (cluster).
docs/CLOCK.md ("Failure traces") has every reading and formula.
"""

from __future__ import annotations

import heapq
import math
import random
from typing import Callable, List, Tuple

from .base import TimeBase, setting
from .events import FAIL, RECOVER, FailureEvent
from .expectations import expected_failures
from .trace import Trace, check_trace_budget

PROCESSES = ("per_worker", "cluster")
REPAIRS = ("fixed", "tick", "replace")


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


def _per_unit_events(
    units: List[Tuple[int, List[int]]],
    unit_gpus: int,
    rate_per_s: float,
    recover_at: Callable[[float], float],
    horizon_s: float,
    seed: int,
) -> List[FailureEvent]:
    """Per-unit alternating up (exponential) / down (recover_at) periods, one RNG per unit.

    One RNG stream per unit keeps a unit's failures independent of how many others exist;
    with unit_gpus=1 the stream is the worker's own (mecefo-trace:{seed}:{w}), as it always was.
    """
    events: List[FailureEvent] = []
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


def _cluster_events(
    units: List[Tuple[int, List[int]]],
    rate_per_s: float,
    recover_at: Callable[[float], float],
    horizon_s: float,
    seed: int,
) -> List[FailureEvent]:
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


def renewal_trace(f, base: TimeBase, unit_rate: float, cluster_rate: float, recover_s: float) -> Trace:
    """The trace of up/down periods at `unit_rate` per unit (per_worker) or `cluster_rate` (cluster),
    each failure back after `recover_s` seconds as `failure.repair` reads it."""
    process = setting(f, "process", "per_worker")
    unit_gpus = int(setting(f, "unit_gpus", 1))
    repair = setting(f, "repair", "fixed")
    n_workers = base.n_workers
    if process not in PROCESSES:
        raise ValueError(f"failure.process={process!r}: allowed: {', '.join(PROCESSES)}")
    if repair not in REPAIRS:
        raise ValueError(f"failure.repair={repair!r}: allowed: {', '.join(REPAIRS)}")
    if unit_gpus < 1 or n_workers % unit_gpus:
        raise ValueError(f"failure.unit_gpus={unit_gpus}: must be >= 1 and divide n_workers={n_workers}")
    rate = unit_rate if process == "per_worker" else cluster_rate
    if repair == "replace":
        down_s = float(f.replace_s) if base.real_time else f.replace_s / 3600.0 * base.hour_s
        recover_at = lambda t: t + down_s
    elif repair == "tick":
        down_s = recover_s  # the tick period
        if not down_s > 0:
            raise ValueError(f"failure.repair=tick needs a recovery period > 0 (got {down_s} s)")
        recover_at = lambda t: _next_tick(t, down_s)
    else:
        down_s = recover_s
        recover_at = lambda t: t + down_s

    units = _units(n_workers, unit_gpus, f.workers)
    horizon = base.horizon_s
    check_trace_budget(f, 2 * rate * horizon * (len(units) if process == "per_worker" else 1), unit_gpus, len(units))
    if process == "per_worker":
        events = _per_unit_events(units, unit_gpus, rate, recover_at, horizon, base.seed)
    else:
        events = _cluster_events(units, rate, recover_at, horizon, base.seed)
    unit_fail, units_down, how = expected_failures(process, repair, rate, down_s, len(units), base.run_s)
    expected = {
        "failures": unit_gpus * unit_fail,
        "unit_failures": unit_fail,
        "mean_workers_down": unit_gpus * units_down,
    }
    return Trace(events, n_workers, horizon, expected, how)
