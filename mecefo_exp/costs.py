"""The simulated cluster clock and its cost model.

Compute comes from a *profile*: named kernels (a normal forward+backward of one
micro-batch, an optimizer step, a copy of the training state, ...) timed on this machine
with warm-up and repeats, cached per (model, batch, device, kernel) in .cache/profiles/
and written next to every run. Given the profile the clock is deterministic: a step's
cost is known before the step runs, the same trace serves every method of a sweep, and
a rerun gives the same numbers.

Everything that is not compute (all-reduce bandwidth, restart, detection,
reconfiguration) is a named constant of conf/cluster/*.yaml. Stalls quoted by papers in
seconds of *their* runs go through the same paper-time map as the failure trace when
`cluster.scale_stalls` is on: one paper hour = (this run's failure-free duration /
cluster.paper_run_h). A restart then takes the same share of the time between failures
as it did in the paper's run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, Optional

import torch
from filelock import FileLock

log = logging.getLogger(__name__)

# The categories of summary.json's time_breakdown.
CATEGORIES = ("compute", "comm", "ft_overhead", "lost_work", "stall", "degraded_extra")


# --------------------------------------------------------------------------- profile
def time_kernels(fns: Dict[str, Callable[[], None]], warmup: int, repeats: int,
                 device: torch.device) -> Dict[str, float]:
    """Median wall seconds of each fn() after warm-up, timed round-robin.

    Round-robin (a, b, c, a, b, c, ...) rather than one kernel after the other, so that a
    burst of load on the machine lands on every kernel alike and their ratios survive.
    """
    samples: Dict[str, list] = {k: [] for k in fns}
    for r in range(warmup + repeats):
        for name, fn in fns.items():
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if r >= warmup:
                samples[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}


@dataclass
class Profile:
    kernels: Dict[str, float]  # kernel name -> seconds
    meta: Dict[str, object] = field(default_factory=dict)
    path: Optional[str] = None  # where it was cached or loaded from

    def __getitem__(self, name: str) -> float:
        if name not in self.kernels:
            raise KeyError(f"profile has no kernel {name!r} (has: {', '.join(sorted(self.kernels))})")
        return self.kernels[name]

    def to_json(self) -> dict:
        return {"kernels": self.kernels, "meta": self.meta, "source": self.path}


def profile_key(meta: dict) -> str:
    return hashlib.sha1(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:16]


def machine_meta(device: torch.device) -> dict:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    return {"device": device.type, "device_name": name, "torch": torch.__version__,
            "threads": torch.get_num_threads()}


def load_or_measure(kernels: Dict[str, Callable[[], None]], meta: dict, cache_dir: Path,
                    warmup: int, repeats: int, device: torch.device, fixed_path: Optional[str] = None,
                    use_cache: bool = True, reference: str = "mb:normal") -> Profile:
    """The profile for `meta`: measured kernels are cached and reused; missing ones are measured.

    Kernels added to a cached profile later (another method's) are timed side by side with
    the `reference` kernel again and scaled by (cached reference / fresh reference): the
    machine may be busier or quieter than when the cache was made, the ratio is what holds.

    With `fixed_path` (cluster.profile=<file>) the profile is read from that file and must
    contain every kernel: tests and cross-machine comparisons use it to pin the clock.
    """
    if fixed_path:
        data = json.loads(Path(fixed_path).read_text())
        prof = Profile(dict(data["kernels"]), dict(data.get("meta", {})), str(fixed_path))
        missing = sorted(set(kernels) - set(prof.kernels))
        if missing:
            raise ValueError(f"cluster.profile={fixed_path} lacks kernels {missing}")
        return prof
    if not use_cache:  # cluster.profile=fresh: measure now, keep nothing
        return Profile(time_kernels(kernels, warmup, repeats, device), meta, None)
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"{profile_key(meta)}.json"
    with FileLock(str(path) + ".lock"):  # parallel sweep jobs share one measurement
        cached = json.loads(path.read_text())["kernels"] if path.exists() else {}
        missing = [k for k in kernels if k not in cached]
        if missing:
            rescale = reference in cached and reference in kernels
            todo = {k: kernels[k] for k in missing + ([reference] if rescale else [])}
            fresh = time_kernels(todo, warmup, repeats, device)
            scale = cached[reference] / fresh[reference] if rescale else 1.0
            for name in missing:
                cached[name] = fresh[name] * scale
                log.info("profiled %-36s %.4f s%s", name, cached[name],
                         f" (scaled x{scale:.2f} to the cached {reference})" if rescale else "")
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"kernels": cached, "meta": meta}, indent=1))
            tmp.replace(path)
    return Profile(cached, meta, str(path))


# ---------------------------------------------------------------------- cost model
@dataclass
class StepCost:
    """Simulated seconds of one optimizer step, by category (a subset of CATEGORIES)."""
    compute: float = 0.0  # the failure-free worker's forward+backward and the optimizer
    comm: float = 0.0  # the gradient all-reduce
    ft_overhead: float = 0.0  # what the method pays every step to be fault tolerant
    degraded_extra: float = 0.0  # the slowest worker's extra work while degraded

    @property
    def total(self) -> float:
        return self.compute + self.comm + self.ft_overhead + self.degraded_extra

    def as_dict(self) -> Dict[str, float]:
        return {"compute": self.compute, "comm": self.comm, "ft_overhead": self.ft_overhead,
                "degraded_extra": self.degraded_extra}


class CostModel:
    """Turns a profile and the cluster constants into simulated seconds."""

    def __init__(self, profile: Profile, cluster_cfg, n_params: int, state_bytes: int, modes: Dict[str, object],
                 max_steps: int):
        self.profile = profile
        self.max_steps = max_steps
        self.modes = modes  # mode name -> Mode (its profile kernel)
        self.cfg = cluster_cfg
        self.n_params = n_params
        self.state_bytes = state_bytes  # model + optimizer state, bytes

    def allreduce_s(self, n_workers: int) -> float:
        """Ring all-reduce of fp32 gradients: 2(n-1)/n of the bytes over the bus bandwidth."""
        if n_workers <= 1:
            return 0.0
        nbytes = 4 * self.n_params
        return (2 * (n_workers - 1) / n_workers * nbytes / (self.cfg.allreduce_GBps * 1e9)
                + 2 * (n_workers - 1) * self.cfg.allreduce_latency_s)

    def worker_s(self, modes: Iterable[str]) -> float:
        """Compute seconds of one worker that processes one micro-batch per entry of `modes`."""
        return sum(self.profile[self.modes[m].kernel] for m in modes)

    def failure_free_step(self, n_workers: int) -> StepCost:
        return StepCost(compute=self.profile["mb:normal"] + self.profile["optimizer"],
                        comm=self.allreduce_s(n_workers))

    def step(self, worker_modes: Dict[int, Iterable[str]], n_allreduce: int, ft_overhead: float = 0.0) -> StepCost:
        """Synchronous DP: the slowest worker's compute, the all-reduce, the method's overhead.

        `worker_modes` maps each computing worker to the modes of its micro-batches. What the
        slowest worker spends beyond one normal micro-batch is `degraded_extra`.
        """
        normal = self.profile["mb:normal"]
        slowest = max((self.worker_s(m) for m in worker_modes.values()), default=0.0)
        return StepCost(compute=min(slowest, normal) + self.profile["optimizer"],
                        comm=self.allreduce_s(n_allreduce), ft_overhead=ft_overhead,
                        degraded_extra=max(0.0, slowest - normal))

    def stall_s(self, paper_seconds: float) -> float:
        """A stall quoted in the papers' seconds, in this run's seconds (see module doc)."""
        if not self.cfg.scale_stalls:
            return paper_seconds
        return paper_seconds * self.paper_second_s

    @property
    def paper_second_s(self) -> float:
        """Simulated seconds of this run that stand for one second of the paper's run."""
        run_s = self.failure_free_step(self.cfg.n_workers).total * self.max_steps
        return run_s / (self.cfg.paper_run_h * 3600.0)

    def storage_write_s(self, nbytes: Optional[int] = None) -> float:
        """Writing the training state to shared storage: the slower of measured and bandwidth-bound."""
        nbytes = self.state_bytes if nbytes is None else nbytes
        measured = self.profile.kernels.get("checkpoint_save", 0.0)
        return max(measured, nbytes / (self.cfg.storage_GBps * 1e9))

    def storage_read_s(self, nbytes: Optional[int] = None) -> float:
        nbytes = self.state_bytes if nbytes is None else nbytes
        measured = self.profile.kernels.get("checkpoint_load", 0.0)
        return max(measured, nbytes / (self.cfg.storage_GBps * 1e9))


# --------------------------------------------------------------------------- clock
class SimClock:
    """The simulated cluster clock with a per-category breakdown.

    Committed steps remember their cost so that a rollback can move the time of the
    steps it discards from their categories into `lost_work`.
    """

    def __init__(self):
        self.now = 0.0
        self.breakdown = {c: 0.0 for c in CATEGORIES}
        self._committed: Dict[int, Dict[str, float]] = {}

    def charge(self, category: str, seconds: float) -> None:
        if category not in self.breakdown:
            raise KeyError(f"unknown time category {category!r}")
        if seconds < 0:
            raise ValueError(f"negative time {seconds} for {category}")
        self.breakdown[category] += seconds
        self.now += seconds

    def commit_step(self, step: int, cost: StepCost) -> None:
        parts = cost.as_dict()
        for cat, sec in parts.items():
            self.charge(cat, sec)
        # add_to_step time booked before the commit (Bamboo: the part of a step done before a
        # failure it survived) stays with the step, so a later rollback discards it too
        for cat, sec in self._committed.get(step, {}).items():
            parts[cat] = parts.get(cat, 0.0) + sec
        self._committed[step] = parts

    def add_to_step(self, step: int, category: str, seconds: float) -> None:
        """Charge time that belongs to a committed step (a checkpoint written after it)."""
        self.charge(category, seconds)
        self._committed.setdefault(step, {}).setdefault(category, 0.0)
        self._committed[step][category] += seconds

    def state_dict(self) -> Dict[str, object]:
        return {"now": self.now, "breakdown": dict(self.breakdown),
                "committed": {s: dict(parts) for s, parts in self._committed.items()}}

    def load_state_dict(self, state: Dict[str, object]) -> None:
        self.now = state["now"]
        self.breakdown = dict(state["breakdown"])
        self._committed = {int(s): dict(parts) for s, parts in state["committed"].items()}

    def discard_steps_from(self, step: int) -> float:
        """Steps >= `step` are rolled back: their time becomes lost work. Returns those seconds."""
        lost = 0.0
        for s in [s for s in self._committed if s >= step]:
            for cat, sec in self._committed.pop(s).items():
                self.breakdown[cat] -= sec
                lost += sec
        self.breakdown["lost_work"] += lost
        return lost
