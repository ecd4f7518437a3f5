"""The MeCeFO paper's Table 1 (`failure=low`, `medium`, `high`, kind `paper`; also `failure=llama3`):
one failure every `every_h` hours somewhere in a cluster of `paper_workers` GPUs, each back after
`recover_h` hours, read through `failure.process`, `unit_gpus` and `repair` (renewal.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..config import FailureConfig
from .base import TimeBase
from .renewal import renewal_trace
from .trace import Trace


@dataclass
class Config(FailureConfig):
    every_h: Optional[float] = None  # one failure every every_h hours somewhere in the paper's cluster
    recover_h: Optional[float] = None  # each failed GPU back after recover_h hours
    paper_workers: int = 32  # the GPUs of the paper's cluster that every_h is a rate of


def check(f, n_workers: int) -> Optional[str]:
    # repair=replace does not use recover_h (a spare comes after replace_s)
    for key in ("every_h",) + (("recover_h",) if f.repair != "replace" else ()):
        if f[key] is None or not f[key] > 0:
            return f"failure.{key}={f[key]}: must be > 0 hours"
    if f.paper_workers < 1:
        return f"failure.paper_workers={f.paper_workers}: must be >= 1"
    return None


def make(f, base: TimeBase) -> Trace:
    unit_s = base.hour_s  # the paper's times are hours, whatever failure.unit says
    unit_gpus = int(f.unit_gpus or 1)
    # per_worker: the paper's cluster of paper_workers / unit_gpus units sees one failure every every_h
    unit_rate = 1.0 / (f.paper_workers / unit_gpus * f.every_h * unit_s)
    cluster_rate = 1.0 / (f.every_h * unit_s)
    return renewal_trace(f, base, unit_rate, cluster_rate, f.recover_h * unit_s)
