"""Oobleck and Bamboo as the Oobleck artifact's simulators book a removal (docs/ARTIFACT.md), as
subclasses of our methods."""

from typing import List, Optional

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
    """Bamboo's pipelines as the artifact books them (B:1043-1267):

    - the first pipelines take the nodes in the order the artifact's event heap hands them out,
      computed from the trace (heap_order.py), and later re-formations in the order it registered
      them;
    - losing an idle spare, or a node not yet usable, slows the pipelines 1.5x until the next
      re-formation, as any removal while running does (B:1100-1104);
    - a fatal removal starts a global rendezvous of `fatal_restart_s` (30 s, B:212, B:921-927) while
      the old configuration trains on, slowed no further and un-credited nothing; a removal
      during it starts it over (B:1123-1134); when it completes, the step in flight is lost and
      the pipelines are re-formed over every node there (B:1115-1120);
    - a step that ends during that rendezvous with a node holding two stages starts a local
      re-formation (B:1345) that, once the global one has completed, finds no nodes and stops
      the job (no pipelines) until a node becomes usable.
    """

    spare_loss_slows = True
    #: heap_order: take the first pipelines' nodes in the artifact's heap order (false: the configured orders)
    OPTIONS = {"heap_order": True}

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.heap_order = bool({**self.OPTIONS, **(cfg.get("variant_options") or {})}["heap_order"])
        self.global_due: Optional[float] = None  # a fatal removal's (or a stopped job's) rendezvous completes then
        self.trained = False  # a configuration has trained: the window is open
        self.local_due: Optional[float] = None  # a local re-formation begun during it: stops the job then
        self.stopped = False

    def start(self) -> None:
        super().start()
        trace = self.run.trace
        if trace.path is None or not self.stages or not self.heap_order:
            return
        from .heap_order import node_tie_order

        registered, joined = node_tie_order(trace.path, trace.node_ready_s, self._fatal_s(), trace.node_slot_of)
        rest = [w for w in range(self.n) if w not in registered]
        self.node_order = registered + rest
        self._form_pipelines(joined + [w for w in self.node_order if w not in joined])
        if not self.pipes:  # fewer nodes than one pipeline: stopped until a node becomes usable (B:1155-1157)
            self.stopped = True
            self.run.event("stopped", None, {"reason": "fewer nodes than one pipeline at the start"})

    def _fatal_s(self) -> float:
        own = self.cfg.get("fatal_restart_s")
        return self.run.costs.stall_s(self.run.cluster_cfg.restart_s if own is None else own)

    # ------------------------------------------------------------ the fatal path
    def fall_back(self, worker: int, detail) -> None:
        self.counts["fatal"] += 1
        now = self.run.trace.last_time()
        self.run.event("fatal", worker, {"down": sorted(self.down), "global_rendezvous_until": now + self._fatal_s(),
                                         **detail})
        self.global_due = now + self._fatal_s()

    def _pipeline_failure(self, worker: int) -> None:
        if self.global_due is not None:  # during the global rendezvous: it starts over, nothing slows
            self.holds.pop(worker, None)
            self.global_due = self.run.trace.last_time() + self._fatal_s()
            return
        super()._pipeline_failure(worker)

    def timer_s(self) -> Optional[float]:
        dues = [t for t in (self.global_due, self.local_due) if t is not None]
        return min(dues) if dues else None

    def on_timer(self, plan: Optional[Plan], elapsed: float) -> None:
        self.run.clock.charge("lost_work", elapsed)  # the step in flight is lost
        self.credit = None
        if self.global_due is not None and (self.local_due is None or self.global_due <= self.local_due):
            due, self.global_due = self.global_due, None
            self._form_pipelines(self.node_order)
            if not self.pipes:
                self.stopped = True
                self.run.event("stopped", None, {"reason": "a global rendezvous formed no pipeline"})
                return
            if not self.trained:  # the artifact's window opens at its first configuration (B:1148-1155)
                self.run.training_starts_at(due)
            self.counts["rebalances"] += 1
            self.run.event("rebalance", None, {"reason": "global rendezvous", "pipelines": self.pipes,
                                               "spares": self._spares()})
            return
        self.local_due = None
        self.stopped = True
        self.holds, self.pipes = {}, 0
        self.run.event("stopped", None, {"reason": "a local re-formation found no nodes: no pipelines"})

    def on_recoveries(self, workers: List[int]) -> None:
        if not self.stopped:
            return super().on_recoveries(workers)
        back = [w for w in workers if self._wait_as_spare(w)]
        if back:  # stopped: a node becoming usable starts a rendezvous
            self.stopped = False
            self.global_due = self.run.trace.last_time() + self._fatal_s()

    def after_step(self, step: int) -> None:
        self.trained = True
        if self.global_due is None:
            return super().after_step(step)
        if self.credit and self.credit[0] == step:
            self.credit = None
            self.counts["survived_interruptions"] += 1
        if self.local_due is None and self._should_reform():
            self.local_due = self.run.clock.now + self.run.costs.stall_s(self.cfg.rebalance_stall_s)
