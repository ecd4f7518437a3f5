"""Failures at a mean time between failures and a mean time to repair (`failure=poisson`), in
`failure.unit` (hours, steps or seconds), read through `failure.process`, `unit_gpus` and
`repair` (renewal.py).
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
    mtbf: Optional[float] = None  # per-worker mean time between failures (in `unit`)
    mttr: Optional[float] = None  # mean time to repair (in `unit`)


def check(f, n_workers: int) -> Optional[str]:
    if f.mtbf is None or not f.mtbf > 0:
        return f"failure.mtbf={f.mtbf}: must be > 0 (mean time between failures)"
    if f.mttr is None or not f.mttr >= 0:
        return f"failure.mttr={f.mttr}: must be >= 0 (mean time to repair)"
    if f.repair == "tick" and not f.mttr > 0:
        return "failure.repair=tick needs failure.mttr > 0 (the tick period)"
    return None


def make(f, base: TimeBase) -> Trace:
    rate = 1.0 / (f.mtbf * base.unit_s)
    return renewal_trace(f, base, rate, rate, f.mttr * base.unit_s)
