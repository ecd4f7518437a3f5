"""No failures (`failure=none`): the failure-free run every method is measured against."""

from __future__ import annotations

from typing import Optional

from ..config import FailureConfig
from .base import TimeBase
from .trace import Trace

#: no settings beyond every model's
Config = FailureConfig


def check(f, n_workers: int) -> Optional[str]:
    return None


def make(f, base: TimeBase) -> Trace:
    return Trace(
        [],
        base.n_workers,
        base.horizon_s,
        {"failures": 0.0, "unit_failures": 0.0, "mean_workers_down": 0.0},
        "no failures",
    )
