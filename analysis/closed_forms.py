"""Closed forms the simulated methods are checked against (tests/test_closed_forms.py).

Checkpoint-restart under exponential failures with mean M (the job's), checkpoint write C, restart R
and T seconds of work between checkpoints:

- first order (Young, "A first order approximation to the optimum checkpoint interval", CACM 1974):
  useful fraction 1 - C/T - (T/2 + R)/M, optimum T = sqrt(2 C M); good where C, R, T << M;
- higher order (Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps",
  FGCS 2006): a segment of T + C seconds done without a failure, failures during the restart too:
  useful fraction T / (M e^(R/M) (e^((T+C)/M) - 1)), optimum sqrt(2 C M)(1 + sqrt(C/2M)/3 + C/18M) - C.

In-place methods while failures come and go: each of U units (a server, a tensor-parallel group)
alternates up (exponential, rate lam) and down (fixed D), so in the long run it is down with
p = lam D / (1 + lam D) and the units down at a time are Binomial(U, p) (alternating renewal). A
synchronous step runs at the slowest unit's pace, so the step is degraded whenever k >= 1.
"""

from __future__ import annotations

import math
from typing import Dict, List

from mecefo_exp.methods.intervals import daly_interval, young_interval  # noqa: F401 (one formula, the methods')


def first_order(C: float, R: float, M: float, T: float) -> float:
    return 1.0 - C / T - (T / 2.0 + R) / M


def daly(C: float, R: float, M: float, T: float) -> float:
    return T / (M * math.exp(R / M) * math.expm1((T + C) / M))


def down_probability(lam: float, D: float) -> float:
    """A unit's stationary probability of being down (alternating renewal: mean up 1/lam, down D)."""
    return lam * D / (1.0 + lam * D)


def binomial_down(U: int, p: float, k_max: int) -> List[float]:
    """P(k units down), k = 0..k_max (the last entry: k >= k_max)."""
    probs = [math.comb(U, k) * p**k * (1 - p) ** (U - k) for k in range(k_max)]
    return probs + [max(0.0, 1.0 - sum(probs))]


def renewal_failures(U: int, lam: float, D: float, run_s: float) -> float:
    """Expected unit failures in run_s seconds (stationary: U run_s / (1/lam + D))."""
    return U * run_s / (1.0 / lam + D)


def in_place_effective(
    U: int, lam: float, D: float, step_s: float, degraded_step_s: float, fixed_overhead: float = 0.0
) -> Dict[str, float]:
    """Useful fraction of an in-place method (MeCeFO, Bamboo's cover) that never falls back.

    The time with at least one unit down is q = 1 - (1 - p)^U; there a step takes degraded_step_s.
    Each failure also loses the step it interrupts: on average half a step at the pace of the
    moment (first order in the failure rate). fixed_overhead: a share of time spent writing
    checkpoints (the fall-back's)."""
    p = down_probability(lam, D)
    q = 1.0 - (1.0 - p) ** U
    pace = (1.0 - q) + q * step_s / degraded_step_s  # failure-free seconds per second
    failures_per_s = U * lam * (1.0 - p)
    lost = failures_per_s * 0.5 * ((1.0 - q) * step_s + q * degraded_step_s)
    return {"p": p, "q": q, "effective": pace * (1.0 - lost - fixed_overhead)}


def snapshot_effective(step_s: float, every: int, snapshot_s: float) -> float:
    """Failure-free useful fraction of a method that stalls snapshot_s every `every` steps (REFT)."""
    return every * step_s / (every * step_s + snapshot_s)


def reformation_effective(U: int, lam: float, D: float, step_s: float, stall_s: float) -> float:
    """Oobleck in the limit of rare failures: every membership change (a failure and, later, its
    return) stalls stall_s and the failure loses half a step; first order in the failure rate."""
    changes_per_s = 2.0 * U * lam / (1.0 + lam * D)
    return 1.0 - changes_per_s * stall_s - U * lam / (1.0 + lam * D) * step_s / 2.0
