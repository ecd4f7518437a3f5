"""What every failure model is given and answers: the run's time base, and the model's interface.

A failure model is one file of this package (paper.py, poisson.py, field.py, trace_file.py,
nodes.py, none.py) and one line of the registry (`failures.MODELS`): its `check` refuses a bad
config in one line before any compute, its `make` draws (or reads) the run's trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol


@dataclass(frozen=True)
class TimeBase:
    """The run a trace is drawn for, in simulated seconds."""

    n_workers: int
    step_s: float  # the failure-free step
    run_s: float  # the failure-free run: step_s x max_steps
    horizon_s: float  # the trace is drawn up to here (run_s x failure.horizon_factor)
    hour_s: float  # one hour of the config's times: 3600 s on a real-time clock, else the paper-time map
    unit_s: float  # one unit of the config's times (failure.unit: hours, steps or seconds)
    seed: int
    real_time: bool = False
    job_start_s: float = 0.0  # a node trace: how long the job's first rendezvous takes


class FailureModel(Protocol):
    def check(self, f: Any, n_workers: int) -> Optional[str]:
        """The first problem of this model's settings, in one line; None if there is none."""

    def make(self, f: Any, base: TimeBase) -> Any:
        """The run's trace (a `Trace`)."""


def setting(cfg, key: str, default):
    """cfg.key, or default for a config saved before the key existed."""
    try:
        value = getattr(cfg, key)
    except (AttributeError, KeyError):
        return default
    return default if value is None else value
