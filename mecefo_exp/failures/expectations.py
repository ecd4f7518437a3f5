"""What a failure process gives on average over a run: failures per unit and mean units down, by
reading (faults.py draws the traces; docs/CLOCK.md, "Failure traces", has the formulas and why
each is exact or stationary).
"""

from __future__ import annotations

import math
from typing import List, Tuple


def _poisson_tails(x: float, k_max: int) -> List[float]:
    """[P(N >= k) for k = 0..k_max], N ~ Poisson(x)."""
    tails, cdf = [1.0], 0.0
    for i in range(k_max):
        cdf += math.exp(-x + i * math.log(x) - math.lgamma(i + 1)) if x > 0 else float(i == 0)
        tails.append(-math.expm1(-x) if i == 0 else max(0.0, 1.0 - cdf))
    return tails


def _erlang_b(c: int, load: float) -> float:
    """Erlang's loss probability of c servers offered `load` (B(0) = 1)."""
    b = 1.0
    for k in range(1, c + 1):
        b = load * b / (k + load * b)
    return b


def expected_failures(
    process: str, repair: str, rate: float, down_s: float, c: int, run_s: float
) -> Tuple[float, float, str]:
    """Expected unit failures and mean units down over [0, run_s] (module docstring)."""
    # a down time as long as the run: a unit fails at most once, as in one tick interval from every unit up
    at_most_once = repair != "tick" and down_s >= run_s > 0
    if repair == "tick" or at_most_once:
        n_full = math.floor(run_s / down_s) if not at_most_once else 0
        rem = max(0.0, run_s - n_full * down_s)
        if process == "per_worker":

            def fails(s):
                return c * -math.expm1(-rate * s)

            def area(s):
                return c * (s - -math.expm1(-rate * s) / rate)

            how = "per_worker tick: exact over the run (at most one failure per unit and tick interval)"
        else:

            def fails(s):
                return sum(_poisson_tails(rate * s, c)[1:])

            def area(s):  # integral over [0, s] of E[min(N(u), c)] du
                tails = _poisson_tails(rate * s, c)
                return sum(s - sum(tails[1 : k + 1]) / rate for k in range(1, c + 1))

            how = "cluster tick: exact over the run (min(Poisson arrivals, units) down in each tick interval)"
        unit_fail = n_full * fails(down_s) + fails(rem)
        units_down = (n_full * area(down_s) + area(rem)) / run_s if run_s > 0 else 0.0
        if at_most_once:
            how = f"{process} {repair}, a down time as long as the run: exact (at most one failure per unit)"
        return unit_fail, units_down, how
    if process == "per_worker":
        cycle = 1.0 / rate + down_s
        return (
            c * run_s / cycle,
            c * down_s / cycle,
            f"per_worker {repair}: alternating renewal, stationary (ignores that every unit starts up)",
        )
    load = rate * down_s
    accepted = 1.0 - _erlang_b(c, load)
    return (
        rate * accepted * run_s,
        load * accepted,
        f"cluster {repair}: Erlang loss M/G/c/c, stationary (ignores that every unit starts up)",
    )
