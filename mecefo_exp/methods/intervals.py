"""The checkpoint interval that loses the least time, given a write's cost and the failures' rate.

Young (1974): tau = sqrt(2 C M), first order in C / M. Daly (2006, "A higher order estimate of the
optimum checkpoint interval for restart dumps", FGCS 22(3)): tau = sqrt(2 C M) (1 + sqrt(C / 2M) / 3
+ C / 18M) - C for C < 2M, else M; his worked examples (C = 5 min, restart 10 min) give 117 min at
M = 24 h, 57 min at M = 6 h and 9.1 min at M = 15 min (tests/test_closed_forms.py checks them).
`interval=auto` uses Daly's; Young's stays for comparison.

And where the periodic saves of an interval fall inside a run of steps (`multiples_between`,
`steps_before_multiple`).
"""

from __future__ import annotations

import math


def young_interval(write_s: float, mtbf_s: float) -> float:
    return math.sqrt(2.0 * write_s * mtbf_s)


def daly_interval(write_s: float, mtbf_s: float) -> float:
    if write_s >= 2.0 * mtbf_s:
        return mtbf_s
    ratio = write_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * write_s * mtbf_s) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - write_s


def multiples_between(low: int, high: int, every: int) -> range:
    """The steps low..high (both included) that are multiples of `every`: the periodic saves
    (a snapshot, a checkpoint of the state before that step) that fall inside a run of steps."""
    return range(every * math.ceil(low / every), high + 1, every)


def steps_before_multiple(step: int, every: int) -> int:
    """Steps from `step` on before the first step t with (t + 1) % every == 0, whose end is an
    every-`every`-steps action (a checkpoint after step t is the state before step t + 1)."""
    return (every - 1 - step) % every
