"""Bamboo as the Oobleck authors' simulator runs it on a throughput table: pipelines of
`pipeline_stages` stages with idle spares instead of the ring (B:253, B:1183-1215; docs/ARTIFACT.md).

The alive nodes, in `start_order` at the first formation and `node_order` at every later one (null:
slot order, or with `heap_order` on a node trace the order the Oobleck authors' event heap hands that
trace's nodes out, replay/heap_order.py), fill
floor(alive / stages) pipelines stage by stage; the rest are idle spares. A removed pipeline node's
stage goes to the holder of the previous stage of its pipeline (stage 0 wraps to the last); a
removal is fatal when the removed node or that holder already holds two stages. The first removal
that a holder absorbs starts the fallback slowdown (`method.fallback_slowdown`); after each
completed step the pipelines re-form (`rebalance_stall_s`) when a node holds two stages and the
spares can relieve it or a doubled node is more than 5% of the active ones (2 x doubled / active >
0.05), or when the waiting nodes would complete another pipeline. Losing an idle spare changes
nothing (a subclass may say otherwise: `spare_loss_slows`). A fatal removal goes through the
harness's fall-back (spares for every failed node, pipelines re-formed over all slots). Without
`pipeline_stages` this is our Bamboo's ring.
"""

from typing import Dict, List, Optional, Tuple

from ..methods.bamboo import Bamboo
from ..plan import Plan, resplit_plan
from ..timing.clock import StepCost
from ..timing.clocks import named_clock
from ..timing.steps import Help
from .table_clock import TableSteps


