"""Field failure data as traces: Llama 3 405B's interruptions by cause, each with its blast radius.

`failure=llama3_taxonomy` (kind `field`) draws, for every cause of the Llama 3 paper's table of
419 unexpected interruptions in a 54-day snapshot on 16,384 H100 (docs/METHODS.md, "Field failure
data"), a cluster-wide Poisson process at that cause's count per GPU-second times the cluster's GPUs
(so the rate scales with the cluster; `failure.every_h` scales every cause together: 3.0931 h is
Llama 3's one interruption every 54 x 24 / 419 h at 16,384 GPUs). Each arrival takes down its
cause's blast radius:

- `gpu`: one GPU (rounded up to `failure.unit_gpus`: in a TP8 layout a GPU's loss stops its
  tensor-parallel group, that is its server);
- `server`: the 8 GPUs of one server (Llama 3's servers);
- `switch`: the servers under one top-of-rack switch (`SWITCH_SERVERS`, an assumption);
- `job`: every worker of the job at one instant (software bugs, dependencies, NCCL watchdog
  timeouts): no hardware is lost, the job as a whole stops. What it destroys is its category's
  class in `failure.job_faults` (failures/classes.py: a crash of every process, a hang, or
  everything but storage), and each method restores from the first of its sources the class kept
  (JIT from a healthy replica after a hang, REFT from its host-memory snapshots after a crash,
  the others from storage). The trace holds it as one job-wide fail and recover (worker `JOB`,
  with its class), not one per worker: its cost does not grow with the cluster.

Repair (assumptions, the paper gives none per cause): hardware radii are replaced after
`failure.replace_s`; a job fault's workers are back at the same instant (a zero-length outage: the
method's own detection, restart and reload are the whole cost).
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, NamedTuple, Optional, Tuple

from ..config import FailureConfig
from .base import TimeBase
from .classes import CLASSES, DEFAULT_JOB_CLASS
from .events import FAIL, JOB, RECOVER, FailureEvent
from .trace import Trace, check_trace_budget

#: Llama 3 paper (Llama Team, "The Llama 3 Herd of Models", 2024, Table 5): cause, category, count
LLAMA3_CAUSES: List[Tuple[str, str, int]] = [
    ("Faulty GPU", "GPU", 148),
    ("GPU HBM3 Memory", "GPU", 72),
    ("Software Bug", "Dependency", 54),
    ("Network Switch/Cable", "Network", 35),
    ("Host Maintenance", "Unplanned Maintenance", 32),
    ("GPU SRAM Memory", "GPU", 19),
    ("GPU System Processor", "GPU", 17),
    ("NIC", "Host", 7),
    ("NCCL Watchdog Timeouts", "Unknown", 7),
    ("Silent Data Corruption", "GPU", 6),
    ("GPU Thermal Interface + Sensor", "GPU", 6),
    ("SSD", "Host", 3),
    ("Power Supply", "Host", 3),
    ("Server Chassis", "Host", 2),
    ("IO Expansion Board", "Host", 2),
    ("Dependency", "Dependency", 2),
    ("CPU", "Host", 2),
    ("System Memory", "Host", 2),
]
LLAMA3_DAYS, LLAMA3_GPUS, LLAMA3_TOTAL = 54, 16384, 419
SERVER_GPUS = 8  # Llama 3's servers: 8 GPUs on NVLink
#: ASSUMPTION (the paper does not say how many servers a switch or cable fault took out): two
SWITCH_SERVERS = 2
#: blast radius by the paper's category (its "Unknown" is the NCCL watchdog: a job-wide stop)
RADIUS_OF_CATEGORY = {
    "GPU": "gpu",
    "Host": "server",
    "Unplanned Maintenance": "server",
    "Network": "switch",
    "Dependency": "job",
    "Unknown": "job",
}
TABLES = {"llama3_taxonomy": LLAMA3_CAUSES}


class Cause(NamedTuple):
    name: str
    radius: str  # gpu | server | switch | job
    rate_per_gpu_s: float  # at failure.every_h = Llama 3's
    category: str = ""  # the paper's category (what `failure.job_faults` is keyed by)


def causes(table: str = "llama3_taxonomy") -> List[Cause]:
    if table not in TABLES:
        raise ValueError(f"failure.name={table!r} with failure.kind=field: allowed: {', '.join(TABLES)}")
    per_gpu_s = 1.0 / (LLAMA3_DAYS * 86400.0 * LLAMA3_GPUS)
    return [Cause(name, RADIUS_OF_CATEGORY[cat], count * per_gpu_s, cat) for name, cat, count in TABLES[table]]


def job_categories(table: str = "llama3_taxonomy") -> List[str]:
    """The categories whose causes stop the whole job (the keys `failure.job_faults` may name)."""
    return sorted({cat for _, cat, _ in TABLES[table] if RADIUS_OF_CATEGORY[cat] == "job"})


def job_fault_class(cfg, cause: Cause) -> str:
    """What a whole-job cause destroys: `failure.job_faults` by its category (failures/classes.py)."""
    return dict(getattr(cfg, "job_faults", None) or {}).get(cause.category, DEFAULT_JOB_CLASS)


def radius_gpus(radius: str, n_workers: int, unit_gpus: int) -> int:
    g = {"gpu": 1, "server": SERVER_GPUS, "switch": SERVER_GPUS * SWITCH_SERVERS, "job": n_workers}[radius]
    return min(n_workers, max(g, unit_gpus))


def job_share(table: str = "llama3_taxonomy") -> float:
    """Share of interruptions that stop the whole job (63 of Llama 3's 419)."""
    cs = causes(table)
    return sum(c.rate_per_gpu_s for c in cs if c.radius == "job") / sum(c.rate_per_gpu_s for c in cs)


def _scale(cfg, hour_s: float) -> float:
    """Every cause's rate multiplier: Llama 3's every_h over the config's, and the time map."""
    return (LLAMA3_DAYS * 24 / LLAMA3_TOTAL) / float(cfg.every_h) * (3600.0 / hour_s)


def rates(cfg, n_workers: int, hour_s: float = 3600.0) -> List[Tuple[Cause, int, float]]:
    """(cause, its blast radius in workers, its arrivals per simulated second) on n_workers GPUs."""
    scale, unit_gpus = _scale(cfg, hour_s), int(cfg.unit_gpus or 1)
    return [
        (c, radius_gpus(c.radius, n_workers, unit_gpus), c.rate_per_gpu_s * n_workers * scale) for c in causes(cfg.name)
    ]


def arrivals(cfg, n_workers: int, horizon_s: float, hour_s: float, seed: int) -> Iterator[Tuple[float, Cause, int]]:
    """The interruptions in [0, horizon_s): (time, cause, blast radius in workers), in time order."""
    table = rates(cfg, n_workers, hour_s)
    total = sum(rate for _, _, rate in table)
    if total <= 0:
        return
    rng = random.Random(f"mecefo-field:{seed}")
    weights = [rate for _, _, rate in table]
    t = 0.0
    while True:
        t += rng.expovariate(total)
        if t >= horizon_s:
            return
        cause, g, _ = rng.choices(table, weights)[0]
        yield t, cause, g


def draw(
    cfg, n_workers: int, horizon_s: float, run_s: float, hour_s: float, real_time: bool, seed: int
) -> Tuple[List[FailureEvent], Dict[str, float], str]:
    """The events, the expectation over [0, run_s] and how it was computed (Trace's arguments)."""
    replace_s = float(cfg.replace_s) if real_time else float(cfg.replace_s) / 3600.0 * hour_s
    table = rates(cfg, n_workers, hour_s)
    expected = {"failures": 0.0, "unit_failures": sum(rate for _, _, rate in table) * run_s, "mean_workers_down": 0.0}
    for c, g, rate in table:
        expected["failures"] += rate * run_s * g
        expected["mean_workers_down"] += 0.0 if c.radius == "job" else rate * g * replace_s
    events: List[FailureEvent] = []
    pick = random.Random(f"mecefo-field-unit:{seed}")  # which unit: a stream of its own
    down_until: Dict[int, float] = {}
    repairs: List[Tuple[float, int]] = []
    for t, cause, g in arrivals(cfg, n_workers, horizon_s, hour_s, seed):
        while repairs and repairs[0][0] <= t:
            _, w = heapq.heappop(repairs)
            if down_until.get(w, math.inf) <= t:
                del down_until[w]
        if cause.radius == "job":  # every worker that is up stops and is back at once
            if len(down_until) < n_workers:
                fault = job_fault_class(cfg, cause)
                events += [FailureEvent(t, JOB, FAIL, fault), FailureEvent(t, JOB, RECOVER, fault)]
            continue
        for _ in range(8):  # a unit whose workers are all up (else the arrival is dropped)
            first = pick.randrange(n_workers // g) * g
            members = range(first, first + g)
            if not any(w in down_until for w in members):
                break
        else:
            continue
        back = t + replace_s
        for w in members:
            events.append(FailureEvent(t, w, FAIL))
            if back < horizon_s:
                events.append(FailureEvent(back, w, RECOVER))
            down_until[w] = back
            heapq.heappush(repairs, (back, w))
    how = (
        f"field causes ({cfg.name}): cluster-wide Poisson arrivals per cause, rate per GPU x {n_workers} GPUs; "
        "stationary, ignoring arrivals dropped on units already down"
    )
    return events, expected, how


def expected_events(cfg, n_workers: int, horizon_s: float, hour_s: float) -> float:
    """Events (fail + recover; a job-wide fault is one of each) the trace is expected to hold: its memory budget."""
    return sum(2 * rate * horizon_s * (1 if c.radius == "job" else g) for c, g, rate in rates(cfg, n_workers, hour_s))


@dataclass
class Config(FailureConfig):
    every_h: Optional[float] = None  # one interruption every every_h hours cluster-wide (the preset's rate)
    # what each whole-job cause category destroys (failures/classes.py; conf/failure/llama3_taxonomy.yaml
    # says why), e.g. {Dependency: processes, Unknown: progress}; a category not named: all_but_storage
    job_faults: Dict[str, str] = field(default_factory=dict)


def check(f, n_workers: int) -> Optional[str]:
    if f.name not in TABLES:
        return f"failure.name={f.name!r} with failure.kind=field: allowed: {', '.join(TABLES)}"
    if f.every_h is None or not f.every_h > 0:
        return f"failure.every_h={f.every_h}: must be > 0 hours"
    categories = job_categories(f.name)
    for category, name in dict(f.job_faults or {}).items():
        if category not in categories:
            return (
                f"failure.job_faults.{category}: not a whole-job category of {f.name}; allowed: {', '.join(categories)}"
            )
        if name not in CLASSES:
            return f"failure.job_faults.{category}={name!r}: allowed: {', '.join(CLASSES)}"
    return None


def make(f, base: TimeBase) -> Trace:
    check_trace_budget(f, expected_events(f, base.n_workers, base.horizon_s, base.hour_s), 1, base.n_workers)
    events, expected, how = draw(f, base.n_workers, base.horizon_s, base.run_s, base.hour_s, base.real_time, base.seed)
    return Trace(events, base.n_workers, base.horizon_s, expected, how)
