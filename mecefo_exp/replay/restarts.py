"""How the artifact's Varuna and Oobleck simulators restart after a removal (docs/ARTIFACT.md).

Both book a membership change the same way (V:1243-1330, O:1023-1099), with their own delay
(Varuna: its restart time; Oobleck: its re-formation time):

- every removal, of a ready node or of one not yet usable, arms a rendezvous timeout `delay`
  later, and none is ever cancelled; a removal also opens a rendezvous, unless one is already
  collecting (the job's start-up included, which collects until it completes);
- training goes on with the old configuration meanwhile; the first timeout to fire completes the
  rendezvous over every node ready then (the nodes that became usable while training waited for
  it) and the step in flight is lost; a timeout that finds no rendezvous forms no pipelines and
  stops the job (`stopped`);
- a configuration of fewer than `min_nodes` (12 in the artifact: one 12-stage pipeline) stops the job too; stopped, the
  next node to become usable opens a rendezvous (V:1312-1314, O:1093-1095), as does a removal;
- a node that becomes usable while the job trains waits for the next rendezvous.

A mixin for subclasses of our methods that keep `running_without` (the configuration's absent
slots) and plan over it. The timeouts themselves (`RendezvousTimeouts`) are also Bamboo's
(pipelines.py), which adds a removed member that starts its rendezvous over.
"""

from __future__ import annotations

import abc
from typing import Iterable, List, Optional, Tuple

from ..methods.own_timer import OwnTimer
from ..plan import Plan
from ..timing.clock import StepCost


class RendezvousTimeouts(OwnTimer):
    """The artifact's rendezvous timeouts, as its three simulators fire them (V:1259-1298,
    O:1023-1081, B:1106-1160): none is ever cancelled; the timeouts due at one instant fire one by
    one in (time, kind) order; one that finds no rendezvous collecting forms nothing
    (`found_no_rendezvous`); one that finds a member of its rendezvous removed starts it over
    (`member_left`: only Bamboo leaves a removed member in a rendezvous, B:1123-1134); otherwise it
    completes the rendezvous (`rendezvous_complete`)."""

    def _init_timeouts(self) -> None:
        self.timeouts: List[Tuple[float, str]] = []  # (due, "global" | "local") pending
        self.rendezvous_open = False  # a rendezvous is collecting: the next timeout completes it
        self.member_left = False  # a member was removed while it collected: its timeout starts it over

    def arm(self, due: float, kind: str = "global") -> None:
        self.timeouts.append((due, kind))

    def timer_s(self) -> Optional[float]:
        return min(self.timeouts)[0] if self.timeouts else None

    def _catch_up(self, at: float) -> None:
        """Fire the timeouts the clock passed in a stall before an event at `at` is heard."""
        while self.timeouts and min(self.timeouts)[0] < at:
            self.on_timer(None, 0.0)

    def fire_due(self) -> bool:
        """Fire every timeout due at the earliest instant; True when all of them only started
        their rendezvous over."""
        due = min(self.timeouts)[0]
        restarts_only = True
        while self.timeouts and min(self.timeouts)[0] == due:
            timeout = min(self.timeouts)
            self.timeouts.remove(timeout)
            restarts_only = self._fire(*timeout) and restarts_only
        return restarts_only

    def _fire(self, due: float, kind: str) -> bool:
        """One timeout; True when it only started its rendezvous over."""
        self.timed_out(due)
        if not self.rendezvous_open:
            self.found_no_rendezvous(due, kind)
            return False
        if self.member_left:
            self.member_left = False
            until = due + self.timeout_delay_s(kind, due)
            self.arm(until, kind)
            self.run.event("rendezvous_restarted", None, {"kind": kind, "until": until}, at=(self.run.step, due))
            return True
        self.rendezvous_open = False
        self.rendezvous_complete(due, kind)
        return False

    # hooks for the subclass
    @abc.abstractmethod
    def timeout_delay_s(self, kind: str, at: float) -> float:
        """The delay of a `kind` timeout armed at `at`."""

    def timed_out(self, due: float) -> None:  # noqa: B027 (a hook: most policies do nothing)
        """A timeout fired at `due` (before it completes or stops anything)."""

    @abc.abstractmethod
    def found_no_rendezvous(self, due: float, kind: str) -> None:
        """A `kind` timeout fired at `due` and found no rendezvous to complete."""

    @abc.abstractmethod
    def rendezvous_complete(self, due: float, kind: str) -> None:
        """A `kind` rendezvous completed at `due`: the system's new configuration."""


