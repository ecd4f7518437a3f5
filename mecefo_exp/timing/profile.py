"""Kernel seconds measured on this machine (hardware.compute=profile, or cluster.profile=fresh).

Named kernels (a normal forward+backward of one micro-batch, an optimizer step, a copy of
the training state, ...) are timed with warm-up and repeats, cached per (model, batch,
device, kernel) in .cache/profiles/ and written next to every run. Opt-in: the numbers
depend on the machine and on how busy it was while measuring.

A `Profile` is also what the FLOP model (flops.py) produces: the same kernel names, in
seconds, whichever compute model made them.
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
from typing import TYPE_CHECKING, Callable, Dict, Iterable, Optional

from filelock import FileLock

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


@dataclass
class Kernel:
    """A kernel with what its timing needs besides running it: `prepare`, work that must precede it
    but is not part of it (run before its clock starts); `formula_flops` and `formula_kind`, its
    FLOPs from a formula where torch's counter counts none (an SVD; timing/flops.py)."""

    run: Callable[[], None]
    prepare: Optional[Callable[[], None]] = None
    formula_flops: Optional[float] = None
    formula_kind: str = "svd"

    def __call__(self) -> None:
        self.run()


def time_kernels(
    fns: Dict[str, Callable[[], None]], warmup: int, repeats: int, device: torch.device
) -> Dict[str, float]:
    """Median seconds of each fn() after warm-up, timed round-robin.

    Round-robin (a, b, c, a, b, c, ...) rather than one kernel after the other, so that a
    burst of load on the machine lands on every kernel alike and their ratios survive. A kernel's
    `prepare` (kernels.build_kernels: the optimizer's gradients) runs before its clock starts. On
    CUDA the device is idle when a kernel starts (no work queued from before) and CUDA events
    recorded around the kernel alone time it; elsewhere the wall clock.
    """
    import torch

    cuda = device.type == "cuda"
    samples: Dict[str, list] = {k: [] for k in fns}
    for r in range(warmup + repeats):
        for name, fn in fns.items():
            prepare = getattr(fn, "prepare", None)
            if prepare is not None:
                prepare()
            if cuda:
                torch.cuda.synchronize(device)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                seconds = start.elapsed_time(end) / 1000
            else:
                t0 = time.perf_counter()
                fn()
                seconds = time.perf_counter() - t0
            if r >= warmup:
                samples[name].append(seconds)
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

    def fingerprint(self, **context) -> str:
        """A short hash of the kernel seconds (and of `context`: links, stalls) that the clock
        charges: two runs with the same fingerprint share a clock."""
        data = {"kernels": self.kernels, **context}
        return hashlib.sha1(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:12]


def profile_key(meta: dict) -> str:
    return hashlib.sha1(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:16]


def machine_meta(device: torch.device) -> dict:
    import torch

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    return {"device": device.type, "device_name": name, "torch": torch.__version__, "threads": torch.get_num_threads()}


def load_fixed(fixed_path: str, names: Iterable[str]) -> Profile:
    """cluster.profile=<file>: the profile read from that file, which must hold every kernel named."""
    data = json.loads(Path(fixed_path).read_text())
    prof = Profile(dict(data["kernels"]), dict(data.get("meta", {})), str(fixed_path))
    missing = sorted(set(names) - set(prof.kernels))
    if missing:
        raise ValueError(f"cluster.profile={fixed_path} lacks kernels {missing}")
    return prof


def load_or_measure(
    kernels: Dict[str, Callable[[], None]],
    meta: dict,
    cache_dir: Path,
    warmup: int,
    repeats: int,
    device: torch.device,
    fixed_path: Optional[str] = None,
    use_cache: bool = True,
    reference: str = "mb:normal",
) -> Profile:
    """The profile for `meta`: measured kernels are cached and reused; missing ones are measured.

    Kernels added to a cached profile later (another method's) are timed side by side with
    the `reference` kernel again and scaled by (cached reference / fresh reference): the
    machine may be busier or quieter than when the cache was made, the ratio is what holds.

    With `fixed_path` (cluster.profile=<file>) the profile is read from that file and must
    contain every kernel: tests and cross-machine comparisons use it to pin the clock.
    """
    if fixed_path:
        return load_fixed(fixed_path, kernels)
    if not use_cache:  # cluster.profile=fresh: measure now, keep nothing
        return Profile(time_kernels(kernels, warmup, repeats, device), meta, None)
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"{profile_key(meta)}.json"
    with FileLock(str(path) + ".lock"):  # parallel sweep jobs share one measurement
        cached = json.loads(path.read_text())["kernels"] if path.exists() else {}
        missing = [k for k in kernels if k not in cached]
        if missing:
            log.info(
                "timing %d kernels on this machine (%d warm-up + %d timed runs each: about a minute for the "
                "tiny model on 2 busy cores, more for larger ones); cached in %s, later runs reuse it",
                len(missing),
                warmup,
                repeats,
                path,
            )
            rescale = reference in cached and reference in kernels
            todo = {k: kernels[k] for k in missing + ([reference] if rescale else [])}
            fresh = time_kernels(todo, warmup, repeats, device)
            scale = cached[reference] / fresh[reference] if rescale else 1.0
            for name in missing:
                cached[name] = fresh[name] * scale
                log.info(
                    "profiled %-36s %.4f s%s",
                    name,
                    cached[name],
                    f" (scaled x{scale:.2f} to the cached {reference})" if rescale else "",
                )
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"kernels": cached, "meta": meta}, indent=1))
            tmp.replace(path)
    return Profile(cached, meta, str(path))
