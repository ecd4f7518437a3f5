"""Oobleck and Bamboo as the Oobleck artifact's simulators book a removal (docs/ARTIFACT.md), as
subclasses of our methods."""

from typing import List, Optional, Tuple

from ..methods.bamboo import Bamboo
from ..methods.base import resplit_plan
from ..methods.oobleck import Oobleck
from ..plan import Plan
from ..timing.clock import StepCost
from .restarts import ArtifactRestarts


class OobleckArtifact(ArtifactRestarts, Oobleck):
    """Oobleck restarting as the artifact does (restarts.py), with its re-formation time as the
    rendezvous: a step that ends inside the re-formation a removal starts still counts (its event
    keeps its version until the re-formation completes, O:1177-1179), and the nodes that become
    usable while it trains wait for the next removal."""

    OPTIONS = {"min_nodes": 1}

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        options = {**self.OPTIONS, **(cfg.get("variant_options") or {})}
        self._init_restarts(int(options["min_nodes"]))
        self.running_without: List[int] = []

    def start(self) -> None:
        super().start()
        self.begin_configuration()

    def rendezvous_delay_s(self, at: float) -> float:
        return self.reconfigure_stall_s()

    def on_failures(self, workers: List[int]) -> None:
        self.removal(workers, self.run.trace.last_time())

    def on_recoveries(self, workers: List[int]) -> None:
        self.nodes_ready(workers, self.run.trace.last_time())

    def configured(self, due: float) -> None:
        self.counts["reconfigurations"] += 1

    def plan(self, step: int) -> Plan:
        if self.stopped:
            return Plan(step, {})  # the loop waits for an event
        return resplit_plan(step, self.n, set(self.running_without)) if self.running_without else Oobleck.plan(self, step)

    def step_cost(self, plan: Plan) -> StepCost:
        carried = self.carried_cost()
        return carried if carried is not None else super().step_cost(plan)

    def steady_steps(self, plan: Plan, step_s: float) -> Optional[int]:
        """A step that a removal did not stop is an event of its own."""
        return 0 if self.carry is not None else super().steady_steps(plan, step_s)

    def after_step(self, step: int) -> None:
        self.carry = None
        super().after_step(step)


