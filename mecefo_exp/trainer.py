"""The training loop: one engine for every method.

    events = trace due by now          -> method.on_failure / on_recover (may stall, roll back)
    plan   = method.plan(step)          -> which worker computes which micro-batch, in which mode
    cost   = method.step_cost(plan)     -> known before the step runs (profile + constants)
    a failure before now + cost?        -> the step is interrupted, nothing is applied
    result = cluster.execute(plan)      -> real forward/backward, per-parameter averaging
    optimizer step, clock.commit_step, metrics row, method.after_step (checkpoints ...)

Without numerics the loop is event-driven (trainer.event_driven): the steps up to the next event
(a trace event, the method's own: `Method.quiet_steps`) all cost the same, so they are booked at
once (`book_quiet_steps`); the steps at events go through the loop above.

`Experiment` builds the parts in order and runs the loop; each part lives in its own file:
the training state (training.py), the books that are saved (books.py), the tier the workers
run on (tiers/), resume (resume.py), the record (record.py), signals (signals.py) and the
console (console.py). Methods see the run only through `RunContext` (methods/base.py).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
import time
from typing import Dict, List, Optional, Tuple

from . import runlock
from .config import plain
from .console import Progress
from .context import Context, log
from .errors import ConfigError
from .failures import FAIL, JOB, FailureEvent, check_whole_groups, make_trace
from .failures.classes import COLLECTIVE_TIMEOUT, fault_class, restore_source
from .invariants import NodePresence, check_goodput
from .methods import build_method
from .methods.base import steps_before_multiple
from .methods.checkpointing import store_of_run
from .metrics import RunRecords
from .plan import StepNotCommitted
from .record import (
    clock_summary,
    close_a_record_left_behind,
    identity,
    log_done,
    log_start,
    now_iso,
    record_failure,
    warn_if_memory_does_not_fit,
    window_summary,
)
from .resume import config_sha256, previous_resumes, recorded_config_sha256, resume_from_folder, save_run_config
from .shape_only import ShapeOnlyState
from .signals import Terminated, signals_end_the_run, signals_held
from .timing import CostModel, build_timing, state_bytes
from .timing.clock import steps_ending_by, steps_starting_before

__all__ = ["Experiment", "NoProgress", "Progress", "StepNotCommitted", "Terminated", "signals_end_the_run"]

#: attempts at one step that change nothing (same step, clock and trace position) before the
#: loop gives up: each attempt must at least hand the method the event that interrupted it
MAX_IDLE_ATTEMPTS = 3
#: a long run's summary.json is refreshed at least this often (wall seconds), besides every
#: evaluation and disk checkpoint, so that a dead run's record shows how far it got
SUMMARY_EVERY_S = 30.0


class NoProgress(RuntimeError):
    """The loop would spin: a step was attempted again with nothing changed."""


class Experiment(Context):
    """Builds every part from the config, then `run()` trains and leaves the run record.

    Its attributes are declared on `Context` (context.py), which is what methods see of it.
    """

    _idle = 0  # loop passes in a row that left the step, the trace position and the clock as they were
    _last_place: Optional[Tuple[int, int, float]] = None
    #: the workers a job-wide fault stopped; its recovery, at the same instant, brings them back
    _job_workers: Optional[List[int]] = None

    # ------------------------------------------------------------------ building
    def setup(self) -> None:
        cfg = self.cfg
        device = peak_tflops = None  # numerics off: no device, and no tensor library is imported
        if cfg.trainer.numerics:
            import torch

            from .timing.peaks import device_peak_tflops
            from .training import prepare_device

            if cfg.trainer.threads:
                torch.set_num_threads(cfg.trainer.threads)
            torch.manual_seed(cfg.seed)
            device = prepare_device(cfg)
            peak_tflops = device_peak_tflops(device, cfg.trainer.precision)
        self.device = self.tier.start(device)
        if self.is_main and self.tier.holds_folder_lock:
            runlock.acquire(self.run_dir)  # before anything is written: a second run refuses here
            self._locked = True
            for tmp in self.run_dir.glob("*.tmp"):  # a killed run's half-written summary/profile
                tmp.unlink(missing_ok=True)
            if cfg.resume:
                self.resumes = previous_resumes(self.run_dir)
                self.config_sha256 = recorded_config_sha256(self.run_dir)[0]
            else:  # the run's identity, written first and never again: what resume=true reuses (and start.json)
                save_run_config(cfg, self.run_dir, start=True)
        self.config_sha256 = self.config_sha256 or config_sha256(self.run_dir)
        self.records = RunRecords(self.run_dir, cfg.logger, plain(cfg), enabled=self.is_main)
        if not cfg.resume:  # a resume says `running` once it has loaded a checkpoint (resume())
            self.records.summary(self.summary("running"))

        if cfg.trainer.numerics:
            from .training import TrainingState

            assert self.device is not None  # numerics: the device prepare_device chose (the tier's rank's)
            self.training = TrainingState(cfg, self.n_workers, self.device, peak_tflops)
        else:
            self.training = ShapeOnlyState(cfg, self.n_workers)
        self.method = build_method(plain(cfg.method), self)
        modes = self.method.modes()
        self.training.attach(self.tier.make_cluster(self, self.training, modes, cfg.cluster, cfg.trainer), modes)
        self.build_clock(modes)
        self.books.keep(self.trace, self.method, self.method.store)
        self.method.setup()
        self.resume_store = store_of_run(self, folder="resume", keep=1) if self.training.numerics else None
        for store in (self.method.store, self.resume_store):
            if store is not None and store.clean_incomplete():
                log.warning("%s: removed half-written checkpoints a killed run left", store.root)
        if cfg.resume:
            self.resume()
        self.resumed = self.tier.begin(self.resumed)
        self.event_driven = cfg.trainer.event_driven and not self.training.numerics
        if self.event_driven and not self.method.names_its_events:
            log.info(
                "method=%s cannot name its next event: the numerics-free loop steps it one step at a time",
                self.method.name,
            )
            self.event_driven = False
        log_start(log, cfg, self.trace, self.timing, self.costs, self.training, self.max_steps, self.tokens_per_step)

    def build_clock(self, modes) -> None:
        """The kernel seconds (measured, from FLOPs, or a profile file), the cost model, the trace."""
        cfg = self.cfg
        resumed_profile = self.run_dir / "profile.json"
        # a resumed run keeps its own clock: the profile.json its first start wrote
        own = resumed_profile if cfg.resume and cfg.cluster.profile == "auto" and resumed_profile.exists() else None
        numerics = self.training.numerics
        self.timing = build_timing(
            cfg,
            self.method,
            modes,
            self.training.vocab_size,
            self.device,
            real_model=self.training.model if numerics else None,
            stream=self.training.stream,
            is_main=self.is_main,
            own_profile=own,
        )
        self.tier.share_profile(self.timing)
        self.training.kernel_counts = self.timing.counts
        self.costs = CostModel(
            self.timing.profile,
            cfg.cluster,
            cfg.hardware,
            self.timing.n_params,
            state_bytes=state_bytes(self.timing.n_params),
            modes=modes,
            max_steps=self.max_steps,
            method=cfg.method.name,
            shape=self.placement,
        )
        step_s = self.costs.failure_free_step(self.n_workers).total
        self.trace = make_trace(
            cfg.failure,
            self.n_workers,
            step_s,
            self.max_steps,
            cfg.seed,
            cfg.cluster.paper_run_h,
            real_time=self.costs.real_time,
            job_start_s=self.method.job_start_s(),
        )
        if self.placement is not None:
            check_whole_groups(self.trace, self.placement.tp)
        # a node trace: no step computed on more nodes than present (a replay of another simulator,
        # method.variant, keeps that simulator's books, its documented quirks included: not checked)
        self.presence = NodePresence(None if self.cfg.method.get("variant") else self.trace)
        # a resumed run keeps the files its first start wrote (it reads its own profile.json)
        if self.is_main and not (cfg.resume and (self.run_dir / "trace.csv").exists()):
            self.trace.write_csv(self.run_dir / "trace.csv")
        if not (cfg.resume and resumed_profile.exists()):
            self.records.write_json("profile.json", self.timing.profile.to_json())
        warn_if_memory_does_not_fit(log, self.timing)

    # ------------------------------------------------------------------ resume
    def resume(self) -> None:
        """Continue this run folder from its newest complete checkpoint (resume=true)."""
        point = resume_from_folder(
            self.run_dir,
            self.cfg.method.name,
            self.method.store,
            self.resume_store,
            self.training,
            self.books,
            self.records,
            len(self.resumes),
        )
        self.step = point.step
        self.wall_start = time.perf_counter() - point.wall_time_s
        self.resumed = True
        self.resumes.append(point.record)
        checkpoint = self.run_dir / point.record["checkpoint"]
        superseded = point.record["superseded_rows"]
        self.event(
            "resume",
            detail={
                "step": self.step,
                "checkpoint": str(checkpoint),
                "n": point.record["n"],
                "superseded_rows": superseded,
            },
        )
        log.info(
            "resumed %s at step %d (simulated time %.2f s); superseded rows %s (kept in superseded/resume-%d/)",
            self.run_dir,
            self.step,
            self.clock.now,
            superseded or "none",
            point.record["n"],
        )
        self.records.summary(self.summary("running"))  # the record says at once that it was resumed

    # ------------------------------------------------------------------ the loop
    def apply_due_events(self) -> None:
        """Hand the method every event due by now, including those that fall in its stalls.

        Failures at one instant (a whole machine) reach the method together. The tier delivers
        them: torchft kills the victim and lets the survivors wait for the quorum to show it.
        """
        if self.tier.joining:
            return  # a restarted worker: its trace position comes from the peer that heals it
        while due := self.trace.pop_instant(self.clock.now):  # one instant at a time: each is dated by its own
            for (kind, job), same in itertools.groupby(due, key=lambda ev: (ev.kind, ev.worker == JOB)):
                if job:
                    self.deliver_job_wide(kind, next(same))
                else:
                    self.tier.deliver(kind, list(same), self)
        store = self.method.store
        if store is not None and store.pending is not None:  # saved while the events were handled (JIT)
            with signals_held():
                store.flush()  # now that the books hold every event of the instant

    def deliver_job_wide(self, kind: str, ev) -> None:
        """A job-wide fault (worker `JOB`): the workers up stop, and are back at the same instant. The
        method hears them as from one event per worker; the record has one row (worker null, `workers`:
        how many). A tier that kills ranks for real (failure.kill) gets one event per worker."""
        if kind == FAIL:  # its recovery, next, brings back the same workers
            self._job_workers = self.trace.up_workers()
        workers = self._job_workers or []
        if workers and self.tier.kill:
            self.tier.deliver(kind, [FailureEvent(ev.time, w, kind) for w in workers], self)
        elif workers and kind == FAIL:
            # what the fault destroyed decides what the method restores from (failures/classes.py)
            fault = fault_class(ev.fault)
            source = restore_source(fault, self.method.restores_from)
            detail = {"trace_time_s": ev.time, "job": True, "workers": len(workers)}
            if ev.fault:
                detail.update(fault=fault.name, restores_from=source)
            self.event(kind, None, detail)
            self.books.counters.count_event(kind, len(workers))
            cc = self.cfg.cluster
            if fault.detection == COLLECTIVE_TIMEOUT and cc.collective_timeout_s > cc.detection_s:
                # a hang is found only when a collective times out, not by the heartbeat restarts charge
                self.clock.charge("stall", self.costs.stall_s(cc.collective_timeout_s - cc.detection_s))
            self.method.on_job_fault(workers, source)
        elif workers:
            self.event(kind, None, {"trace_time_s": ev.time, "job": True, "workers": len(workers)})
            self.books.counters.count_event(kind, len(workers))
            self.method.on_recoveries(workers)

    def train(self) -> None:
        books, trace, clock, method, training = self.books, self.trace, self.clock, self.method, self.training
        progress = self.progress = Progress(self.cfg.trainer, self.max_steps, quiet=not self.is_main, logger=log)
        eval_every = self.eval_every
        if not self.resumed:
            self.start_job()
        while self.step < self.max_steps:
            self.check_progress()
            self.apply_due_events()
            self.tier.sync()  # torchft: the quorum shows who is alive; the method hears it
            plan = method.plan(self.step)
            if not plan.n_computing:  # nobody can compute: wait for the next event, the trace's or the method's
                if self.wait_for_an_event(plan):
                    continue
                break  # a node trace's hard stop: nothing is left to happen before it
            cost = method.step_cost(plan)
            if self.event_driven and (quiet := self.quiet_steps_ahead(plan, cost.total)) > 0:
                self.book_quiet_steps(plan, cost, quiet)
                continue
            end = clock.now + cost.total
            t_fail, t_own = trace.next_failure_time(), method.timer_s()
            if (
                t_own is not None and t_own < end and (t_fail is None or t_own < t_fail)
            ):  # an instant's trace events first
                method.on_timer(plan, max(0.0, t_own - clock.now))
                continue
            if t_fail is not None and t_fail < end:
                books.counters.interrupted_steps += 1
                method.interrupted(plan, t_fail - clock.now)
                continue
            if trace.stop_s is not None and end > trace.stop_s:
                break  # a node trace's hard stop: this step would not complete
            try:
                numbers = training.compute(plan, method, self.step)
            except StepNotCommitted as e:  # torchft: a peer died mid-step; the next quorum shows it
                log.warning("step %d not applied: %s", self.step, e)
                self.event("uncommitted", detail={"reason": str(e)})
                continue
            self.presence.check_step(self.step, plan.n_computing)
            books.window.commit(clock.now, end - clock.now)
            clock.commit_step(self.step, cost)
            books.tokens_processed += numbers.pop("tokens")
            alive = self.alive
            row = {
                "step": self.step,
                "tokens": (self.step + 1) * self.tokens_per_step,
                **numbers,
                "sim_time_s": clock.now,
                "wall_time_s": time.perf_counter() - self.wall_start,
                "alive": alive,
                "degraded": plan.degraded,
                "step_cost_s": cost.total,
            }
            self.records.metric(row)
            self.step += 1
            with signals_held():  # REFT's snapshot is a torch.save too
                method.after_step(self.step - 1)  # the state is now that before step self.step
            progress.update(
                self.step, row.get("loss"), clock.now, self.tokens_per_step, alive, tflops_s=training.achieved_tflops_s
            )
            evaluated = (
                bool(eval_every) and self.step % eval_every == 0 and self.step < self.max_steps and self.run_eval()
            )
            self.end_of_boundary(evaluated)
        progress.close()
        self.run_eval()

    def check_progress(self) -> None:
        """A loop that keeps coming back to the same step, trace position and clock is stuck: say so."""
        here = (self.step, self.trace.position, self.clock.now)
        self._idle = self._idle + 1 if here == self._last_place else 0
        self._last_place = here
        if self._idle >= MAX_IDLE_ATTEMPTS:
            raise NoProgress(
                f"step {self.step} cannot make progress: {self._idle + 1} attempts in a row left the "
                f"simulated clock at {self.clock.now!r} s and the trace at event {self.trace.position} "
                f"(next failure at {self.trace.next_failure_time()!r} s)"
            )

    def wait_for_an_event(self, plan) -> bool:
        """Nobody can compute: the clock stalls to the next event, the trace's or the method's
        timer. False when nothing is left to happen before a node trace's hard stop."""
        trace, clock, method = self.trace, self.clock, self.method
        nxt, own = trace.next_event_time(), method.timer_s()
        if own is not None and (nxt is None or own < nxt):
            clock.charge("stall", max(0.0, own - clock.now))
            method.on_timer(plan, 0.0)
            return True
        if nxt is None:
            if trace.stop_s is not None:
                return False
            raise RuntimeError("every worker is down and the trace has no recovery left")
        clock.charge("stall", max(0.0, nxt - clock.now))
        return True

    def quiet_steps_ahead(self, plan, step_s: float) -> int:
        """How many steps from this one on change nothing but the books: the method's quiet steps
        (`Method.quiet_steps`), up to the step the next trace event falls in (a failure interrupts
        it, so it is left out; a recovery takes effect after it), the method's timer, a node
        trace's stop, an evaluation, a harness checkpoint and the end of the run. A time limit
        within a millionth of a step of a step boundary leaves that step to be taken alone,
        compared with the clock as in a step-by-step run."""
        if step_s <= 0:
            return 0
        quiet = self.method.quiet_steps(plan, step_s)
        if not quiet:
            return 0
        limits = [quiet, self.max_steps - self.step, self.steps_in_time(self.clock.now, step_s)]
        if self.eval_every and self.training.numerics:
            limits.append(steps_before_multiple(self.step, self.eval_every))
        if self.resume_store is not None and self.resume_every:
            limits.append(steps_before_multiple(self.step, self.resume_every))
        count = int(min(limits))
        # time the method charges between these steps (REFT's snapshots) ends them later: counted
        # as if all of it came first, the run ends no later than step by step; the steps this
        # leaves out are booked by the next pass
        charged = self.method.charged_in_quiet_run(self.step, count) if count > 1 else 0.0
        return int(min(count, self.steps_in_time(self.clock.now + charged, step_s))) if charged else count

    def steps_in_time(self, now: float, step_s: float) -> float:
        """Steps of `step_s` seconds from `now` on before the trace's next event (the step a failure
        falls in left out, the one a recovery falls in kept), the method's timer or a node trace's stop."""
        trace = self.trace
        return min(
            steps_ending_by(now, step_s, trace.next_failure_time()),
            steps_starting_before(now, step_s, trace.next_event_time()),
            steps_ending_by(now, step_s, self.method.timer_s()),
            steps_ending_by(now, step_s, trace.stop_s),
        )

    def book_quiet_steps(self, plan, cost, count: int) -> None:
        """`count` steps of `plan`'s shape and equal `cost`, booked at once: the clock, the window,
        the tokens, the method's step counters, one metrics row with the steps' range."""
        books, clock, first, training, progress = self.books, self.clock, self.step, self.training, self.progress
        assert isinstance(training, ShapeOnlyState) and progress is not None, "an event-driven loop without numerics"
        self.presence.check_step(first, plan.n_computing, count)
        books.window.commit(clock.now, count * cost.total)
        clock.commit_steps(first, count, cost)
        numbers = training.book_steps(first, count)
        books.tokens_processed += numbers.pop("tokens")
        self.method.book_quiet(plan, count)
        self.step += count
        alive = self.alive
        self.records.metric(
            {
                "step": self.step - 1,
                "first_step": first,
                "tokens": self.step * self.tokens_per_step,
                **numbers,
                # the end of the last step: with what the method charges between the steps, which
                # after_quiet_steps books below (the charge after the last step comes after its row)
                "sim_time_s": clock.now + self.method.charged_in_quiet_run(first, count),
                "wall_time_s": time.perf_counter() - self.wall_start,
                "alive": alive,
                "degraded": plan.degraded,
                "step_cost_s": cost.total,
            }
        )
        with signals_held():
            self.method.after_quiet_steps(
                first, self.step - 1, cost.total
            )  # as after_step: a method's periodic work in the run
        progress.update(self.step, None, clock.now, self.tokens_per_step, alive)
        self.end_of_boundary(evaluated=False)

    def start_job(self) -> None:
        """Before the first step of a fresh run: under a node trace the nodes provision and the
        job starts on them; the method's start (an initial checkpoint); the window opens."""
        if self.trace.start_s is not None:
            self.clock.charge("stall", self.trace.start_s + self.method.job_start_s())
            if self.trace.initial_down:
                self.method.begin_without(sorted(self.trace.initial_down))
        with signals_held():  # REFT's snapshot is a torch.save too
            self.method.start()
        self.end_of_boundary(evaluated=False)
        self.books.window.open(self.clock.now)

    def end_of_boundary(self, evaluated: bool) -> None:
        """Between two steps, after all end-of-step work: write the checkpoint saved at this
        boundary (its books are now complete) and refresh summary.json's progress fields."""
        store = self.method.store
        with signals_held():
            wrote = store.flush() if store is not None else False
            every = self.resume_every
            if (
                self.resume_store is not None
                and every
                and self.step % every == 0
                and 0 < self.step < self.max_steps
                and not (store is not None and self.step in store.saved)
            ):
                self.resume_store.save(self.step)  # not charged: the harness's safety, not the method's
                wrote = self.resume_store.flush() or wrote
        if wrote or evaluated or time.perf_counter() - self._summary_at > SUMMARY_EVERY_S:
            self.records.summary(self.summary("running"))
            self._summary_at = time.perf_counter()

    def run_eval(self) -> bool:
        loss = self.training.evaluate()
        if loss is None:  # numerics off
            return False
        self.books.final_val_loss = loss
        self.records.eval(
            {
                "step": self.step,
                "sim_time_s": self.clock.now,
                "tokens": self.step * self.tokens_per_step,
                "val_loss": loss,
                "val_ppl": math.exp(loss),
            }
        )
        log.info(
            "step %d  val_loss %.4f  val_ppl %.2f  sim_time %.1fs", self.step, loss, math.exp(loss), self.clock.now
        )
        return True

    # ------------------------------------------------------------------ the record
    def summary(self, status: str, error: Optional[str] = None) -> Dict:
        """summary.json from the parts built so far."""
        sim = self.clock.now
        committed = self.step * self.tokens_per_step
        data = {
            "status": status,
            **identity(self.cfg, self._git_sha, self.run_dir),
            "steps": self.step,
            "tokens_committed": committed,
            "sim_time_s": sim,
            "wall_time_s": time.perf_counter() - self.wall_start,
            "throughput_tok_s": committed / sim if sim > 0 else None,
            # this machine, wall clock, this segment's computed steps (evals and checkpoints excluded)
            "achieved_tflops_s": None,
            "mfu": None,
            "updated_at": now_iso(),
            "resumes": self.resumes,
            "config_sha256": self.config_sha256,
            **self.books.summary(),
        }
        if self.built("trace"):
            data.update(self.books.trace_summary())
        if self.built("training"):
            data.update(self.training.summary())
        if self.built("costs"):
            data["clock"] = clock_summary(self.timing, self.costs, self.cfg.hardware, self.n_workers)
            data["memory"] = self.timing.memory
            if self.costs.table is not None:
                data["window"] = window_summary(
                    self.books.window, self.trace, self.costs.table, self.step, self.n_workers
                )
        if self.built("method"):
            data.update(self.method.summary())
        data.update(self.tier.summary())
        if error:
            data["error"] = error
        return data

    def run(self) -> Dict:
        """Train and write the record; summary.json says `failed` if anything goes wrong
        (an exception, a full disk, SIGTERM/SIGHUP/Ctrl-C), with the reason."""
        try:
            with signals_end_the_run():
                try:
                    self.setup()
                    with heap_frozen(not self.training.numerics):
                        self.train()
                    summary = self.summary("ok")
                    if not self.cfg.method.get("variant"):
                        check_goodput(summary.get("window"))  # credited work never exceeds the ideal
                    self.records.summary(summary)
                    self.records.close()
                except BaseException as e:
                    if self.progress is not None:
                        self.progress.close()  # give the console back (and its log handlers) before the traceback
                    if not (self.cfg.resume and not self.resumed and isinstance(e, ConfigError)):
                        self._record_failure(e)  # a refused resume leaves the folder's record as it was
                    left = (
                        None
                        if self.is_main
                        else close_a_record_left_behind(self.tier, self._records_if_built(), self._record_failure)
                    )
                    if left is not None:
                        raise left from None
                    raise
        finally:
            if self._locked:
                runlock.release(self.run_dir)
                self._locked = False
            self.tier.shutdown()
        log_done(log, summary, self.run_dir)
        return summary

    def _record_failure(self, e: BaseException) -> None:
        """Leave summary.json `failed` with the reason, even on a full disk."""
        record_failure(self._records_if_built(), lambda error: self.summary("failed", error=error), e, self.run_dir)

    def _records_if_built(self) -> Optional[RunRecords]:
        return self.records if self.built("records") else None


@contextlib.contextmanager
def heap_frozen(enabled: bool):
    """Keep the objects that exist before the loop (torch, transformers, the model, the configs)
    out of the garbage collector's passes while it runs (gc.freeze; both calls are O(1)). A
    numerics-free loop builds a plan of every worker at every event: at 2,048 workers the
    collector's full passes over the old heap took 20 s of a 23 s loop (2.7 s frozen)."""
    if not enabled:
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
