"""The training loop: one engine for every method.

    events = trace due by now          -> method.on_failures / on_recoveries (may stall, roll back)
    plan   = method.plan(step)          -> which worker computes which micro-batch, in which mode
    cost   = method.step_cost(plan)     -> known before the step runs (profile + constants)
    a failure before now + cost?        -> the step is interrupted, nothing is applied
    result = cluster.execute(plan)      -> real forward/backward, per-parameter averaging
    optimizer step, clock.commit_step, metrics row, method.after_step (checkpoints ...)

Without numerics the loop is event-driven (trainer.event_driven): the steps up to the next event
(a trace event, the method's own: `Method.quiet_steps`) all cost the same, so they are booked at
once (quiet_steps.py); the steps at events go through the loop above.
"""

from __future__ import annotations

import itertools
import math
import time
from typing import TYPE_CHECKING, List, Optional, Tuple

from ..console import Progress
from ..failures import FAIL, JOB, FailureEvent
from ..failures.classes import COLLECTIVE_TIMEOUT, fault_class, restore_source
from ..methods.own_timer import timer_of, timer_s_of
from ..plan import StepNotCommitted
from ..signals import signals_held
from .context import log
from .quiet_steps import QuietSteps

if TYPE_CHECKING:
    from .experiment import Experiment

#: attempts at one step that change nothing (same step, clock and trace position) before the
#: loop gives up: each attempt must at least hand the method the event that interrupted it
MAX_IDLE_ATTEMPTS = 3
#: a long run's summary.json is refreshed at least this often (wall seconds), besides every
#: evaluation and disk checkpoint, so that a dead run's record shows how far it got
SUMMARY_EVERY_S = 30.0


class NoProgress(RuntimeError):
    """The loop would spin: a step was attempted again with nothing changed."""