class BambooArtifact(Bamboo):
    """Bamboo's pipelines as the artifact books them (B:1043-1351):

    - the first pipelines take the nodes in the order the artifact's event heap hands them out,
      computed from the trace (heap_order.py), and later re-formations in the order it registered
      them;
    - losing an idle spare, or a node not yet usable, slows the pipelines 1.5x until the next
      re-formation, as any removal while running does (B:1100-1104);
    - every re-formation is a rendezvous with a timeout: a local one (`rebalance_stall_s`) after a
      step when a node holds two stages (B:1345), nothing training meanwhile; a global one
      (`fatal_restart_s`, 30 s, B:212, B:921-927) after a fatal removal, the old pipelines
      training on, slowed no further, un-credited nothing (B:1253);
    - as for Varuna and Oobleck (restarts.py), the first timeout to fire completes the rendezvous
      over every node there (B:1115-1120) and a later one finds no nodes and stops the job; a
      timeout that finds a member removed starts its rendezvous over (B:1123-1134); stopped, a
      node becoming usable opens a global rendezvous.
    """

    spare_loss_slows = True
    #: heap_order: take the first pipelines' nodes in the artifact's heap order (false: the configured orders)
    OPTIONS = {"heap_order": True}

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.heap_order = bool({**self.OPTIONS, **(cfg.get("variant_options") or {})}["heap_order"])
        self.timeouts: List[Tuple[float, str]] = []  # (due, "global" | "local") rendezvous timeouts pending
        self.rendezvous_open = False  # members are being collected: the next timeout completes it
        self.member_left = False  # a node was removed while it collected
        self.stopped = False
        self.trained = False  # a configuration has trained: the window is open
        self.first_order: Optional[List[int]] = None  # the slots in the order the first pipelines take them

    def start(self) -> None:
        super().start()
        trace = self.run.trace
        if trace.path is None or not self.stages or not self.heap_order:
            return
        from .heap_order import node_tie_order

        registered, joined = node_tie_order(trace.path, trace.node_ready_s, self._delay("global"), trace.node_slot_of,
                                            min_nodes=self.stages)
        rest = [w for w in range(self.n) if w not in registered]
        self.node_order = registered + rest
        self.first_order = joined + [w for w in self.node_order if w not in joined]
        self._form_pipelines(self.first_order)
        if not self.pipes:  # fewer nodes than one pipeline: stopped until a node becomes usable (B:1155-1157)
            self.stopped = True
            self.run.event("stopped", None, {"reason": "fewer nodes than one pipeline at the start"})

    def _delay(self, kind: str) -> float:
        own = self.cfg.get("fatal_restart_s") if kind == "global" else self.cfg.rebalance_stall_s
        return self.run.costs.stall_s(self.run.cluster_cfg.restart_s if own is None else own)

    def _open(self, kind: str, at: float) -> None:
        self.timeouts.append((at + self._delay(kind), kind))
        self.rendezvous_open = True

    # ------------------------------------------------------------ membership
    def fall_back(self, worker: int, detail) -> None:
        self.counts["fatal"] += 1
        self.run.event("fatal", worker, {"down": sorted(self.down), **detail})
        self._open("global", self.run.trace.last_time())

    def _pipeline_failure(self, worker: int) -> None:
        if not self.rendezvous_open:
            return super()._pipeline_failure(worker)
        slowed_since = self.fallback_step  # during a rendezvous nothing slows (B:1100)
        super()._pipeline_failure(worker)
        self.fallback_step = slowed_since
        self.member_left = True

    def _reform(self) -> None:
        if not any(kind == "local" for _, kind in self.timeouts):  # a node usable now joins the one pending
            self._open("local", self.run.clock.now)

    def _catch_up(self) -> None:
        """Fire the timeouts the clock passed in a stall before this instant's events."""
        at = self.run.trace.last_time()
        while self.timeouts and min(self.timeouts)[0] < at:
            self.on_timer(None, 0.0)

    def on_failures(self, workers: List[int]) -> None:
        self._catch_up()
        super().on_failures(workers)

    def on_recoveries(self, workers: List[int]) -> None:
        self._catch_up()
        if not self.stopped:
            return super().on_recoveries(workers)
        back = [w for w in workers if self._wait_as_spare(w)]
        if back and not self.rendezvous_open:  # stopped: a node becoming usable opens a rendezvous
            self._open("global", self.run.trace.last_time())

    # ------------------------------------------------------------ timeouts
    def timer_s(self) -> Optional[float]:
        return min(self.timeouts)[0] if self.timeouts else None

    def on_timer(self, plan: Optional[Plan], elapsed: float) -> None:
        """Every timeout due at this instant, in (time, kind) order."""
        self.run.clock.charge("lost_work", elapsed)  # the step in flight is lost
        self.credit = None
        due = min(self.timeouts)[0]
        while self.timeouts and min(self.timeouts)[0] == due:
            self._fire(*min(self.timeouts))

    def _fire(self, due: float, kind: str) -> None:
        self.timeouts.remove((due, kind))
        if not self.rendezvous_open:
            return self._stop(f"a {kind} rendezvous timeout found no nodes: no pipelines")
        if self.member_left:  # a member was removed: this rendezvous starts over
            self.member_left = False
            self.timeouts.append((due + self._delay(kind), kind))
            self.run.event("rendezvous_restarted", None, {"kind": kind, "until": due + self._delay(kind)})
            return
        self.rendezvous_open = False
        # until the first pipelines form, the artifact's own order of that rendezvous (heap_order.py)
        self._form_pipelines(self.node_order if self.trained or self.first_order is None else self.first_order)
        self.counts["rebalances"] += 1
        self.run.event("rebalance", None, {"reason": f"{kind} rendezvous", "pipelines": self.pipes,
                                           "spares": self._spares()})
        if not self.pipes:
            return self._stop("a rendezvous formed no pipeline")
        self.stopped = False
        if not self.trained:  # the artifact's window opens at its first configuration (B:1148-1155)
            self.run.training_starts_at(due)

    def _stop(self, reason: str) -> None:
        self.stopped = True
        self.holds, self.pipes = {}, 0
        self.run.event("stopped", None, {"reason": reason})

    # ------------------------------------------------------------ the step
    def plan(self, step: int) -> Plan:
        if self.stopped or any(kind == "local" for _, kind in self.timeouts):
            return Plan(step, {})  # stopped, or re-forming: the loop waits for the timeout
        return super().plan(step)

    def after_step(self, step: int) -> None:
        self.trained = True
        if not self.rendezvous_open:
            return super().after_step(step)
        if self.credit and self.credit[0] == step:
            self.credit = None
            self.counts["survived_interruptions"] += 1
        if not any(kind == "local" for _, kind in self.timeouts) and self._should_reform():
            self._reform()  # B:1345 during a global rendezvous: the later timeout will stop the job
