"""Varuna as the Oobleck artifact's simulator books a failure (docs/ARTIFACT.md, quirks 2-4).

Our checkpoint-restart on the survivors (`restart_on=survivors`, numerics off), restarting as the
artifact does (restarts.py), with its checkpoint booking as overrides:

- a removal un-credits the steps since the last good checkpoint at once, and training goes on
  with the old configuration until the restart completes;
- a restart that completes during a checkpoint write starts the new configuration at once;
- a checkpoint counts as failed when a removal is queued before its completion, twice its write
  time after the step (the artifact knows its trace's removals in advance); with
  `storage_order` the test is the artifact's own walk of its event heap in storage order,
  answered by a replay of that heap (queue.py); a failed checkpoint un-credits the last
  `interval` recorded steps and sets the every-`interval` cadence back by `interval`;
- `rollback=false` (the spot-instance evaluation's `no_small_model_fallback`, V:267-268): a
  removal and a failed checkpoint un-credit nothing and every checkpoint counts as good.

The artifact's own metric is also kept, as it computes it (`artifact_samples_per_s` in
summary.json; `SeriesLedger`): its two rate series, which a failed checkpoint with fewer than 10
recorded steps misaligns, so that its un-crediting and its average then read other steps'
entries. Our window metric is the model's: credited steps over the window.
"""

from collections import deque
from typing import Deque, List, Optional

from ..failures.nodes import parse_rows
from ..methods.checkpoint import CheckpointRestart
from ..methods.intervals import steps_before_multiple
from ..plan import Plan, resplit_plan
from ..timing.clock import StepCost
from .queue import REMOVE, STEP, TIMEOUT, ArtifactQueue, ms
from .restarts import ArtifactRestarts
from .table_clock import TableSteps


class SeriesLedger:
    """The artifact's Varuna performance series (V:1414-1452, V:1222-1241, V:1474-1484, V:1545-1560),
    in whole milliseconds: each completed step appends (previous completion, rate) and (its
    completion, rate), rate = samples per step over the time since the previous completion
    (checkpoint writes and restarts included); a removal zeroes the rates after the last good
    checkpoint's entry (all of them before the first), a failed checkpoint the last 20 (making the
    series longer when it holds fewer)."""

    def __init__(self, samples_per_step: int):
        self.samples_per_step = samples_per_step
        self.xs: List[int] = []
        self.ys: List[float] = []
        self.start_ms: Optional[int] = None
        self.previous_ms = 0
        self.checkpoint_ms: Optional[int] = None  # the last good checkpoint's completion

    def start(self, at_ms: int) -> None:
        if self.start_ms is None:
            self.start_ms = self.previous_ms = at_ms

    def step(self, end_ms: int) -> None:
        rate = self.samples_per_step / ((end_ms - self.previous_ms) / 1000.0)
        self.xs += [self.previous_ms, end_ms]
        self.ys += [rate, rate]
        self.previous_ms = end_ms

    def checkpoint(self, done_ms: int, failed: bool) -> None:
        self.previous_ms = done_ms
        if failed:
            self.ys[-20:] = [0.0] * 20
        else:
            self.checkpoint_ms = done_ms

    def removal(self) -> None:
        if self.checkpoint_ms is None:
            self.ys[:] = [0.0] * len(self.ys)
            return
        last = -1
        for last, (t, _) in enumerate(zip(self.xs, self.ys)):  # noqa: B007 (`last` is read after the loop)
            if t == self.checkpoint_ms:
                break
        self.ys[last + 1 :] = [0.0] * len(self.ys[last + 1 :])

    def samples_per_s(self) -> Optional[float]:
        if self.start_ms is None or not self.xs or self.xs[-1] <= self.start_ms:
            return None
        total = sum((x2 - x1) * y for (x1, _), (x2, y) in zip(*[iter(zip(self.xs, self.ys))] * 2))
        return total / (self.xs[-1] - self.start_ms)


