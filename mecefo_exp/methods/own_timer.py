"""A method whose own events fall between the trace's: a capability a method class declares by
inheriting `OwnTimer` (the artifact replay's rendezvous timeouts, replay/restarts.py). The loop
hears such a timer as it hears the trace: it interrupts the step in flight when the timer falls
(a trace event at the same instant goes first), and a quiet run of steps ends before it. A method
that does not inherit it has no timer; the loop asks no other method.
"""

from __future__ import annotations

import abc
from typing import Optional

from ..plan import Plan


class OwnTimer(abc.ABC):
    @abc.abstractmethod
    def timer_s(self) -> Optional[float]:
        """When the method's own next event falls (a restart that completes while training goes
        on), or None."""

    @abc.abstractmethod
    def on_timer(self, plan: Optional[Plan], elapsed: float) -> None:
        """The timer fell `elapsed` seconds into the step of `plan` (None: no step was in flight)."""


def timer_of(method) -> Optional[OwnTimer]:
    """The method, when it keeps a timer of its own; None otherwise."""
    return method if isinstance(method, OwnTimer) else None


def timer_s_of(timer: Optional[OwnTimer]) -> Optional[float]:
    """When the timer (`timer_of` a method) falls next; None without a timer or with none due."""
    return timer.timer_s() if timer is not None else None