class ArtifactRestarts(RendezvousTimeouts):
    def _init_restarts(self, min_nodes: int) -> None:
        self.min_nodes = min_nodes  # fewer nodes form no pipeline (12 in the artifact, V:1326-1332)
        self._init_timeouts()
        self.stopped = False  # no pipelines: nothing trains until a rendezvous completes with enough nodes
        self.stopped_at: Optional[float] = None  # when the job last stopped
        self.configured_at: Optional[float] = None  # when the last configuration completed (the start's included)
        self.started_at: Optional[float] = None  # when the job's first rendezvous completed
        self.ever_configured = False  # a configuration of enough nodes has completed (the window opens then)
        self.carry: Optional[float] = None  # seconds left of the step a removal did not stop
        self.ready: List[int] = []  # usable nodes not in the configuration: they join the next rendezvous
        self.opened_by_ready: Optional[Tuple[float, float]] = None  # (instant, due) of a rendezvous a ready node opened

    @abc.abstractmethod
    def rendezvous_delay_s(self, at: float) -> float:
        """The rendezvous time of a removal or ready node at `at`: the subclass's restart (Varuna) or
        re-formation (Oobleck) time."""

    def timeout_delay_s(self, kind: str, at: float) -> float:
        return self.rendezvous_delay_s(at)

    # ------------------------------------------------------------ the start
    def begin_configuration(self, removed: Iterable[int] = ()) -> None:
        """The job's first rendezvous has completed (the loop charged it): stopped if too few nodes;
        `removed`: nodes removed during it (heard later), not in it either."""
        self.configured_at = self.started_at = self.run.clock.now
        self.running_without = sorted(self.down | set(removed))
        if self.n - len(self.running_without) < self.min_nodes:
            self.stopped, self.stopped_at = True, self.run.clock.now
            self.run.event("stopped", None, {"reason": f"fewer than {self.min_nodes} nodes at the start"})
        else:
            self.ever_configured = True

    # ------------------------------------------------------------ membership
    def removal(self, workers: List[int], failed_at: float) -> None:
        """Removals of one instant: each arms its own timeout."""
        self._catch_up(failed_at)
        self.removal_heard(failed_at)
        for worker in workers:
            self.down.add(worker)
            if worker in self.ready:
                self.ready.remove(worker)
            due = failed_at + self.rendezvous_delay_s(failed_at)
            if (
                self.opened_by_ready is not None
                and self.opened_by_ready == (failed_at, due)
                and (due, "global") in self.timeouts
            ):
                # a node became usable at this very instant while the job was stopped and was heard
                # first here; the artifact hears the removal first (kind 2 before 4): the removal opens
                # the rendezvous and arms this timeout, the node only joins it (V:1315-1316, O:1096-1097)
                self.opened_by_ready = None
                continue
            self.arm(due)
        if self.configured_at is None or failed_at >= self.configured_at:
            self.rendezvous_open = True  # else it joined the rendezvous that has completed since

    def nodes_ready(self, workers: List[int], ready_at: float) -> None:
        self._catch_up(ready_at)
        fresh = [w for w in workers if w in self.down and w not in self.ready]
        self.ready += fresh
        for w in fresh:
            self.run.event("waiting", w, {"stopped": self.stopped})
        # heard late (ready during a step in flight that a timeout then stopped), they found the job
        # training and only wait (V:1311-1318, O:1093-1099); a timeout at their own instant comes
        # after them (kind 4 before 5)
        stopped_then = self.stopped and (self.stopped_at is None or ready_at > self.stopped_at)
        if fresh and stopped_then and not self.rendezvous_open:
            self.rendezvous_open = True
            due = ready_at + self.rendezvous_delay_s(ready_at)
            self.arm(due)
            self.opened_by_ready = (ready_at, due)

    def _ready_by(self, t: float) -> List[int]:
        """Nodes the trace makes usable by `t` that the loop has not handed over yet (their
        recovery falls inside the step in flight): they are ready when the rendezvous completes."""
        trace = self.run.trace
        out = []
        for ev in trace.events[trace.position :]:
            if ev.time > t:
                break
            if ev.kind == "recover" and ev.worker in self.down:
                out.append(ev.worker)
        return out

    # ------------------------------------------------------------ timeouts
    def on_timer(self, plan: Optional[Plan], elapsed: float) -> None:
        """The timeouts due at one instant: the first completes the open rendezvous (if any), every
        other finds none and stops the job (removals of one instant: one timeout each)."""
        self.run.clock.charge("lost_work", elapsed)  # the step in flight is lost
        self.carry = None
        self.fire_due()
        # stopped, with timeouts a stall (a checkpoint write) passed still pending: each in turn, now (the loop,
        # waiting for the next event, would not come back for them)
        while self.stopped and self.timeouts and min(self.timeouts)[0] < self.run.clock.now - 1e-9:
            self.fire_due()

    def found_no_rendezvous(self, due: float, kind: str) -> None:
        if not self.stopped:  # stopped already: it stays so (V:1299-1300)
            self._stop("a rendezvous timeout found no rendezvous: no pipelines", due)

    def rendezvous_complete(self, due: float, kind: str) -> None:
        self.configured_at = due
        for w in self.ready + [w for w in self._ready_by(due) if w not in self.ready]:
            self.down.discard(w)
        self.ready = []
        self.running_without = sorted(self.down)
        if self.n - len(self.down) < self.min_nodes:
            self._stop(f"fewer than {self.min_nodes} nodes: no pipelines", due)
            return
        self.stopped = False
        if not self.ever_configured:  # the artifact's window starts at the first configuration
            self.ever_configured = True
            self.run.training_starts_at(due)
        self.configured(due)
        detail = {"from_step": self.run.step, "running_without": self.running_without}
        self.run.event("restart", None, detail, at=(self.run.step, due))

    def _stop(self, reason: str, at: float) -> None:
        self.stopped, self.stopped_at = True, at
        self.stopped_hook()
        self.run.event("stopped", None, {"reason": reason}, at=(self.run.step, at))

    # hooks for the subclass
    def removal_heard(self, failed_at: float) -> None:
        """A removal at `failed_at`, after the timeouts before it."""

    def configured(self, due: float) -> None:
        """A rendezvous completed at `due` with enough nodes."""

    def stopped_hook(self) -> None:
        """The job stopped."""

    # ------------------------------------------------------------ the step
    def interrupted(self, plan: Plan, elapsed: float) -> None:
        self.run.clock.charge("compute", elapsed)  # the artifact lets the step go on under the old configuration
        self.carry = self.step_cost(plan).total - elapsed

    def carried_cost(self) -> Optional[StepCost]:
        return StepCost(compute=self.carry) if self.carry is not None else None