class VarunaArtifact(ArtifactRestarts, CheckpointRestart):
    #: method.variant_options this class reads, with their defaults
    OPTIONS = {"storage_order": True, "rollback": True, "min_nodes": 1}

    @classmethod
    def check_config(cls, method_cfg, cfg) -> Optional[str]:
        """What is wrong with the settings for this variant, in one line (None: nothing)."""
        numerics = cfg.trainer.numerics
        if method_cfg.restart_on != "survivors":
            return "the artifact's Varuna restarts on the survivors: set method.restart_on=survivors"
        if numerics:
            return (
                "the artifact's Varuna un-credits steps no checkpoint holds (a failed checkpoint): "
                "set trainer.numerics=false"
            )
        return super().check_config(method_cfg, cfg)

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        options = {**self.OPTIONS, **(cfg.get("variant_options") or {})}
        self._init_restarts(int(options["min_nodes"]))
        self.storage_order = bool(options["storage_order"])
        self.rollback = bool(options["rollback"])
        self.head_start = 0.0  # a restart that completed during a checkpoint write: its first step began then
        self.completed = 0  # completed steps, rolled back or not: the artifact's checkpoint cadence
        self.recorded: Deque[List] = deque()  # [step, still credited] of the last `interval` completed steps
        self.credit_floor: Optional[int] = None  # a failed checkpoint un-credited below the last good one
        self.queue: Optional[ArtifactQueue] = None  # storage_order: the artifact's own event list
        self.ledger = SeriesLedger(1)  # its samples per step once the clock exists (setup)

    def setup(self) -> None:
        super().setup()
        self.recorded = deque(maxlen=self.interval)
        steps = self.run.costs.steps
        table = steps.table if isinstance(steps, TableSteps) else None
        self.ledger = SeriesLedger(table.samples_per_step if table is not None else 1)

    def start(self) -> None:
        super().start()
        now = self.run.clock.now
        last = {e.worker: e.kind for e in self.run.trace.events if e.time < now}  # in time order
        early = {w for w, kind in last.items() if kind == "fail"}
        # removed during the start-up: not in the first configuration (V:1259-1267), which stops the job
        # when they leave fewer nodes than a pipeline (V:1299-1300)
        self.begin_configuration(early)
        if early and not self.stopped:
            self.nodes_at_restart = self.n - len(self.running_without)  # its restart time follows (V:1294)
        if not self.stopped:
            self.ledger.start(ms(self.run.clock.now))
        trace = self.run.trace
        if self.storage_order:
            if not trace.node_rows:
                raise ValueError(
                    "method.variant_options.storage_order=true replays the artifact's event list: it "
                    "needs a node trace (failure=nodes)"
                )
            names = [name for *_, name in parse_rows(trace.path)]
            self.queue = ArtifactQueue(
                [(t, verb, name) for (t, verb), name in zip(trace.node_rows, names)],
                trace.node_ready_s,
                self.rendezvous_delay_s,
            )
            now = self.run.clock.now
            self.queue.pop_through(now, TIMEOUT)  # the first rendezvous completes: training starts
            if self.stopped:
                self.queue.stopped = True
            else:  # without the nodes removed during it (we hear of those at the first step)
                early = {e.worker for e in trace.events if e.time < now and e.kind == "fail"}
                self._queue_next_step(now, resplit_plan(0, self.n, early | self.down) if early else None)

    def rendezvous_delay_s(self, at: float) -> float:
        """Before the job's first configuration, the restart time; after it, the one for the nodes
        the job restarted on last (restart_s_by_nodes)."""
        if not self.ever_configured or (self.started_at is not None and at < self.started_at):
            return self._first_restart_s()
        return self.restart_s()

    def _first_restart_s(self) -> float:
        return super(CheckpointRestart, self).restart_s()

    # ------------------------------------------------------------ membership
    def on_failures(self, workers: List[int]) -> None:
        self.removal(workers, self.run.trace.last_time())
        self._uncredit_since_checkpoint(workers[0])

    def on_recoveries(self, workers: List[int]) -> None:
        self.nodes_ready(workers, self.run.trace.last_time())

    def _uncredit_since_checkpoint(self, worker: int) -> None:
        run = self.run
        target = self.store.latest_step() if self.store.saved else 0
        if self.credit_floor is not None:
            target = min(target, self.credit_floor)
        if target < run.step and self.rollback:
            self._uncredit_to(target, worker, reason="failure")
        if self.rollback:
            self.ledger.removal()
        self.checkpoint_due = self.cfg.checkpoint_after_failure

    def _uncredit_to(self, step: int, worker: Optional[int], reason: str) -> None:
        """Roll the credited steps back to `step`: a saved checkpoint, or (a failed checkpoint's
        un-crediting) any step; numerics off, the step is the whole state."""
        state = self.store.load(step) if step in self.store.saved else {**self.run.state_dict(), "step": step}
        self.run.restore(state, to_step=step, reason=reason, worker=worker)
        for entry in self.recorded:
            entry[1] = entry[1] and entry[0] < step

    # ------------------------------------------------------------ restarts (restarts.py)
    def removal_heard(self, failed_at: float) -> None:
        if self.queue is not None:
            self.queue.pop_through(failed_at, REMOVE)

    def timed_out(self, due: float) -> None:
        if self.queue is not None:  # one timeout: the others of this instant after its reaction
            self.queue.pop_one_through(due, TIMEOUT)

    def on_timer(self, plan: Optional[Plan], elapsed: float) -> None:
        due = self.timer_s()
        super().on_timer(plan, elapsed)
        if self.queue is not None:
            self.queue.pop_through(due, TIMEOUT)

    def stopped_hook(self) -> None:
        if self.queue is not None:
            self.queue.stopped = True

    def configured(self, due: float) -> None:
        self.ledger.start(ms(due))
        if self.queue is not None:
            self.queue.stopped = False
        self.nodes_at_restart = self.n - len(self.down)
        # the artifact queues the new configuration's first step a whole step after `due` (V:1295): not
        # shortened by the head start of an earlier restart whose first step was lost
        self.head_start = 0.0
        self._queue_next_step(due)
        # a checkpoint write the clock already holds delays only the old configuration's next step
        self.head_start = max(0.0, self.run.clock.now - due)

    # ------------------------------------------------------------ the step
    def plan(self, step: int) -> Plan:
        return Plan(step, {}) if self.stopped else super().plan(step)  # stopped: the loop waits for an event

    def step_cost(self, plan: Plan) -> StepCost:
        carried = self.carried_cost()
        if carried is not None:  # the step a removal did not stop goes on
            return carried
        cost = super().step_cost(plan)
        if self.head_start:
            return StepCost(compute=max(0.0, cost.total - self.head_start))
        return cost

    def quiet_steps(self, plan: Plan, step_s: float) -> Optional[int]:
        """Quiet until the next checkpoint, counted in completed steps; a carried step is an event."""
        if self.carry is not None or self.head_start or self.checkpoint_due:
            return 0
        return steps_before_multiple(self.completed, self.interval)

    def after_quiet_steps(self, plan: Plan, first: int, last: int, step_s: float) -> None:
        count = last + 1 - first
        self.recorded.extend([step, True] for step in range(max(first, first + count - self.interval), first + count))
        self.completed += count
        for i in range(count):  # the clock is at the end of the last of them
            end = self.run.clock.now - (count - 1 - i) * step_s
            self.ledger.step(ms(end))
            if self.queue is not None:
                self.queue.pop_through(end, STEP)
                self._queue_next_step(end)

    def after_step(self, step: int) -> None:
        self.carry, self.head_start = None, 0.0
        self.completed += 1
        self.recorded.append([step, True])
        self.ledger.step(ms(self.run.clock.now))
        if self.queue is not None:
            self.queue.pop_through(self.run.clock.now, STEP)
        if self.completed % self.interval == 0 or self.checkpoint_due:
            self.checkpoint_due = False
            self.save_checkpoint(step + 1)
            self._test_checkpoint(step + 1)
        self._queue_next_step(self.run.clock.now)

    # ------------------------------------------------------------ the checkpoint test
    def _queue_next_step(self, start_s: float, plan: Optional[Plan] = None) -> None:
        """The artifact queues the next step's completion when a step completes (after its
        checkpoint write) or a restart completes, at the configuration of that moment."""
        if self.queue is None:
            return
        plan = plan or self.plan(self.run.step)
        self.queue.push(ms(start_s) + ms(self.step_cost(plan).total), STEP)

    def _test_checkpoint(self, step: int) -> None:
        """The artifact fails a checkpoint when its queue holds a removal before the write's
        completion event, pushed twice the write time after the step: it sees removals to come.
        A failed one un-credits the last `interval` recorded steps and sets the cadence back."""
        _, began, write_s = self.last_write
        if self.queue is not None:
            removal = self.queue.checkpoint_fails(began, write_s)
        else:  # the same test in time order: a removal before the completion, the hard stop's included
            trace = self.run.trace
            nxt = trace.next_failure_time()
            if nxt is None and trace.node_rows and trace.node_rows[-1][1] == "remove":
                nxt = trace.stop_s  # the hard stop's removal is never applied, but it is queued
            removal = nxt is not None and nxt <= began + 2 * write_s
        self.ledger.checkpoint(ms(began) + ms(write_s), failed=removal and self.rollback)
        if not removal or not self.rollback:
            self.credit_floor = None
            return
        self.store.saved.remove(step)
        self.completed = max(0, self.completed - self.interval)
        self.run.event("checkpoint_failed", None, {"step": step})
        credited = sum(1 for _, still in self.recorded if still)
        self._uncredit_to(self.run.step - credited, None, reason="checkpoint_failed")
        self.credit_floor = self.run.step

    def summary(self):
        return {**super().summary(), "artifact_samples_per_s": self.ledger.samples_per_s()}
