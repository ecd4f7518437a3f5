"""Failure models: each one file and one line of `MODELS`, each drawing (or reading) the trace of
fail and recover events a run replays.

A trace depends only on the failure config, the number of workers, the seed and the time base
(the failure-free step time from the clock): every method of a sweep with the same seed and
failure config sees the same trace (common random numbers). A node trace's start also waits for
the method's first rendezvous (`job_start_s`), the one place a method reaches into its trace.
docs/CLOCK.md ("Failure traces: the readings, the time map and the expectations") has every
reading and formula.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Dict, Optional

from .base import TimeBase, setting
from .events import FAIL, JOB, RECOVER, FailureEvent, TraceError
from .trace import MAX_TRACE_BYTES, TRACE_BYTES_PER_EVENT, Trace, check_trace_budget, check_whole_groups

#: failure.kind -> the module that checks its settings and makes its trace
MODELS: Dict[str, str] = {
    "none": "mecefo_exp.failures.none",  # no failures
    "paper": "mecefo_exp.failures.paper",  # the MeCeFO paper's Table 1 rates (and Llama 3's rate)
    "poisson": "mecefo_exp.failures.poisson",  # an MTBF and an MTTR
    "field": "mecefo_exp.failures.field",  # Llama 3's interruptions by cause, each with its blast radius
    "trace": "mecefo_exp.failures.trace_file",  # a CSV of time,worker,event replayed as it is
    "nodes": "mecefo_exp.failures.nodes",  # a spot cluster's add/remove node trace
}

__all__ = [
    "FAIL",
    "JOB",
    "RECOVER",
    "FailureEvent",
    "TraceError",
    "Trace",
    "TimeBase",
    "MODELS",
    "model",
    "failure_config",
    "make_trace",
    "check_failure",
    "check_trace_budget",
    "check_whole_groups",
    "MAX_TRACE_BYTES",
    "TRACE_BYTES_PER_EVENT",
]


def model(kind: str) -> ModuleType:
    if kind not in MODELS:
        raise ValueError(f"failure.kind={kind!r}: allowed: {', '.join(MODELS)}")
    return importlib.import_module(MODELS[kind])


def failure_config(kind: str) -> type:
    """The dataclass of failure kind <kind>'s settings (its file's `Config`; Hydra composes a preset
    of that kind onto it)."""
    return model(kind).Config


def check_failure(f, n_workers: int) -> Optional[str]:
    """The first problem of a failure config's own settings (its model's check), in one line."""
    return model(f.kind).check(f, n_workers)


def make_trace(
    failure_cfg,
    n_workers: int,
    step_s: float,
    max_steps: int,
    seed: int,
    paper_run_h: float = 12.4,
    real_time: bool = False,
    job_start_s: float = 0.0,
) -> Trace:
    """Draw (or read) the trace for a run whose failure-free step takes `step_s` seconds.

    Hours are run_s / paper_run_h simulated seconds (run_s = step_s * max_steps: the paper-time
    map) or, on a real-time clock, 3600 s.
    """
    run_s = step_s * max_steps
    hour_s = 3600.0 if real_time else run_s / paper_run_h
    unit = setting(failure_cfg, "unit", "hours")
    unit_s = hour_s if unit == "hours" else step_s if unit == "steps" else 1.0
    base = TimeBase(
        n_workers=n_workers,
        step_s=step_s,
        run_s=run_s,
        horizon_s=run_s * failure_cfg.horizon_factor,
        hour_s=hour_s,
        unit_s=unit_s,
        seed=seed,
        real_time=real_time,
        job_start_s=job_start_s,
    )
    return model(failure_cfg.kind).make(failure_cfg, base)
