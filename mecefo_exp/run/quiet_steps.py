"""Quiet steps: the steps up to the next event, booked at once by a numerics-free loop.

Between two events every step has the same plan and the same cost (the method names its next
event: `Method.quiet_steps`), so the loop asks how many steps from here on change nothing but
the books and books them together: the clock, the span, the tokens, the method's counters and
one metrics row with the steps' range. A step-by-step run of the same config gives the same
record (tests/test_event_driven.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional

from ..methods.intervals import steps_before_multiple
from ..methods.own_timer import OwnTimer, timer_s_of
from ..signals import signals_held
from ..timing.clock import steps_ending_by, steps_starting_before
from .context import log
from .shape_only import ShapeOnlyState

if TYPE_CHECKING:
    from .experiment import Experiment


class QuietSteps:
    """How many steps from this one are quiet, and their booking."""

    def __init__(self, run: Experiment, timer: Optional[OwnTimer]):
        self.run = run
        self.timer = timer  # the method's own timer (methods/own_timer.py), None when it keeps none
        self.said_stepped = False  # the method cannot name its next event: said once per run

    def ahead(self, plan, step_s: float) -> int:
        """How many steps from this one on change nothing but the books: the method's quiet steps
        (`Method.quiet_steps`), up to the step the next trace event falls in (a failure interrupts
        it, so it is left out; a recovery takes effect after it), the method's timer, a node
        trace's stop, an evaluation, a harness checkpoint and the end of the run. A time limit
        within a millionth of a step of a step boundary leaves that step to be taken alone,
        compared with the clock as in a step-by-step run."""
        run = self.run
        if step_s <= 0:
            return 0
        quiet = run.method.quiet_steps(plan, step_s)
        if quiet is None and not self.said_stepped:
            self.said_stepped = True
            log.info("method=%s cannot name its next event: the loop steps it one step at a time", run.cfg.method.name)
        if not quiet:
            return 0
        limits = [quiet, run.max_steps - run.step, self.in_time(run.clock.now, step_s)]
        if run.eval_every and run.training.numerics:
            limits.append(steps_before_multiple(run.step, run.eval_every))
        if run.resume_store is not None and run.resume_every:
            limits.append(steps_before_multiple(run.step, run.resume_every))
        count = int(min(limits))
        # time the method charges between these steps (REFT's snapshots) ends them later: counted
        # as if all of it came first, the run ends no later than step by step; the steps this
        # leaves out are booked by the next pass
        charged = run.method.charged_in_quiet_run(run.step, count) if count > 1 else 0.0
        return int(min(count, self.in_time(run.clock.now + charged, step_s))) if charged else count

    def in_time(self, now: float, step_s: float) -> float:
        """Steps of `step_s` seconds from `now` on before the trace's next event (the step a failure
        falls in left out, the one a recovery falls in kept), the method's timer or a node trace's stop."""
        trace, timer = self.run.trace, timer_s_of(self.timer)
        return min(
            steps_ending_by(now, step_s, trace.next_failure_time()),
            steps_starting_before(now, step_s, trace.next_event_time()),
            steps_ending_by(now, step_s, timer),
            steps_ending_by(now, step_s, trace.stop_s),
        )

    def book(self, plan, cost, count: int) -> None:
        """`count` steps of `plan`'s shape and equal `cost`, booked at once: the clock, the span,
        the tokens, one metrics row, the method's step counters with the steps' range."""
        run = self.run
        books, clock, first, training, progress = run.books, run.clock, run.step, run.training, run.progress
        assert isinstance(training, ShapeOnlyState) and progress is not None, "an event-driven loop without numerics"
        run.presence.check_step(first, plan.n_computing, count)
        books.span.commit(clock.now, count * cost.total)
        clock.commit_steps(first, count, cost)
        numbers = training.book_steps(first, count)
        books.tokens_processed += numbers.pop("tokens")
        run.step += count
        alive = run.alive
        run.records.metric(
            {
                "step": run.step - 1,
                "first_step": first,
                "tokens": run.step * run.tokens_per_step,
                **numbers,
                # the end of the last step: with what the method charges between the steps, which
                # after_quiet_steps books below (the charge after the last step comes after its row)
                "sim_time_s": clock.now + run.method.charged_in_quiet_run(first, count),
                "wall_time_s": time.perf_counter() - run.wall_start,
                "alive": alive,
                "degraded": plan.degraded,
                "step_cost_s": cost.total,
            }
        )
        with signals_held():  # as after_step: a method's periodic work in the run
            run.method.after_quiet_steps(plan, first, run.step - 1, cost.total)
        progress.update(run.step, None, clock.now, run.tokens_per_step, alive)
