"""Oobleck and Bamboo as the Oobleck artifact's simulators book a removal (docs/ARTIFACT.md), as
subclasses of our methods."""

from typing import List, Optional, Tuple

from ..methods.bamboo import Bamboo
from ..methods.oobleck import Oobleck
from ..plan import Plan, resplit_plan
from ..timing.clock import StepCost
from .bamboo_pipelines import BambooPipelines
from .restarts import ArtifactRestarts, RendezvousTimeouts


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
        return (
            resplit_plan(step, self.n, set(self.running_without)) if self.running_without else Oobleck.plan(self, step)
        )

    def step_cost(self, plan: Plan) -> StepCost:
        carried = self.carried_cost()
        return carried if carried is not None else super().step_cost(plan)

    def quiet_steps(self, plan: Plan, step_s: float) -> Optional[int]:
        """A step that a removal did not stop is an event of its own."""
        return 0 if self.carry is not None else super().quiet_steps(plan, step_s)

    def after_step(self, step: int) -> None:
        self.carry = None
        super().after_step(step)


class BambooArtifact(RendezvousTimeouts, BambooPipelines):
    """Bamboo's pipelines as the artifact books them (B:1043-1351):

    - the first pipelines take the nodes in the order the artifact's event heap hands them out,
      computed from the trace (heap_order.py), and later re-formations in the order it registered
      them;
    - losing an idle spare, or a node not yet usable, slows the pipelines 1.5x until the next
      re-formation, as any removal while running does (B:1100-1104);
    - every re-formation is a rendezvous with a timeout: a local one (`rebalance_stall_s`) after a
      step when a node holds two stages (B:1345), nothing training meanwhile; a global one
      (`restart_s`, 30 s, B:212, B:921-927) after a fatal removal, the old pipelines
      training on, slowed no further, un-credited nothing (B:1253);
    - as for Varuna and Oobleck (restarts.py, the same timeouts), the first timeout to fire
      completes the rendezvous over every node there (B:1115-1120) and a later one finds no nodes
      and stops the job; a timeout that finds a member removed starts its rendezvous over
      (B:1123-1134); stopped, a node becoming usable opens a global rendezvous.
    """

    spare_loss_slows = True
    #: the artifact looks for the node holding the predecessor's stage and, when none does (a fatal
    #: removal of this rendezvous took it), does nothing (B:1074-1094)
    orphan_stage_is_fatal = False
    #: heap_order: take the first pipelines' nodes in the artifact's heap order (false: the configured orders)
    OPTIONS = {**BambooPipelines.OPTIONS, "heap_order": True}

    @classmethod
    def check_config(cls, m, cfg) -> Optional[str]:
        """The artifact's Bamboo is its pipelines: our ring has no artifact to replay."""
        if {**cls.OPTIONS, **(m.variant_options or {})}["pipeline_stages"] is None:
            return (
                f"{cls.__name__} replays the artifact's pipelines: it needs method.variant_options.pipeline_stages "
                "(or method.variant=mecefo_exp.replay.bamboo_pipelines:BambooPipelines for our ring)"
            )
        return super().check_config(m, cfg)

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.heap_order = bool({**self.OPTIONS, **(cfg.variant_options or {})}["heap_order"])
        self._init_timeouts()
        self.stopped = False
        self.trained = False  # a configuration has trained: the window is open
        self.first_order: Optional[List[int]] = None  # the slots in the order the first pipelines take them
        self.first_formed_at: Optional[float] = None  # the first rendezvous, started over, completes then
        self.placed: set = set()  # slots registered (heap_order.py) but not yet usable: their place is kept
        self.waiting_count = 0  # the artifact's num_workers_waiting: a count no removal lowers
        self.removed_unusable: set = set()  # slots of the removals being handled whose node was not usable yet
        self.no_stage_count = False  # a rendezvous completed with no pipeline: the artifact's num_stages is 0

    def start(self) -> None:
        super().start()
        trace = self.run.trace
        if trace.path is None or not self.stages or not trace.node_slot_of:
            return
        from .heap_order import first_formation

        # heap_order=false: the same heap with the ties of one instant broken by slot (the check of
        # docs/ARTIFACT.md against a copy of the artifact with that tie-break); an order typed by hand wins
        registered, joined, formed_at = first_formation(
            trace.path,
            trace.node_ready_s,
            self._delay("global"),
            trace.node_slot_of,
            min_nodes=self.stages,
            ties_by_slot=not self.heap_order,
        )
        options = {**self.OPTIONS, **(self.cfg.variant_options or {})}
        if self.heap_order or options["node_order"] is None:
            self.node_order = registered + [w for w in range(self.n) if w not in registered]
            self.placed = set(registered) & self.down
        if self.heap_order or options["start_order"] is None:
            self.first_order = joined + [w for w in self.node_order if w not in joined]
        else:
            self.first_order = list(self.start_order)
        self._form_pipelines(self.first_order)
        if not self.pipes:  # fewer nodes than one pipeline: stopped until a node becomes usable (B:1155-1157)
            self.stopped = True
            self.run.event("stopped", None, {"reason": "fewer nodes than one pipeline at the start"})
        elif formed_at is not None and formed_at > self.run.clock.now + 1e-9:
            # a member was removed by the instant its timeout fired (B:1123-1134): the first rendezvous
            # starts over, and its timeout, not the start-up, forms the first pipelines
            self.holds, self.pipes = {}, 0
            self.stopped = self.rendezvous_open = True
            self.arm(formed_at, "global")
            self.first_formed_at = formed_at
            self.run.event("rendezvous_restarted", None, {"kind": "global", "until": formed_at})

    def _delay(self, kind: str) -> float:
        own = self.cfg.restart_s if kind == "global" else self.cfg.rebalance_stall_s
        return self.run.costs.stall_s(self.run.cluster_cfg.restart_s if own is None else own)

    def timeout_delay_s(self, kind: str, at: float) -> float:
        return self._delay(kind)

    def _open(self, kind: str, at: float) -> None:
        """A rendezvous starts: it collects the nodes there now, afresh (B:1107-1120), and arms its timeout."""
        self.arm(at + self._delay(kind), kind)
        self.rendezvous_open = True
        self.member_left = False

    # ------------------------------------------------------------ membership
    def fatal_removal(self, worker: int, detail) -> None:
        """Not the harness's fall-back to the checkpoint: a global rendezvous opens (B:1066, B:1253)."""
        self.counts["fatal"] += 1
        self.holds.pop(worker, None)  # the removed node leaves the artifact's map with its stages (B:1066)
        self.run.event("fatal", worker, {"down": sorted(self.down), **detail})
        self._open("global", self.run.trace.last_time())

    def _predecessor(self, pipe: int, stage: int) -> Tuple[int, int]:
        """A timeout that found no rendezvous sets the artifact's stage count to 0 (B:1195-1214), and the
        nodes keep their stages: stage 0's predecessor is then (pipe, -1) (B:1081-1083), held by nobody."""
        if self.no_stage_count and stage == 0:
            return (pipe, -1)
        return super()._predecessor(pipe, stage)

    def _pipeline_failure(self, worker: int) -> None:
        if not self.rendezvous_open and not self.stopped:
            return super()._pipeline_failure(worker)
        slowed_since = self.fallback_step  # during a rendezvous, or stopped, nothing slows (B:1100)
        collecting, fatal = self.rendezvous_open, self.counts["fatal"]
        super()._pipeline_failure(worker)
        self.fallback_step = slowed_since
        member = worker not in self.removed_unusable  # a rendezvous collects usable nodes only (B:1116-1119)
        if collecting and member and self.counts["fatal"] == fatal:  # a member of the rendezvous collecting left
            self.member_left = True

    def _reform(self) -> None:
        if not any(kind == "local" for _, kind in self.timeouts):  # a node usable now joins the one pending
            self._open("local", self.run.clock.now)

    def on_failures(self, workers: List[int]) -> None:
        self._catch_up(self.run.trace.last_time())
        self.placed.difference_update(workers)
        self.removed_unusable = self.down.intersection(workers)  # removed before its node was usable
        super().on_failures(workers)

    def _wait_as_spare(self, worker: int) -> bool:
        """A node keeps the place it was registered in (the artifact's node map is in the order it
        popped the additions, B:1043-1045), not the place its readiness was heard in.

        A node usable while the pipelines train counts as waiting (B:1174-1175); the count is set
        again only when a rendezvous completes (B:1183-1215): removing a waiting node, a spare, does
        not lower it (B:1059-1105), so a lost spare still counts towards another pipeline."""
        placed = worker in self.placed
        self.placed.discard(worker)
        order = list(self.node_order)
        if not super()._wait_as_spare(worker):
            return False
        self.waiting_count += 1
        if placed:
            self.node_order = order
        return True

    def _form_pipelines(self, order: List[int]) -> None:
        super()._form_pipelines(order)
        self.waiting_count = len(self._spares()) if self.stages else 0

    def _should_reform(self) -> bool:
        doubled = sum(1 for held in self.holds.values() if len(held) > 1)
        active = self.stages * self.pipes - doubled
        waiting = self.waiting_count
        if doubled and (waiting >= doubled or 2 * doubled / active > 0.05):
            return True
        return (active + waiting) // self.stages > self.pipes

    def on_recoveries(self, workers: List[int]) -> None:
        self._catch_up(self.run.trace.last_time())
        if not self.stopped:
            return super().on_recoveries(workers)
        back = [w for w in workers if self._wait_as_spare(w)]
        if back and not self.rendezvous_open:  # stopped: a node becoming usable opens a rendezvous
            self._open("global", self.run.trace.last_time())

    # ------------------------------------------------------------ timeouts (restarts.py)
    def on_timer(self, plan: Optional[Plan], elapsed: float) -> None:
        """Every timeout due at this instant, in (time, kind) order. The step in flight is lost when
        one completes a rendezvous or stops the job (a new rendezvous version, B:1140); when all of
        them only start their rendezvous over (B:1123-1134) it goes on."""
        restarts_only = self.fire_due()
        if restarts_only and plan is not None and plan.computing_workers:
            return Bamboo.interrupted(self, plan, elapsed)
        self.run.clock.charge("lost_work", elapsed)
        self.credit = None

    def _fire(self, due: float, kind: str) -> bool:
        if due == self.first_formed_at and self.rendezvous_open:  # heap_order.py replayed its restarts already
            self.member_left, self.first_formed_at = False, None
        return super()._fire(due, kind)

    def found_no_rendezvous(self, due: float, kind: str) -> None:
        # the nodes keep the stages they held (B:1183-1215 assigns none)
        self._stop(f"a {kind} rendezvous timeout found no nodes: no pipelines", due, keep_stages=True)
        self.no_stage_count = True

    def rendezvous_complete(self, due: float, kind: str) -> None:
        self.no_stage_count = False
        # until the first pipelines form, the artifact's own order of that rendezvous (heap_order.py)
        self._form_pipelines(self.node_order if self.trained or self.first_order is None else self.first_order)
        self.counts["rebalances"] += 1
        detail = {"reason": f"{kind} rendezvous", "pipelines": self.pipes, "spares": self._spares()}
        self.run.event("rebalance", None, detail, at=(self.run.step, due))
        if not self.pipes:
            self._stop("a rendezvous formed no pipeline", due)
            return
        self.stopped = False
        if not self.trained:  # the artifact's window opens at its first configuration (B:1148-1155)
            self.run.training_starts_at(due)

    def _stop(self, reason: str, at: float, keep_stages: bool = False) -> None:
        """Nothing trains. With `keep_stages` (a timeout that found no rendezvous) the nodes keep
        the stages they held, as the artifact's instances keep their coordinates: removing one is
        judged as in training (B:1059-1094), and a fatal one starts a global rendezvous that
        restarts the job."""
        self.stopped = True
        if not keep_stages:
            self.holds, self.pipes = {}, 0
        self.run.event("stopped", None, {"reason": reason}, at=(self.run.step, at))

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