class BambooPipelines(Bamboo):
    #: method.variant_options this class reads, with their defaults
    #: heap_order: with no order given, take a node trace's nodes in the artifact's heap order
    #: (replay/heap_order.py; the scenario presets set it), else in slot order
    OPTIONS = {"pipeline_stages": None, "start_order": None, "node_order": None, "heap_order": False}
    #: whether losing an idle spare starts the fallback slowdown
    spare_loss_slows = False
    #: whether losing a stage whose predecessor no node holds (its node was removed by a fatal
    #: failure whose rendezvous is still collecting) is fatal too
    orphan_stage_is_fatal = True

    @classmethod
    def check_config(cls, m, cfg) -> Optional[str]:
        """The table clock only; the orders list every worker slot once."""
        n = cfg.cluster.n_workers
        options = {**cls.OPTIONS, **(m.variant_options or {})}
        stages = options["pipeline_stages"]
        if stages is None:
            return super().check_config(m, cfg)
        clock = named_clock(cfg.hardware)
        if clock is None or not issubclass(clock, TableSteps):
            return (
                f"method.variant_options.pipeline_stages={stages} needs hardware=table (only the "
                "throughput-table clock times pipelines); or leave it null"
            )
        if not 1 <= stages <= n:
            return f"method.variant_options.pipeline_stages={stages}: must be in [1, cluster.n_workers={n}]"
        for key in ("start_order", "node_order"):
            order = options[key]
            if order is not None and sorted(order) != list(range(n)):
                return f"method.variant_options.{key}: must list each worker slot 0..{n - 1} once (got {list(order)})"
        return super().check_config(m, cfg)

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        options = {**self.OPTIONS, **(cfg.variant_options or {})}
        self.stages: Optional[int] = options["pipeline_stages"]  # None: the ring of all workers
        self.start_order: List[int] = list(options["start_order"] or range(self.n))
        if self.stages:
            self.counts.update(spares_lost=0)
            self.fallback_step: Optional[int] = None  # the step in flight when the fallback slowdown began
            self.slowed_from: Optional[Tuple[int, float]] = None  # (step, its seconds done unslowed) slowed in flight
            self.node_order: List[int] = list(options["node_order"] or range(self.n))
            self._form_pipelines(self.start_order)

    def start(self) -> None:
        super().start()
        trace = self.run.trace
        options = {**self.OPTIONS, **(self.cfg.variant_options or {})}
        if not self.stages or not options["heap_order"] or trace.path is None or not trace.node_slot_of:
            return
        if options["start_order"] is not None and options["node_order"] is not None:
            return
        from .heap_order import node_tie_order

        delay = self.run.costs.stall_s(
            self.cfg.restart_s if self.cfg.restart_s is not None else self.run.cluster_cfg.restart_s
        )
        registered, joined = node_tie_order(
            trace.path, trace.node_ready_s, delay, trace.node_slot_of, min_nodes=self.stages
        )
        if options["node_order"] is None:
            self.node_order = registered + [w for w in range(self.n) if w not in registered]
        if options["start_order"] is None:
            self.start_order = joined + [w for w in self.node_order if w not in joined]
        self._form_pipelines(self.start_order)

    def begin_without(self, workers: List[int]) -> None:
        super().begin_without(workers)
        if self.stages:  # the first pipelines are formed from the nodes there
            self._form_pipelines(self.start_order)

    def on_failures(self, workers: List[int]) -> None:
        if not self.stages:
            return super().on_failures(workers)
        for worker in workers:  # one by one: a removal's stage moves before the next is judged
            self.mark_down(worker)
            self._lose(worker)

    def _lose(self, worker: int) -> None:
        if not self.stages:
            return super()._lose(worker)
        self._pipeline_failure(worker)

    def on_recoveries(self, workers: List[int]) -> None:
        if not self.stages:
            return super().on_recoveries(workers)
        back = [w for w in workers if self._wait_as_spare(w)]  # all of them wait, then one decision
        if back and self.credit is None and self._should_reform():
            self._reform()

    def _wait_as_spare(self, worker: int) -> bool:
        """A new node waits, idle, until a re-formation takes it. The loop hands a recovery over at
        the end of the step it fell in, so the caller decides then, as the Oobleck authors' Bamboo
        simulator does at that step's completion; never inside a step in flight."""
        if not self.rejoins(worker):
            return False
        self.node_order = [w for w in self.node_order if w != worker] + [worker]
        self.run.event("waiting", worker, {"spares": self._spares()})
        return True

    def after_fall_back(self) -> None:
        super().after_fall_back()
        if self.stages:
            self._form_pipelines(self.node_order)

    def _leave_out_down(self) -> None:
        if not self.stages:  # pipelines are formed of the nodes there (_form_pipelines), not a ring
            super()._leave_out_down()

    def _form_pipelines(self, order: List[int]) -> None:
        """Fill floor(alive / stages) pipelines stage by stage in `order`; the rest are spares."""
        alive = [w for w in order if w not in self.down]
        pipes = len(alive) // self.stages
        self.holds: Dict[int, List[Tuple[int, int]]] = {
            w: [(i // self.stages, i % self.stages)] for i, w in enumerate(alive[: pipes * self.stages])
        }
        self.pipes = pipes
        self.table_nodes = len(alive)  # the table counts every usable node, spares included
        self.fallback_step = None

    def _spares(self) -> List[int]:
        return [w for w in range(self.n) if w not in self.down and w not in self.holds]

    def _pipeline_failure(self, worker: int) -> None:
        held = self.holds.pop(worker, [])
        if held:
            pipe, stage = held[0]
            before = self._predecessor(pipe, stage)
            holder = (
                None if len(held) > 1 else next((w for w in self.node_order if before in self.holds.get(w, ())), None)
            )
            if holder is None and len(held) == 1 and not self.orphan_stage_is_fatal:
                self.run.event("stage_dropped", worker, {"stage": [pipe, stage]})
            elif holder is None or len(self.holds[holder]) > 1:  # it held two stages, or its shadow does
                self.holds[worker] = held  # the fall-back re-forms from scratch
                return self.fatal_removal(
                    worker, {"reason": "adjacent failures", "stage": [pipe, stage], "holder": holder}
                )
            else:
                self.holds[holder].append((pipe, stage))
                self.counts["neighbor_assignments"] += 1
                self.run.event("neighbor", worker, {"neighbor": holder, "stage": [pipe, stage]})
        else:
            self.counts["spares_lost"] += 1
            self.run.event("spare_lost", worker, {"spares": self._spares()})
            if not self.spare_loss_slows:
                return  # an idle spare did no work: nothing slows down
        if self.fallback_step is None:
            self.fallback_step = self.run.step

    def fatal_removal(self, worker: int, detail) -> None:
        """A removal no holder can absorb: the harness's fall-back (spares for every failed node, the
        pipelines re-formed over all slots; a subclass may react as another simulator does)."""
        self.fall_back(worker, detail)

    def _predecessor(self, pipe: int, stage: int) -> Tuple[int, int]:
        """The stage whose holder keeps a copy of `stage`'s layers: the one before it, around the pipeline."""
        return (pipe, (stage - 1) % self.stages)

    def _should_reform(self) -> bool:
        doubled = sum(1 for held in self.holds.values() if len(held) > 1)
        active = self.stages * self.pipes - doubled
        waiting = len(self._spares())
        if doubled and (waiting >= doubled or 2 * doubled / active > 0.05):
            return True
        return (active + waiting) // self.stages > self.pipes

    def _reform(self) -> None:
        stall = self.run.costs.stall_s(self.cfg.rebalance_stall_s)
        self.run.clock.charge("stall", stall)
        self._form_pipelines(self.node_order)
        self.counts["rebalances"] += 1
        self.run.event("rebalance", None, {"pipelines": self.pipes, "spares": self._spares(), "stall_s": stall})

    def _pipeline_plan(self, step: int) -> Plan:
        if not self.holds:
            return Plan(step, {})  # fewer nodes than one pipeline: nobody trains until a node arrives
        idle = set(range(self.n)) - set(self.holds)
        work = resplit_plan(step, self.n, idle).work  # the spares' and failed nodes' samples, dealt out
        return Plan(step, work, degraded=self.fallback_step is not None)

    def _pipeline_step_cost(self, plan: Plan) -> StepCost:
        """The table's step, slowed while the fallback lasts; the step in flight when it began
        runs its remaining part slowed, a step begun slowed keeps its cost."""
        costs = self.run.costs
        slowed = Help(slowdown=self.cfg.fallback_slowdown) if self.fallback_step is not None else None
        # which slot helps does not matter to a table: the whole step is slowed
        cost = costs.step(plan, helpers={slowed: ()} if slowed else None, slots=self.table_nodes)
        if not (self.credit and self.credit[0] == plan.step):
            # a step begun afresh (a re-formation may start the same step number over): no slowdown in flight
            self.slowed_from = None
            return cost
        done, in_flight = self.credit[1], (slowed if self.fallback_step == plan.step else None)
        if in_flight is not None:
            if self.slowed_from is None or self.slowed_from[0] != plan.step:
                self.slowed_from = (plan.step, done)  # the seconds it had run unslowed when the slowdown began
            else:  # interrupted again while slowed: the seconds since ran slowed, and its end stays (B:1100-1104)
                start = self.slowed_from[1]
                done = start + (done - start) / (self.cfg.fallback_slowdown or 2.0)
        return costs.rest_of_step(cost, done, in_flight)

    def plan(self, step: int) -> Plan:
        return self._pipeline_plan(step) if self.stages else super().plan(step)

    def step_cost(self, plan: Plan) -> StepCost:
        return self._pipeline_step_cost(plan) if self.stages else super().step_cost(plan)

    def quiet_steps(self, plan: Plan, step_s: float) -> Optional[int]:
        if self.stages:
            return None  # the re-formation rule is read after every step: stepped one at a time
        return super().quiet_steps(plan, step_s)

    def after_step(self, step: int) -> None:
        super().after_step(step)  # credit, checkpoints (the ring's rebalance: no cover here)
        if self.stages and self._should_reform():
            self._reform()
