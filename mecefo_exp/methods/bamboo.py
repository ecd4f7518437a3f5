"""Bamboo: redundant computation on a ring of workers (Thorpe et al., NSDI 2023).

In Bamboo each pipeline stage holds a copy of the next stage's weights and runs that
stage's forward redundantly inside the pipeline bubbles; when a node is preempted its
shadow finishes the step (little work lost) and does both stages' work until the
pipelines are rebalanced. Two adjacent failures lose a stage outright: restart from a
checkpoint, so Bamboo still checkpoints.

DP emulation (docs/METHODS.md). Pure data parallelism has no bubbles, so the redundancy is
paid in full and Bamboo's bubble advantage, structural to pipeline parallelism, is gone:

- Failure-free (method.mode=eager): every worker also runs the forward of the
  micro-batch of the worker it shadows. Worker j's shadow is the next worker after j on
  the ring (j+1, j+2, ... mod n among ring members), so worker k runs the forward of its
  ring predecessor's micro-batch. That forward changes no number, so it is not run on the
  model: it is charged on the clock from the profiled `mb:forward` kernel (the mode
  "forward" exists only so that the profile measures it). The charge is
  `ft_overhead` = how much the redundant forward lengthens the slowest worker, which is
  exactly one `mb:forward` in a failure-free step. method.mode=lazy runs no redundant
  forward (no overhead) and recomputes it after a failure instead.
- A failure of worker j. Its shadow s takes j's micro-batches from then on: the plan
  gives s a WorkItem(Sample(step, j)) in the normal mode beside its own, so the
  gradients stay exact and the loss curve is the failure-free one, bit for bit. The step
  the failure interrupts is not lost (`interrupted`): the time spent on it before the
  failure is booked to that step and the step finishes under the new plan, whose cost
  is the degraded step minus that time. Eager: the shadow already holds j's forward, so
  finishing costs its own work plus j's backward. Lazy: it must run j's forward too. In
  both cases the shadow's step totals two full micro-batches (forward and backward are
  serial on one worker, so the eager forward buys no time in DP; only the failure-free
  overhead differs).
- Degraded steps are charged by CostModel.step from the plan: the shadow's second
  normal micro-batch is `degraded_extra` (2x compute, against the 1.5x Bamboo's own
  simulator charges for a pipeline). The redundant forwards of the other workers still
  run; they are charged only where they would lengthen the step (the shadow, doing two
  full micro-batches and no redundant forward, is the slowest).
- Two adjacent failures are fatal: a worker fails while its ring successor (its shadow)
  is down, or while its ring predecessor is down (it was that worker's shadow, and its
  own shadow would have to cover two). Also fatal: no other ring member is alive. Fatal
  -> a `fatal` event and a rollback through the checkpoint path (detection + restart +
  load, spares replace every failed worker, the steps since the checkpoint are redone).
- Rebalance: after method.rebalance_after_s paper seconds of degradation (null: never)
  the ring is rebuilt over the alive workers, which restores redundancy (the former
  shadow may fail without it being fatal): each worker then shadows its new ring
  predecessor's whole load (one forward per micro-batch it holds). The stall is
  method.rebalance_stall_s paper seconds (Bamboo's simulator: 20 s for GPT-2/BERT
  class) through the paper-time map.

Readings where the papers are silent (ours):

- Ring direction: the shadow is the *next* worker on the ring (base.neighbors_on_ring),
  as for MeCeFO's neighbour; Bamboo's predecessor-holds-successor is the same ring read
  backwards.
- A rebalance in DP: down workers leave the ring; every alive worker keeps its own
  micro-batch and each orphaned one (a down worker's) goes to the least-loaded alive
  worker, ties to the nearest after the orphan on the ring. With whole micro-batches the
  slowest worker then holds ceil(n / alive), like Oobleck's re-split.
- A recovered worker rejoins through a rebalance (Bamboo adds nodes by reconfiguring),
  charged the same stall and logged as a `rebalance` with reason `rejoin`; the workers back at
  one instant (a machine, a repair tick) rejoin in one. A failed
  worker's cover therefore ends when it recovers or at a timed rebalance.
- No detection stall on a survivable failure: the shadow notices the failure through
  the collective's timeout and carries on, as MeCeFO's neighbour does in this harness.
- The redundant forward's activation memory is not modelled (no memory limit here).
- A step interrupted twice accumulates both elapsed parts; the rest is clamped at zero.
- method.checkpoint_interval=auto: Young/Daly with the mean time between *fatal*
  failures, the cluster MTBF over `rollback_share` (a neighbour down at failure time).

In a hybrid layout (parallel.pp >= 2; timing/layout.py) Bamboo is the real thing, not an
emulation: GPU g's shadow is the GPU at the same tensor rank of the same replica one stage before
(the last stage for stage 0), which holds g's stage's weights. Failure-free, every stage runs the
next stage's forward in its 1F1B idle time: only what does not fit is charged
(`timing/layout.redundant_forward_s`, 0 at m = p = 16 for 405B; lazy mode: none). A failure of g: its
shadow's slot does both stages' work from then on (`timing/layout.shadow_factor`, paced by the slowest
stage of the slowest replica); fatal when g's shadow is down, or the GPU g shadows is (g was
covering it). A rebalance (timer, or a rejoin: the failures or recoveries of one instant are one
re-formation, one stall) re-forms the pipelines without the nodes then down: their batch is
spread over the rest as for Oobleck (the pipeline part n / alive longer) and no cover is left.

Under a throughput table (hardware.compute=table, the Oobleck authors' model of Bamboo's
pipelines) the table already holds the redundant computation, so no forward is added; a step
runs at the table's throughput for the node count of the last (re)configuration, times
`method.fallback_slowdown` while a shadow covers a failed node; the part of the interrupted
step after the failure runs at that slowdown too; `rebalance_after_steps` rebalances after that
many degraded steps, and `fatal_restart_s` is the restart after adjacent failures.

`pipeline_stages` (table clock only) replaces the ring by pipelines with spares: the alive
nodes, in `start_order` at the first formation and `node_order` at every later one, fill
floor(alive / stages) pipelines stage by stage; the rest are idle spares. A removed pipeline
node's stage goes to the holder of the previous stage of its pipeline (stage 0 wraps to the
last); a removal is fatal when the removed node or that holder already holds two stages. The
first removal that a holder absorbs starts the fallback slowdown; after each completed step
the pipelines re-form (`rebalance_stall_s`) when a node holds two stages and the spares can
relieve it or a doubled node is more than 5% of the active ones (2 x doubled / active > 0.05),
or when the waiting nodes would complete another pipeline. Losing an idle spare changes
nothing (a subclass may say otherwise: `spare_loss_slows`). A fatal removal goes through the
harness's fall-back (a node trace has no spares: pipelines re-formed over the nodes there); a removal
during a re-formation's stall is not modelled.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ..timing.clock import StepCost, steps_ending_by
from ..timing import layout as pipeline
from ..plan import FORWARD, NORMAL, FailureFreePlan, Mode, Plan, Sample, SparsePlan, WorkItem
from .base import InPlaceMethod, plan_step, resplit_plan



class Bamboo(InPlaceMethod):
    #: pipelines with spares: whether losing an idle spare starts the fallback slowdown
    spare_loss_slows = False
    name = "bamboo"
    interval_key = "checkpoint_interval"

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.credit: Optional[Tuple[int, float]] = None  # (step, seconds done before a survived failure)
        self.cover_since: Optional[float] = None  # clock time of the oldest cover since the last rebalance
        self.degraded_steps = 0
        self.degraded_since_cover = 0  # degraded steps since the current cover began
        self.counts.update(neighbor_assignments=0, rebalances=0, survived_interruptions=0)
        self.retired: set = set()  # hybrid layout: nodes down at the last re-formation (left out of it)
        self._reset_ring()
        self.stages: Optional[int] = cfg.get("pipeline_stages")  # None: the ring of all workers
        if self.stages:
            self.counts.update(spares_lost=0)
            self.fallback_step: Optional[int] = None  # the step in flight when the fallback slowdown began
            self.node_order: List[int] = list(cfg.get("node_order") or range(self.n))
            self._form_pipelines(cfg.get("start_order") or list(range(self.n)))

    def begin_without(self, workers: List[int]) -> None:
        super().begin_without(workers)
        if self.stages:  # the first pipelines are formed from the nodes there
            self._form_pipelines(self.cfg.get("start_order") or list(range(self.n)))

    @property
    def layout(self):
        """The hybrid layout's shape (timing/layout.py), None in pure data parallelism."""
        costs = getattr(self.run, "costs", None)
        return None if costs is None else costs.shape

    def _reset_ring(self) -> None:
        self.retired = set()
        # The ring is every worker but those left out at the last rebalance, in worker order. Kept
        # sparse so that an event costs the same whatever the number of workers: `load` names only
        # the members whose owners differ from their own micro-batch, `heavy` counts those with more.
        self.left_out: set = set()
        self.load: Dict[int, List[int]] = {}  # ring member -> owners it computes, where not [itself]
        self.heavy = 0
        self.cover: Dict[int, int] = {}  # failed ring member -> its shadow
        self.cover_since = None
        self.table_nodes = self.n  # compute=table: nodes at the last (re)configuration
        self.degraded_since_cover = 0

    def job_start_s(self) -> float:
        own = self.cfg.get("fatal_restart_s")
        return super().job_start_s() if own is None else self.run.costs.stall_s(own)

    def restart_s(self) -> float:
        own = self.cfg.get("fatal_restart_s")
        return super().restart_s() if own is None else self.run.costs.stall_s(own)

    def modes(self) -> Dict[str, Mode]:
        return {"normal": NORMAL, "forward": FORWARD}

    def rollback_share(self, p_down: float) -> float:
        """A failure is fatal when one of the failed worker's (up to two) ring neighbours is
        down: about 1 - (1 - p_down) ** 2 under independent failures. This sets the
        Young/Daly interval of the fallback checkpoints."""
        if self.layout is not None:  # the shadow and the ward sit in other nodes (the stages around)
            return 1.0 - (1.0 - p_down) ** 2
        if self.n == 1 or self.run.failure_units < self.n:
            return 1.0  # a failing machine takes ring neighbours with it: every failure is fatal
        return 1.0 - (1.0 - p_down) ** min(2, self.n - 1)

    # ------------------------------------------------------------ membership
    def _ring_neighbors(self, worker: int) -> Tuple[int, int]:
        """The ring members before and after `worker` (itself when it is alone on the ring)."""
        return self._next_member(worker, -1), self._next_member(worker, 1)

    def _next_member(self, worker: int, direction: int) -> int:
        other = (worker + direction) % self.n
        while other in self.left_out and other != worker:
            other = (other + direction) % self.n
        return other

    def _owners(self, worker: int) -> List[int]:
        """The owners whose micro-batches a ring member computes."""
        return self.load.get(worker, [worker])

    def _set_owners(self, worker: int, owners: List[int]) -> None:
        self.heavy += (len(owners) > 1) - (len(self._owners(worker)) > 1)
        self.load[worker] = owners

    def on_failure(self, worker: int) -> None:
        super().on_failure(worker)
        self._lose(worker)

    def on_failures(self, workers: List[int]) -> None:
        """The failures of one instant (a whole machine): all are down before any is covered, since
        they cannot shadow each other, and a fatal one is one fall-back for all of them."""
        if self.stages:  # pipelines with spares
            return super().on_failures(workers)
        self.down.update(workers)
        fatal = self.counts["fatal"]
        for worker in workers:
            self._lose(worker)
            if self.counts["fatal"] > fatal:
                return

    def _lose(self, worker: int) -> None:
        """`worker` is down: its shadow covers it, or the failure is fatal."""
        if self.stages:
            return self._pipeline_failure(worker)
        if self.layout is not None:
            return self._layout_failure(worker)
        pred, succ = self._ring_neighbors(worker)
        if pred == worker or succ in self.down or pred in self.down:
            reason = "no other worker alive" if pred == worker else "adjacent failures"
            self.fall_back(worker, {"reason": reason, "predecessor": pred, "successor": succ,
                                    "cover": dict(self.cover)})
            return
        moved = self._owners(worker)
        self._set_owners(worker, [])
        self._set_owners(succ, self._owners(succ) + moved)
        self.cover[worker] = succ
        if self.cover_since is None:
            self.cover_since = self.run.clock.now
        self.counts["neighbor_assignments"] += 1
        self.run.event("neighbor", worker, {"neighbor": succ, "owners": moved, "mode": self.cfg.mode,
                                            "recompute_forward": self.cfg.mode == "lazy"})

    def on_recoveries(self, workers: List[int]) -> None:
        """Workers back at one instant (a replaced machine, a repair tick) rejoin in one rebalance."""
        if self.stages:  # pipelines with spares: all of them wait, then one decision
            back = [w for w in workers if self._wait_as_spare(w)]
            if back and self.credit is None and self._should_reform():
                self._reform()
            return
        back = [w for w in workers if self.rejoins(w)]
        if not back:
            return
        if self.layout is not None:
            self._layout_rebalance("rejoin", back)
        else:
            self._rebalance("rejoin", back[0])

    def on_recover(self, worker: int) -> None:
        self.on_recoveries([worker])

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
        """Adjacent failures: spares replace every failed worker, the ring is whole again (under a
        node trace, the ring is formed of the nodes there)."""
        self._reset_ring()
        self.credit = None  # the interrupted step, if any, is rolled back with the rest
        if self.stages:
            self._form_pipelines(self.node_order)
        elif self.layout is None and self.down:
            self._leave_out_down()

    # ------------------------------------------------------------ a hybrid layout
    def _stage_neighbours(self, gpu: int) -> Tuple[int, int]:
        """The GPUs at gpu's tensor rank and replica one stage before (its shadow, holding gpu's
        stage's weights) and one stage after (the GPU it shadows), wrapping around the stages.
        Nodes left out of the last re-formation are skipped: the pipeline was re-formed without
        them (its stages' weights moved along; assumption: onto the neighbours in stage order)."""
        per_stage = self.layout.tp * self.layout.dp  # Megatron's rank order: stages outermost

        def along(step: int) -> int:
            other = (gpu + step) % self.n
            while other in self.retired and other != gpu:
                other = (other + step) % self.n
            return other

        return along(-per_stage), along(per_stage)

    def _layout_failure(self, worker: int) -> None:
        shadow, ward = self._stage_neighbours(worker)
        if shadow == worker:
            self.fall_back(worker, {"reason": "no other node in its pipeline", "cover": dict(self.cover)})
            return
        if {shadow, ward} & (self.down - self.retired):  # down, and not yet re-formed around
            self.fall_back(worker, {"reason": "adjacent failures", "shadow": shadow, "ward": ward,
                                    "cover": dict(self.cover)})
            return
        self.cover[worker] = shadow
        if self.cover_since is None:
            self.cover_since = self.run.clock.now
        self.counts["neighbor_assignments"] += 1
        self.run.event("neighbor", worker, {"neighbor": shadow, "stage": self.layout.stage(worker),
                                            "mode": self.cfg.mode, "recompute_forward": self.cfg.mode == "lazy"})

    def _layout_rebalance(self, reason: str, workers: Optional[List[int]]) -> None:
        """Re-form the pipelines without the nodes down now: no cover left, their batch spread."""
        stall = self.run.costs.stall_s(self.cfg.rebalance_stall_s)
        self.run.clock.charge("stall", stall)
        self.retired = set(self.down)
        self.cover = {}
        self.cover_since = None
        self.degraded_since_cover = 0
        self.counts["rebalances"] += 1
        self.run.event("rebalance", workers[0] if workers else None,
                       {"reason": reason, "workers": workers, "left_out": len(self.retired), "stall_s": stall})

    def _layout_plan(self, step: int) -> Plan:
        if not self.cover and not self.retired:
            return FailureFreePlan(step, self.n)
        cover, retired, down = dict(self.cover), set(self.retired), set(self.down)

        def changes() -> Dict[int, List[WorkItem]]:  # made only when read: the clock needs the notes
            out = resplit_plan(step, self.n, retired).changes if retired else {w: [] for w in down}
            for failed, shadow in cover.items():
                out[shadow] = out.get(shadow, [WorkItem(Sample(step, shadow))]) + [WorkItem(Sample(step, failed))]
            return out
        return SparsePlan(step, self.n, changes, degraded=True, notes={"cover": cover, "retired": len(retired)})

    def _layout_step_cost(self, plan: Plan) -> StepCost:
        costs = self.run.costs
        kernels = costs.profile.kernels
        rc = pipeline.redundant_forward_s(kernels) if self.cfg.mode == "eager" else 0.0
        cover, retired = plan.notes.get("cover", {}), plan.notes.get("retired", 0)
        factors = {}
        for shadow in cover.values():
            stage = self.layout.stage(shadow)
            factors[stage] = pipeline.shadow_factor(kernels, stage)
        cost = costs.layout_step(factors, share=self.n / (self.n - retired), ft_overhead=rc)
        if self.credit and self.credit[0] == plan.step:
            cost = _minus(cost, self.credit[1])
        return cost

    # ------------------------------------------------------------ pipelines with spares
    def _form_pipelines(self, order: List[int]) -> None:
        """Fill floor(alive / stages) pipelines stage by stage in `order`; the rest are spares."""
        alive = [w for w in order if w not in self.down]
        pipes = len(alive) // self.stages
        self.holds: Dict[int, List[Tuple[int, int]]] = {
            w: [(i // self.stages, i % self.stages)] for i, w in enumerate(alive[:pipes * self.stages])}
        self.pipes = pipes
        self.table_nodes = len(alive)  # the table counts every usable node, spares included
        self.fallback_step = None

    def _spares(self) -> List[int]:
        return [w for w in range(self.n) if w not in self.down and w not in self.holds]

    def _pipeline_failure(self, worker: int) -> None:
        held = self.holds.pop(worker, [])
        if held:
            pipe, stage = held[0]
            before = (pipe, (stage - 1) % self.stages)
            holder = None if len(held) > 1 else next(
                (w for w in self.node_order if before in self.holds.get(w, ())), None)
            if holder is None or len(self.holds[holder]) > 1:  # it held two stages, or its shadow does
                self.holds[worker] = held  # fall_back re-forms from scratch
                return self.fall_back(worker, {"reason": "adjacent failures", "stage": [pipe, stage],
                                               "holder": holder})
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
        slow = (self.cfg.get("fallback_slowdown") or 2.0) if self.fallback_step is not None else 1.0
        if not (self.credit and self.credit[0] == plan.step):
            return costs.table_step(self.table_nodes, slow)
        if self.fallback_step == plan.step:
            left = max(0.0, costs.table.step_s(self.table_nodes) - self.credit[1])
            return StepCost(compute=left, degraded_extra=(slow - 1.0) * left)
        return _minus(costs.table_step(self.table_nodes, slow), self.credit[1])

    def _leave_out_down(self) -> None:
        """The ring is the workers up now; the down workers' micro-batches are dealt over it."""
        self.left_out = set(self.down)
        self.load = _deal(self.n, self.down)
        self.heavy = sum(1 for owners in self.load.values() if len(owners) > 1)
        self.cover = {}
        self.cover_since = None
        self.degraded_since_cover = 0
        self.table_nodes = self.n - len(self.down)

    def _rebalance(self, reason: str, worker: Optional[int]) -> None:
        stall = self.run.costs.stall_s(self.cfg.rebalance_stall_s)
        self.run.clock.charge("stall", stall)
        self._leave_out_down()
        self.counts["rebalances"] += 1
        self.run.event("rebalance", worker, {"reason": reason, "left_out": sorted(self.down), "stall_s": stall,
                                             "extra": {w: self.load[w][1:] for w in sorted(self.load)}})

    # ------------------------------------------------------------ the step
    def plan(self, step: int) -> Plan:
        if self.stages:
            return self._pipeline_plan(step)
        if self.layout is not None:
            return self._layout_plan(step)
        def changes() -> Dict[int, List[WorkItem]]:  # read by the numerics only
            out: Dict[int, List[WorkItem]] = {w: [] for w in self.down | self.left_out}
            for w, owners in self.load.items():
                if w not in self.down:
                    out[w] = [WorkItem(Sample(step, owner)) for owner in sorted(owners)]
            return out
        # the left-out workers were down at the rebalance and rejoin only through the next one
        return SparsePlan(step, self.n, changes, degraded=self.heavy > 0, n_computing=self.n - len(self.down),
                          notes={"cover": self.cover} if self.cover else {})

    def redundant_forward_s(self, plan: Plan) -> float:
        """How much the eager redundant forwards lengthen the step beyond the slowest planned worker."""
        if self.cfg.mode != "eager":
            return 0.0
        costs = self.run.costs
        forward = costs.profile[FORWARD.kernel]
        down = self.down

        def worker_s(owners: int) -> float:
            return costs.worker_s(("normal",) * owners)

        # each computing worker w shadows its ring predecessor p (unless p is w or down): the term
        # depends only on (owners of p, owners of w), so the pairs around the members with other
        # loads and one pair of plain members (if any) give the maximum, without walking the ring
        pairs = set()
        for w, owners in self.load.items():
            if w in down:
                continue
            pred, succ = self._ring_neighbors(w)
            if owners and pred != w and pred not in down:
                pairs.add((len(self._owners(pred)), len(owners)))
            if succ != w and succ not in down and self._owners(succ):
                pairs.add((len(owners), len(self._owners(succ))))
        plain = self._plain_pair()
        if plain:
            pairs.add((1, 1))
        loaded = [len(o) for w, o in self.load.items() if w not in down]
        plain_members = self.n - len(down) - len(loaded)  # the left-out are down
        slowest = worker_s(max(loaded + [1] * (plain_members > 0)))
        extra = 0.0
        for pred_owners, owners in sorted(pairs):
            extra = max(extra, pred_owners * forward - (slowest - worker_s(owners)))
        return extra

    def _plain_pair(self) -> bool:
        """Whether some alive ring member with its own micro-batch only follows another such one.
        Each member that is down or has another load blocks at most its successor, so the walk
        ends within a few members past them unless nearly every worker is down."""
        for w in range(self.n):
            if w in self.left_out or w in self.down or w in self.load:
                continue
            pred = self._next_member(w, -1)
            if pred != w and pred not in self.down and pred not in self.load:
                return True
        return False

    def step_cost(self, plan: Plan) -> StepCost:
        if self.stages:
            return self._pipeline_step_cost(plan)
        if self.layout is not None:
            return self._layout_step_cost(plan)
        if self.run.costs.table is not None:
            return self._table_step_cost(plan)
        base = plan_step(self.run.costs, plan)
        cost = StepCost(compute=base.compute, comm=base.comm, ft_overhead=self.redundant_forward_s(plan),
                        degraded_extra=base.degraded_extra)
        if self.credit and self.credit[0] == plan.step:
            cost = _minus(cost, self.credit[1])
        return cost

    def _table_step_cost(self, plan: Plan) -> StepCost:
        """The table's step at the last configuration's node count; slowed while covering. The
        part of an interrupted step done before the failure ran at the speed it was started at;
        what remains runs at the slowdown."""
        slow = (self.cfg.get("fallback_slowdown") or 2.0) if self.cover else 1.0
        costs = self.run.costs
        if not (self.credit and self.credit[0] == plan.step):
            return costs.table_step(self.table_nodes, slow)
        normal = costs.table.step_s(self.table_nodes)
        left = max(0.0, normal - self.credit[1])
        return StepCost(compute=left, degraded_extra=(slow - 1.0) * left)

    def interrupted(self, plan: Plan, elapsed: float) -> None:
        """The step survives the failure: what was done is booked to it, not lost.

        If the failure turns out fatal, the rollback discards this step and moves the
        booked time to lost_work with it.
        """
        self.run.clock.add_to_step(plan.step, "compute", elapsed)
        done = self.credit[1] if self.credit and self.credit[0] == plan.step else 0.0
        self.credit = (plan.step, done + elapsed)

    def before_optimizer(self, plan: Plan, result) -> None:
        if plan.degraded:
            self.degraded_steps += 1
            self.degraded_since_cover += 1

    def steady_steps(self, plan: Plan, step_s: float) -> Optional[int]:
        """Quiet until the next checkpoint or rebalance (after so many degraded steps, or once the
        cover is old enough); a step that survived a failure is an event of its own."""
        if self.stages:
            return None  # the pipelines' re-formation rule is read after every step: stepped one at a time
        if self.credit:
            return 0
        quiet = super().steady_steps(plan, step_s)
        if self.cover:
            after_steps = self.cfg.get("rebalance_after_steps")
            if after_steps is not None and plan.degraded:
                quiet = min(quiet, max(0, after_steps - self.degraded_since_cover - 1))
            if self.cfg.rebalance_after_s is not None:
                due_s = self.cover_since + self.run.costs.stall_s(self.cfg.rebalance_after_s)
                quiet = min(quiet, steps_ending_by(self.run.clock.now, step_s, due_s))
        return quiet

    def book_steady(self, plan: Plan, count: int) -> None:
        if plan.degraded:
            self.degraded_steps += count
            self.degraded_since_cover += count

    def after_step(self, step: int) -> None:
        if self.credit and self.credit[0] == step:  # an interrupted step committed: it survived
            self.credit = None
            self.counts["survived_interruptions"] += 1
        super().after_step(step)  # checkpoints
        if self.stages:
            if self._should_reform():
                self._reform()
            return
        after, after_steps = self.cfg.rebalance_after_s, self.cfg.get("rebalance_after_steps")
        rebalance = self._layout_rebalance if self.layout is not None else self._rebalance
        if self.cover and after_steps is not None and self.degraded_since_cover >= after_steps:
            rebalance("degraded steps", None)
        elif self.cover and after is not None and self.run.clock.now - self.cover_since >= self.run.costs.stall_s(after):
            rebalance("timer", None)

    def summary(self) -> Dict[str, object]:
        out = super().summary()
        out.update(self.counts)
        out.update(degraded_steps=self.degraded_steps, bamboo_mode=self.cfg.mode)
        if self.layout is not None:
            out["redundant_forward_s"] = pipeline.redundant_forward_s(self.run.costs.profile.kernels)
        return out


def _deal(n: int, down: set) -> Dict[int, List[int]]:
    """A rebalance: every down worker's micro-batch to the least loaded alive worker, the nearest
    after it on the ring among equals, in owner order. Returns the alive workers that compute more
    than their own micro-batch -> their owners. While there are no more orphans than alive workers
    each goes to the nearest alive successor not yet given one, found without walking the ring."""
    orphans = sorted(down)
    load: Dict[int, List[int]] = {}
    if len(orphans) <= n - len(orphans):
        for orphan in orphans:
            target = (orphan + 1) % n
            while target in down or target in load:
                target = (target + 1) % n
            load[target] = [target, orphan]
        return load
    alive = [w for w in range(n) if w not in down]
    full = {w: [w] for w in alive}
    for orphan in orphans:
        target = min(alive, key=lambda w: (len(full[w]), (w - orphan) % n))
        full[target].append(orphan)
    return {w: owners for w, owners in full.items() if len(owners) > 1}


def _minus(cost: StepCost, seconds: float) -> StepCost:
    """`cost` less the part of it already spent (taken from compute first)."""
    parts = cost.as_dict()
    for cat in ("compute", "degraded_extra", "comm", "ft_overhead"):
        take = min(parts[cat], seconds)
        parts[cat] -= take
        seconds -= take
    return StepCost(**parts)