class Loop:
    """Trains a built run to its end: events delivered, steps computed (or booked at once),
    the work of each step boundary. The run's state (step, clock, books) stays on the run."""

    def __init__(self, run: Experiment):
        self.run = run
        self.timer = timer_of(run.method)  # the method's own timer, when it keeps one (the replay's)
        self.quiet = QuietSteps(run, self.timer)
        self._idle = 0  # loop passes in a row that left the step, the trace position and the clock as they were
        self._last_place: Optional[Tuple[int, int, float]] = None
        #: the workers a job-wide fault stopped; its recovery, at the same instant, brings them back
        self._job_workers: Optional[List[int]] = None
        self._summary_at = time.perf_counter()

    def train(self) -> None:
        run = self.run
        books, trace, clock, method, training = run.books, run.trace, run.clock, run.method, run.training
        progress = run.progress = Progress(run.cfg.trainer, run.max_steps, quiet=not run.is_main, logger=log)
        eval_every = run.eval_every
        if not run.resumed:
            self.start_job()
        while run.step < run.max_steps:
            self.check_progress()
            self.apply_due_events()
            run.tier.sync()  # torchft: the quorum shows who is alive; the method hears it
            plan = method.plan(run.step)
            if not plan.n_computing:  # nobody can compute: wait for the next event, the trace's or the method's
                if self.wait_for_an_event(plan):
                    continue
                break  # a node trace's hard stop: nothing is left to happen before it
            cost = method.step_cost(plan)
            if run.event_driven and (quiet := self.quiet.ahead(plan, cost.total)) > 0:
                self.quiet.book(plan, cost, quiet)
                self.end_of_boundary(evaluated=False)
                continue
            end = clock.now + cost.total
            t_fail, t_own = trace.next_failure_time(), timer_s_of(self.timer)
            if (
                t_own is not None and t_own < end and (t_fail is None or t_own < t_fail)
            ):  # an instant's trace events first
                self.timer_falls(plan, max(0.0, t_own - clock.now))
                continue
            if t_fail is not None and t_fail < end:
                books.counters.interrupted_steps += 1
                method.interrupted(plan, t_fail - clock.now)
                continue
            if trace.stop_s is not None and end > trace.stop_s:
                break  # a node trace's hard stop: this step would not complete
            try:
                numbers = training.compute(plan, method, run.step)
            except StepNotCommitted as e:  # torchft: a peer died mid-step; the next quorum shows it
                log.warning("step %d not applied: %s", run.step, e)
                run.event("uncommitted", detail={"reason": str(e)})
                continue
            run.presence.check_step(run.step, plan.n_computing)
            books.span.commit(clock.now, end - clock.now)
            clock.commit_step(run.step, cost)
            books.tokens_processed += numbers.pop("tokens")
            alive = run.alive
            row = {
                "step": run.step,
                "tokens": (run.step + 1) * run.tokens_per_step,
                **numbers,
                "sim_time_s": clock.now,
                "wall_time_s": time.perf_counter() - run.wall_start,
                "alive": alive,
                "degraded": plan.degraded,
                "step_cost_s": cost.total,
            }
            run.records.metric(row)
            run.step += 1
            with signals_held():  # REFT's snapshot is a torch.save too
                method.after_step(run.step - 1)  # the state is now that before step run.step
            progress.update(
                run.step, row.get("loss"), clock.now, run.tokens_per_step, alive, tflops_s=training.achieved_tflops_s
            )
            evaluated = bool(eval_every) and run.step % eval_every == 0 and run.step < run.max_steps and self.evaluate()
            self.end_of_boundary(evaluated)
        progress.close()
        self.evaluate()

    # ------------------------------------------------------------------ events
    def apply_due_events(self) -> None:
        """Hand the method every event due by now, including those that fall in its stalls.

        Failures at one instant (a whole machine) reach the method together. The tier delivers
        them: torchft kills the victim and lets the survivors wait for the quorum to show it.
        """
        run = self.run
        if run.tier.joining:
            return  # a restarted worker: its trace position comes from the peer that heals it
        while due := run.trace.pop_instant(run.clock.now):  # one instant at a time: each is dated by its own
            for (kind, job), same in itertools.groupby(due, key=lambda ev: (ev.kind, ev.worker == JOB)):
                if job:
                    self.deliver_job_wide(kind, next(same))
                else:
                    run.tier.deliver(kind, list(same), run)
        store = run.method.store
        if store is not None and store.pending is not None:  # saved while the events were handled (JIT)
            with signals_held():
                store.flush()  # now that the books hold every event of the instant

    def deliver_job_wide(self, kind: str, ev) -> None:
        """A job-wide fault (worker `JOB`): the workers up stop, and are back at the same instant. The
        method hears them as from one event per worker; the record has one row (worker null, `workers`:
        how many). A tier that kills ranks for real (failure.kill) gets one event per worker."""
        run = self.run
        if kind == FAIL:  # its recovery, next, brings back the same workers
            self._job_workers = run.trace.up_workers()
        workers = self._job_workers or []
        if workers and run.tier.kill:
            run.tier.deliver(kind, [FailureEvent(ev.time, w, kind) for w in workers], run)
        elif workers and kind == FAIL:
            # what the fault destroyed decides what the method restores from (failures/classes.py)
            fault = fault_class(ev.fault)
            source = restore_source(fault, run.method.restores_from)
            detail = {"trace_time_s": ev.time, "job": True, "workers": len(workers)}
            if ev.fault:
                detail.update(fault=fault.name, restores_from=source)
            run.event(kind, None, detail)
            run.books.counters.count_event(kind, len(workers))
            cc = run.cfg.cluster
            if fault.detection == COLLECTIVE_TIMEOUT and cc.collective_timeout_s > cc.detection_s:
                # a hang is found only when a collective times out, not by the heartbeat restarts charge
                run.clock.charge("stall", run.costs.stall_s(cc.collective_timeout_s - cc.detection_s))
            run.method.on_job_fault(workers, source)
        elif workers:
            run.event(kind, None, {"trace_time_s": ev.time, "job": True, "workers": len(workers)})
            run.books.counters.count_event(kind, len(workers))
            run.method.on_recoveries(workers)

    def timer_falls(self, plan, elapsed: float) -> None:
        """The method's own timer (methods/own_timer.py) fell `elapsed` seconds into the step of `plan`."""
        assert self.timer is not None, "a timer fell for a method that keeps none"
        self.timer.on_timer(plan, elapsed)

    def wait_for_an_event(self, plan) -> bool:
        """Nobody can compute: the clock stalls to the next event, the trace's or the method's
        timer. False when nothing is left to happen before a node trace's hard stop."""
        trace, clock = self.run.trace, self.run.clock
        nxt, own = trace.next_event_time(), timer_s_of(self.timer)
        if own is not None and (nxt is None or own < nxt):
            clock.charge("stall", max(0.0, own - clock.now))
            self.timer_falls(plan, 0.0)
            return True
        if nxt is None:
            if trace.stop_s is not None:
                return False
            raise RuntimeError("every worker is down and the trace has no recovery left")
        clock.charge("stall", max(0.0, nxt - clock.now))
        return True

    def check_progress(self) -> None:
        """A loop that keeps coming back to the same step, trace position and clock is stuck: say so."""
        run = self.run
        here = (run.step, run.trace.position, run.clock.now)
        self._idle = self._idle + 1 if here == self._last_place else 0
        self._last_place = here
        if self._idle >= MAX_IDLE_ATTEMPTS:
            raise NoProgress(
                f"step {run.step} cannot make progress: {self._idle + 1} attempts in a row left the "
                f"simulated clock at {run.clock.now!r} s and the trace at event {run.trace.position} "
                f"(next failure at {run.trace.next_failure_time()!r} s)"
            )

    # ------------------------------------------------------------------ boundaries
    def start_job(self) -> None:
        """Before the first step of a fresh run: under a node trace the nodes provision and the
        job starts on them; the method's start (an initial checkpoint); the span of training opens."""
        run = self.run
        if run.trace.start_s is not None:
            run.clock.charge("stall", run.trace.start_s + run.method.job_start_s())
            if run.trace.initial_down:
                run.method.begin_without(sorted(run.trace.initial_down))
        with signals_held():  # REFT's snapshot is a torch.save too
            run.method.start()
        self.end_of_boundary(evaluated=False)
        run.books.span.open(run.clock.now)

    def end_of_boundary(self, evaluated: bool) -> None:
        """Between two steps, after all end-of-step work: write the checkpoint saved at this
        boundary (its books are now complete) and refresh summary.json's progress fields."""
        run = self.run
        store = run.method.store
        with signals_held():
            wrote = store.flush() if store is not None else False
            every = run.resume_every
            if (
                run.resume_store is not None
                and every
                and run.step % every == 0
                and 0 < run.step < run.max_steps
                and not (store is not None and run.step in store.saved)
            ):
                run.resume_store.save(run.step)  # not charged: the harness's safety, not the method's
                wrote = run.resume_store.flush() or wrote
        if wrote or evaluated or time.perf_counter() - self._summary_at > SUMMARY_EVERY_S:
            run.records.summary(run.summary("running"))
            self._summary_at = time.perf_counter()

    def evaluate(self) -> bool:
        """The validation loss at this step, in eval.jsonl and on the console; False without numerics."""
        run = self.run
        loss = run.training.evaluate()
        if loss is None:  # numerics off
            return False
        run.books.final_val_loss = loss
        run.records.eval(
            {
                "step": run.step,
                "sim_time_s": run.clock.now,
                "tokens": run.step * run.tokens_per_step,
                "val_loss": loss,
                "val_ppl": math.exp(loss),
            }
        )
        log.info("step %d  val_loss %.4f  val_ppl %.2f  sim_time %.1fs", run.step, loss, math.exp(loss), run.clock.now)
        return True
