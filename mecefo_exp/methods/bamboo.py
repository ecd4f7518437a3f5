"""Bamboo: redundant computation on a ring of workers (Thorpe et al., NSDI 2023).

Each stage holds a copy of the next stage's weights and runs its forward redundantly; when a node
fails its shadow finishes the step and does both stages' work until the pipelines are rebalanced.
Two adjacent failures lose a stage outright: restart from a checkpoint. Here in two settings,
with the same shadow rule: the data-parallel ring (an emulation: no bubbles, the redundancy paid
in full) and a hybrid layout's real pipelines (the redundant forward in the 1F1B idle slots); the
pipelines with idle spares that the Oobleck artifact's simulator runs are the replay's
(replay/bamboo_pipelines.py).
docs/METHODS.md ("Bamboo in the harness") has every rule and each reading where the papers are
silent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ..config import at_least, choices
from ..plan import FORWARD, NORMAL, FailureFreePlan, Mode, Plan, Sample, SparsePlan, WorkItem, resplit_plan
from ..timing.clock import StepCost, steps_ending_by
from ..timing.steps import Help, RedundantForward
from .checkpointed import CheckpointedConfig
from .in_place import InPlaceMethod
from .setting_roles import FALLBACK, role


@dataclass
class BambooConfig(CheckpointedConfig):
    # eager: redundant forward every step | lazy: recompute on failure
    mode: str = field(default="eager", metadata=choices("eager", "lazy"))
    # paper seconds degraded before a rebalance (None: never)
    rebalance_after_s: Optional[float] = field(default=None, metadata=at_least(0, "paper seconds (null: never)"))
    # Bamboo simulator, GPT-2/BERT class (docs/METHODS.md)
    rebalance_stall_s: float = field(default=20.0, metadata=at_least(0, "paper seconds"))
    rebalance_after_steps: Optional[int] = field(default=None, metadata=at_least(1, "steps"))  # None: rebalance_after_s
    checkpoint_interval: Any = field(default="auto", metadata=role(FALLBACK))  # when the shadows cannot cover
    # under a throughput table (conf/hardware/table.yaml): the step time while a shadow covers a
    # failed node, as a multiple of the failure-free one (None: the shadow's two micro-batches)
    fallback_slowdown: Optional[float] = field(
        default=None, metadata=at_least(1, "(a multiple of the failure-free step)")
    )


class Bamboo(InPlaceMethod):
    label = "Bamboo"
    Config = BambooConfig
    holds_next_stage = True  # the shadow: each stage runs the next stage's forward too

    @classmethod
    def check_config(cls, m, cfg) -> Optional[str]:
        """The shadow is the previous pipeline stage: a tensor-parallel layout needs stages."""
        p = cfg.get("parallel")
        if p is None or p.tp == 1 or p.pp >= 2:
            return None
        layout = f"parallel.tp={p.tp} x pp={p.pp} x dp={p.dp if p.dp is not None else 'auto'}"
        return f"method=bamboo with {layout}: Bamboo's shadow is the previous pipeline stage: needs parallel.pp >= 2"

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.credit: Optional[Tuple[int, float]] = None  # (step, seconds done before a survived failure)
        self.cover_since: Optional[float] = None  # clock time of the oldest cover since the last rebalance
        self.degraded_steps = 0
        self.degraded_since_cover = 0  # degraded steps since the current cover began
        self.counts.update(neighbor_assignments=0, rebalances=0, survived_interruptions=0)
        self._reset_ring()

    @property
    def layout(self):
        """Where each GPU sits in a hybrid layout (timing/layout.py), None in pure data parallelism."""
        return self.run.placement

    def _reset_ring(self) -> None:
        # The ring is every worker but those left out at the last rebalance, in worker order. Kept
        # sparse so that an event costs the same whatever the number of workers: `load` names only
        # the members whose owners differ from their own micro-batch, `heavy` counts those with more.
        self.left_out: set = set()
        self.load: Dict[int, List[int]] = {}  # ring member -> owners it computes, where not [itself]
        self.heavy = 0
        self.cover: Dict[int, int] = {}  # failed ring member -> its shadow
        self.cover_since = None
        self.degraded_since_cover = 0

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

    def on_failures(self, workers: List[int]) -> None:
        """The failures of one instant (a whole machine): all are down before any is covered, since
        they cannot shadow each other, and a fatal one is one fall-back for all of them."""
        self.down.update(workers)
        fatal = self.counts["fatal"]
        for worker in workers:
            self._lose(worker)
            if self.counts["fatal"] > fatal:
                return

    def _lose(self, worker: int) -> None:
        """`worker` is down: its shadow covers it, or the failure is fatal."""
        if self.layout is not None:
            return self._layout_failure(worker)
        pred, succ = self._ring_neighbors(worker)
        if pred == worker or succ in self.down or pred in self.down:
            reason = "no other worker alive" if pred == worker else "adjacent failures"
            self.fall_back(
                worker, {"reason": reason, "predecessor": pred, "successor": succ, "cover": dict(self.cover)}
            )
            return
        moved = self._owners(worker)
        self._set_owners(worker, [])
        self._set_owners(succ, self._owners(succ) + moved)
        self.cover[worker] = succ
        if self.cover_since is None:
            self.cover_since = self.run.clock.now
        self.counts["neighbor_assignments"] += 1
        self.run.event(
            "neighbor",
            worker,
            {"neighbor": succ, "owners": moved, "mode": self.cfg.mode, "recompute_forward": self.cfg.mode == "lazy"},
        )

    def on_recoveries(self, workers: List[int]) -> None:
        """Workers back at one instant (a replaced machine, a repair tick) rejoin in one rebalance."""
        back = [w for w in workers if self.rejoins(w)]
        if not back:
            return
        if self.layout is not None:
            self._layout_rebalance("rejoin", back)
        else:
            self._rebalance("rejoin", back[0])

    def after_fall_back(self) -> None:
        """Adjacent failures: spares replace every failed worker, the ring is whole again (under a
        node trace, the ring is formed of the nodes there)."""
        self._reset_ring()
        self.credit = None  # the interrupted step, if any, is rolled back with the rest
        if self.layout is None and self.down:
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
            while other in self.left_out and other != gpu:
                other = (other + step) % self.n
            return other

        return along(-per_stage), along(per_stage)

    def _layout_failure(self, worker: int) -> None:
        shadow, ward = self._stage_neighbours(worker)
        if shadow == worker:
            self.fall_back(worker, {"reason": "no other node in its pipeline", "cover": dict(self.cover)})
            return
        if {shadow, ward} & (self.down - self.left_out):  # down, and not yet re-formed around
            self.fall_back(
                worker, {"reason": "adjacent failures", "shadow": shadow, "ward": ward, "cover": dict(self.cover)}
            )
            return
        self.cover[worker] = shadow
        if self.cover_since is None:
            self.cover_since = self.run.clock.now
        self.counts["neighbor_assignments"] += 1
        self.run.event(
            "neighbor",
            worker,
            {
                "neighbor": shadow,
                "stage": self.layout.stage(worker),
                "mode": self.cfg.mode,
                "recompute_forward": self.cfg.mode == "lazy",
            },
        )

    def _layout_rebalance(self, reason: str, workers: Optional[List[int]]) -> None:
        """Re-form the pipelines without the nodes down now: no cover left, their batch spread."""
        stall = self.run.costs.stall_s(self.cfg.rebalance_stall_s)
        self.run.clock.charge("stall", stall)
        self.left_out = set(self.down)
        self.cover = {}
        self.cover_since = None
        self.degraded_since_cover = 0
        self.counts["rebalances"] += 1
        self.run.event(
            "rebalance",
            workers[0] if workers else None,
            {"reason": reason, "workers": workers, "left_out": len(self.left_out), "stall_s": stall},
        )

    def _layout_plan(self, step: int) -> Plan:
        if not self.cover and not self.left_out:
            return FailureFreePlan(step, self.n)
        cover, retired, down = dict(self.cover), set(self.left_out), set(self.down)

        def changes() -> Dict[int, List[WorkItem]]:  # made only when read: the clock needs only the cover
            out = resplit_plan(step, self.n, retired).changes if retired else {w: [] for w in down}
            for failed, shadow in cover.items():
                out[shadow] = out.get(shadow, [WorkItem(Sample(step, shadow))]) + [WorkItem(Sample(step, failed))]
            return out

        return SparsePlan(step, self.n, changes, degraded=True, cover=cover)

    def _leave_out_down(self) -> None:
        """The ring is the workers up now; the down workers' micro-batches are dealt over it."""
        self.left_out = set(self.down)
        self.load = _deal(self.n, self.down)
        self.heavy = sum(1 for owners in self.load.values() if len(owners) > 1)
        self.cover = {}
        self.cover_since = None
        self.degraded_since_cover = 0

    def _rebalance(self, reason: str, worker: Optional[int]) -> None:
        stall = self.run.costs.stall_s(self.cfg.rebalance_stall_s)
        self.run.clock.charge("stall", stall)
        self._leave_out_down()
        self.counts["rebalances"] += 1
        self.run.event(
            "rebalance",
            worker,
            {
                "reason": reason,
                "left_out": sorted(self.down),
                "stall_s": stall,
                "extra": {w: self.load[w][1:] for w in sorted(self.load)},
            },
        )

    # ------------------------------------------------------------ the step
    def plan(self, step: int) -> Plan:
        if self.layout is not None:
            return self._layout_plan(step)

        def changes() -> Dict[int, List[WorkItem]]:  # read by the numerics only
            out: Dict[int, List[WorkItem]] = {w: [] for w in self.down | self.left_out}
            for w, owners in self.load.items():
                if w not in self.down:
                    out[w] = [WorkItem(Sample(step, owner)) for owner in sorted(owners)]
            return out

        # the left-out workers were down at the rebalance and rejoin only through the next one
        return SparsePlan(
            step,
            self.n,
            changes,
            degraded=self.heavy > 0,
            n_computing=self.n - len(self.down),
            cover=self.cover if self.cover else None,
        )

    def _redundant(self) -> Optional[RedundantForward]:
        """Eager mode: each computing worker w also runs the forwards of its ring predecessor p's
        micro-batches (unless p is w or down). The cost depends only on (owners of p, owners of w),
        so the pairs around the members with other loads and one pair of plain members (if any)
        are all the clock needs, found without walking the ring."""
        if self.cfg.mode != "eager":
            return None
        down = self.down
        pairs = set()
        for w, owners in self.load.items():
            if w in down:
                continue
            pred, succ = self._ring_neighbors(w)
            if owners and pred != w and pred not in down:
                pairs.add((len(self._owners(pred)), len(owners)))
            if succ != w and succ not in down and self._owners(succ):
                pairs.add((len(owners), len(self._owners(succ))))
        if self._plain_pair():
            pairs.add((1, 1))
        loaded = [len(o) for w, o in self.load.items() if w not in down]
        plain_members = self.n - len(down) - len(loaded)  # the left-out are down
        return RedundantForward(frozenset(pairs), max(loaded + [1] * (plain_members > 0)))

    def redundant_forward_s(self) -> float:
        """Seconds the redundant forwards add to a step now (the clock's answer; lazy mode: none)."""
        redundant = self._redundant()
        return 0.0 if redundant is None else self.run.costs.redundant_s(redundant)

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
        """Each shadow takes over its ward's part of the model (its micro-batches in the ring, its
        stage in a pipeline); the job keeps every slot but those left out at the last re-formation;
        eager mode adds the redundant forwards. The part of an interrupted step done before the
        failure was done at the speed it started at (the clock says what is left)."""
        costs = self.run.costs
        shadow = Help(slowdown=self.cfg.fallback_slowdown)
        cover = plan.cover or {}  # failed worker -> its shadow (_layout_plan)
        cost = costs.step(
            plan,
            helpers={shadow: cover.values()} if cover else None,
            slots=self.n - len(self.left_out),
            redundant=self._redundant(),
        )
        if self.credit and self.credit[0] == plan.step:
            cost = costs.rest_of_step(cost, self.credit[1], shadow if cover else None)
        return cost

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

    def quiet_steps(self, plan: Plan, step_s: float) -> int:
        """Quiet until the next checkpoint or rebalance (after so many degraded steps, or once the
        cover is old enough); a step that survived a failure is an event of its own."""
        if self.credit:
            return 0
        quiet: float = super().quiet_steps(plan, step_s)
        if self.cover:
            after_steps = self.cfg.rebalance_after_steps
            if after_steps is not None and plan.degraded:
                quiet = min(quiet, max(0, after_steps - self.degraded_since_cover - 1))
            if self.cfg.rebalance_after_s is not None:
                assert self.cover_since is not None  # set with the first cover
                due_s = self.cover_since + self.run.costs.stall_s(self.cfg.rebalance_after_s)
                quiet = min(quiet, steps_ending_by(self.run.clock.now, step_s, due_s))
        return int(quiet)  # a whole number: no more than the checkpoint's steps

    def after_quiet_steps(self, plan: Plan, first: int, last: int, step_s: float) -> None:
        if plan.degraded:
            count = last + 1 - first
            self.degraded_steps += count
            self.degraded_since_cover += count

    def after_step(self, step: int) -> None:
        if self.credit and self.credit[0] == step:  # an interrupted step committed: it survived
            self.credit = None
            self.counts["survived_interruptions"] += 1
        super().after_step(step)  # checkpoints
        after, after_steps = self.cfg.rebalance_after_s, self.cfg.rebalance_after_steps
        rebalance = self._layout_rebalance if self.layout is not None else self._rebalance
        if self.cover and after_steps is not None and self.degraded_since_cover >= after_steps:
            rebalance("degraded steps", None)
        elif (
            self.cover
            and after is not None
            and self.cover_since is not None  # set when the first cover began
            and self.run.clock.now - self.cover_since >= self.run.costs.stall_s(after)
        ):
            rebalance("timer", None)

    def summary(self) -> Dict[str, object]:
        out = super().summary()
        out.update(self.counts)
        out.update(degraded_steps=self.degraded_steps, bamboo_mode=self.cfg.mode)
        if self.layout is not None:
            out["redundant_forward_s"] = self.redundant_forward_s()
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
